"""The test apiserver is the real thing: it stores, validates, filters and authorises."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import kubernetes.client
import pytest
from kubernetes.client.rest import ApiException

from resourceslice.testing import TestCluster

pytestmark = pytest.mark.integration


def slice_body(name: str, driver: str, node: str, devices: int) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": f"gpu-{i}",
                    "attributes": {"index": {"int": i}, "model": {"string": "A100"}},
                    "capacity": {"memory": {"value": "40Gi"}},
                }
                for i in range(devices)
            ],
        },
    }


@pytest.fixture
def resource_api(kube_client: kubernetes.client.ApiClient) -> kubernetes.client.ResourceV1Api:
    return kubernetes.client.ResourceV1Api(kube_client)


@pytest.fixture
def node(kube_client: kubernetes.client.ApiClient, request: pytest.FixtureRequest) -> Iterator[str]:
    name = request.node.name.replace("_", "-").lower()[:50]
    core = kubernetes.client.CoreV1Api(kube_client)
    core.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
    yield name
    core.delete_node(name)


def raw_get(api: kubernetes.client.ResourceV1Api, name: str) -> dict[str, Any]:
    response = api.read_resource_slice(name, _preload_content=False)
    result: dict[str, Any] = json.loads(response.data)
    return result


def test_slice_with_128_devices_round_trips(
    resource_api: kubernetes.client.ResourceV1Api, node: str
) -> None:
    body = slice_body(f"{node}-full", "gpu.example.com", node, 128)
    resource_api.create_resource_slice(body)

    stored = raw_get(resource_api, f"{node}-full")

    assert stored["spec"]["nodeName"] == node
    assert [d["name"] for d in stored["spec"]["devices"]] == [f"gpu-{i}" for i in range(128)]
    assert stored["spec"]["devices"][5]["capacity"]["memory"]["value"] == "40Gi"
    assert stored["metadata"]["uid"]
    resource_api.delete_resource_slice(f"{node}-full")


def test_slice_with_129_devices_is_rejected_with_422(
    resource_api: kubernetes.client.ResourceV1Api, node: str
) -> None:
    with pytest.raises(ApiException) as caught:
        resource_api.create_resource_slice(slice_body(f"{node}-over", "gpu.example.com", node, 129))

    assert caught.value.status == 422
    assert "spec.devices" in str(caught.value.body)


def test_watch_with_driver_field_selector_sees_only_that_driver(
    resource_api: kubernetes.client.ResourceV1Api, node: str
) -> None:
    start = resource_api.list_resource_slice(field_selector="spec.driver=a.example.com")
    watch = resource_api.list_resource_slice(
        field_selector="spec.driver=a.example.com",
        resource_version=start.metadata.resource_version,
        watch=True,
        timeout_seconds=30,
        _preload_content=False,
    )
    # Created in this order, the "a" slice's event can only arrive after any event for
    # the "b" slice would have: seeing "a" proves "b" was filtered out.
    resource_api.create_resource_slice(slice_body(f"{node}-b", "b.example.com", node, 1))
    resource_api.create_resource_slice(slice_body(f"{node}-a", "a.example.com", node, 1))
    seen: list[tuple[str, str, str]] = []
    try:
        for raw in watch:  # the response iterates line by line: one event per line
            event = json.loads(raw)
            obj = event["object"]
            seen.append((event["type"], obj["metadata"]["name"], obj["spec"]["driver"]))
            if obj["metadata"]["name"] == f"{node}-a":
                break
    finally:
        watch.release_conn()
    resource_api.delete_resource_slice(f"{node}-a")
    resource_api.delete_resource_slice(f"{node}-b")

    assert seen == [("ADDED", f"{node}-a", "a.example.com")]


def test_driver_user_without_rbac_is_forbidden(kube_cluster: TestCluster) -> None:
    with kube_cluster.api_client("driver") as client:
        api = kubernetes.client.ResourceV1Api(client)
        with pytest.raises(ApiException) as caught:
            api.list_resource_slice()

    assert caught.value.status == 403
    message = json.loads(caught.value.body)["message"]
    assert 'User "driver" cannot list resource "resourceslices"' in message
