"""pytest fixtures for the real test apiserver (registered through the ``pytest11`` entry point).

A cluster that cannot be built or started makes the tests that use it **fail** with the
reason (Go missing, build error, server log); they are never skipped silently.
"""

from __future__ import annotations

from collections.abc import Iterator

import kubernetes.client
import pytest

from resourceslice.testing.cluster import TestCluster, start_cluster


@pytest.fixture(scope="session")
def kube_cluster() -> Iterator[TestCluster]:
    """One kube-apiserver + etcd for the whole session; removed at its end."""
    cluster = start_cluster()
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture(scope="module")
def module_kube_cluster() -> Iterator[TestCluster]:
    """A cluster of the test module's own: for tests that kill, freeze or restart it."""
    cluster = start_cluster()
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def kube_client(kube_cluster: TestCluster) -> Iterator[kubernetes.client.ApiClient]:
    """A fresh admin (system:masters) client of the session's cluster."""
    client = kube_cluster.api_client("admin")
    try:
        yield client
    finally:
        client.close()
