"""pytest fixtures for the real test apiserver (registered through the ``pytest11`` entry point).

A cluster that cannot be built or started makes the tests that use it **fail** with the
reason (Go missing, build error, server log); they are never skipped silently.

The ini option ``dra_containers`` says whether the DRA cluster fixtures run their pods'
containers with runc: ``auto`` (the default: where runc can run), ``require`` (fail where it
cannot) or ``off``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import kubernetes.client
import pytest

from resourceslice.testing.cluster import (
    DEFAULT_RELEASE,
    ClusterError,
    TestCluster,
    releases,
    start_cluster,
)
from resourceslice.testing.dra import DRACluster, running_dra_cluster


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        "dra_containers",
        "whether the DRA cluster fixtures run containers with runc: auto, require or off",
        default="auto",
    )


def dra_containers(config: pytest.Config) -> bool | None:
    """``start_dra_cluster``'s ``containers`` for the ``dra_containers`` ini option."""
    value = str(config.getini("dra_containers"))
    choices: dict[str, bool | None] = {"auto": None, "require": True, "off": False}
    if value not in choices:
        raise pytest.UsageError(f"dra_containers = {value!r}: give auto, require or off")
    return choices[value]


def tested_releases() -> tuple[str, ...]:
    """Releases the ``release_*`` fixtures run on: all of them, or ``RESOURCESLICE_RELEASES``.

    ``RESOURCESLICE_RELEASES=1.37,1.33`` (comma-separated) narrows the list, e.g. on a machine
    that should not spend the first build of every older server.
    """
    chosen = os.environ.get("RESOURCESLICE_RELEASES")
    try:
        known = releases()
    except ClusterError:  # no Go module to build from: the fixtures then fail with why
        known = (DEFAULT_RELEASE,)
    if not chosen:
        return known
    wanted = tuple(r.strip() for r in chosen.split(",") if r.strip())
    unknown = [r for r in wanted if r not in known]
    if unknown:
        raise pytest.UsageError(
            f"RESOURCESLICE_RELEASES: no test server for {', '.join(unknown)} "
            f"(known: {', '.join(known)})"
        )
    return wanted


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


@pytest.fixture(scope="session", params=tested_releases())
def release_cluster(request: pytest.FixtureRequest) -> Iterator[TestCluster]:
    """One cluster per Kubernetes release, for the session: a test using it runs on each.

    The test id carries the release (``test_x[1.33]``); ``cluster.release`` says it too.
    """
    cluster = start_cluster(release=request.param)
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def release_client(release_cluster: TestCluster) -> Iterator[kubernetes.client.ApiClient]:
    """A fresh admin client of :func:`release_cluster`."""
    client = release_cluster.api_client("admin")
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def dra_cluster(pytestconfig: pytest.Config) -> Iterator[DRACluster]:
    """A DRA cluster of the test's own: an apiserver with kube-scheduler, the resourceclaim
    controller and simulated kubelets (:mod:`resourceslice.testing.dra`); the test adds its
    nodes with ``dra_cluster.add_node(...)``. Stopped and removed after the test."""
    with running_dra_cluster(containers=dra_containers(pytestconfig)) as cluster:
        yield cluster


@pytest.fixture(params=tested_releases())
def release_dra_cluster(request: pytest.FixtureRequest) -> Iterator[DRACluster]:
    """:func:`dra_cluster` once per Kubernetes release: the apiserver and every component of
    that release (the test id carries it: ``test_x[1.33]``)."""
    with running_dra_cluster(
        release=request.param, containers=dra_containers(request.config)
    ) as cluster:
        yield cluster
