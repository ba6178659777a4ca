"""The fixtures of the command's tests on the real apiserver: a driver of the test's own, the
admin kubeconfig, the slices API (the driver's slices deleted after the test), a Node."""

from __future__ import annotations

import re
from collections.abc import Iterator

import kubernetes.client
import pytest

from resourceslice.testing import TestCluster


@pytest.fixture
def driver(request: pytest.FixtureRequest) -> str:
    """A driver of this test's own: tests never see each other's slices."""
    return re.sub(r"[^a-z0-9]+", "-", request.node.name.lower())[:40].strip("-") + ".cli.test"


@pytest.fixture
def kubeconfig(kube_cluster: TestCluster) -> str:
    return str(kube_cluster.kubeconfigs["admin"])


@pytest.fixture
def resource_api(
    kube_client: kubernetes.client.ApiClient, driver: str
) -> Iterator[kubernetes.client.ResourceV1Api]:
    api = kubernetes.client.ResourceV1Api(kube_client)
    yield api
    api.delete_collection_resource_slice(field_selector=f"spec.driver={driver}")


@pytest.fixture
def node(kube_client: kubernetes.client.ApiClient, driver: str) -> Iterator[str]:
    name = "node-" + driver.split(".")[0][-30:].strip("-")
    core_api = kubernetes.client.CoreV1Api(kube_client)
    core_api.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
    yield name
    core_api.delete_node(name)
