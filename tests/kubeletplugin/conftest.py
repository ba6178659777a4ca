from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest

from resourceslice.testing import TestCluster
from resourceslice.testing.kubelet import KubeletHarness
from support.controller_env import library_client
from support.kubelet_env import Node


@pytest.fixture
def node_dir() -> Iterator[Path]:
    """kubelet's directories of one test: ``registry/`` and ``plugins/``. Short, under /tmp:
    a Unix socket's path has at most 107 bytes."""
    directory = Path(tempfile.mkdtemp(prefix="kp-", dir="/tmp"))
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def kubelet(node_dir: Path) -> Iterator[KubeletHarness]:
    """kubelet's plugin manager and DRA client watching ``node_dir/registry``."""
    with KubeletHarness.start(node_dir / "registry", log_path=node_dir / "kubelet.log") as harness:
        yield harness


@pytest.fixture
def kube_client(kube_cluster: TestCluster) -> Iterator[Any]:
    """The plugin's client: an ApiClient, or the library's Connection in the pass of
    ``make test`` with ``RESOURCESLICE_TEST_CLIENT=connection`` (these tests talk to the
    cluster through the library's requests only)."""
    client = library_client(kube_cluster, "admin")
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def node_type() -> type[Any]:
    """What ``node`` makes: the shared ``Node``, unless a module defines a node of its own (made
    from the same arguments, with ``close()``) and overrides this fixture."""
    return Node


@pytest.fixture
def node(
    request: pytest.FixtureRequest,
    node_dir: Path,
    kube_client: kubernetes.client.ApiClient,
    node_type: type[Any],
) -> Iterator[Any]:
    env = node_type(request, node_dir, kube_client)
    try:
        yield env
    finally:
        env.close()
