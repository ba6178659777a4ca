"""examples/kubelet_driver.py, the README's whole driver, against kubelet's code and the real
apiserver: it publishes, registers, and prepares a claim into a CDI spec."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import kubernetes.client
import pytest

from resourceslice._http import get_json, request, send_json
from resourceslice.testing.kubelet import KubeletHarness
from support.chain import load_example
from support.kubelet_env import allocated_claim, delete_claim, uid

pytestmark = pytest.mark.integration


@pytest.fixture
def example() -> ModuleType:
    return load_example()


@pytest.fixture
def node_name(kube_client: kubernetes.client.ApiClient) -> Iterator[str]:
    name = "example-node"
    body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}
    send_json(kube_client, "POST", "/api/v1/nodes", json.dumps(body).encode())
    try:
        yield name
    finally:
        send_json(kube_client, "DELETE", f"/api/v1/nodes/{name}", b"{}")


def test_example_driver(
    example: ModuleType,
    node_name: str,
    node_dir: Path,
    kubelet: KubeletHarness,
    kube_client: kubernetes.client.ApiClient,
) -> None:
    driver = example.DRIVER
    cdi_dir = node_dir / "cdi"
    helper = example.run(
        kube_client,
        node_name,
        pod_uid="c0ffee00-0000-4000-8000-000000000001",
        cdi_dir=str(cdi_dir),
        registrar_dir=str(node_dir / "registry"),
        plugin_data_dir=str(node_dir / "plugins" / driver),
    )
    claim_name = "example-claim"
    try:
        kubelet.wait_registered(driver)
        assert helper.controller.wait_synced(timeout=60)
        slices = json.loads(
            get_json(
                kube_client,
                "/apis/resource.k8s.io/v1/resourceslices",
                [("fieldSelector", f"spec.driver={driver}")],
            )
        )["items"]
        assert [d["name"] for s in slices for d in s["spec"]["devices"]] == [
            "demo-0",
            "demo-1",
            "demo-2",
            "demo-3",
        ]

        claim = allocated_claim(kube_client, driver, claim_name, ["demo-1", "demo-3"], node_name)
        answer = kubelet.prepare(driver, [claim])
        cdi_ids = [d["cdiDeviceIDs"] for d in answer["claims"][uid(claim)]["devices"]]
        assert cdi_ids == [
            [f"{driver}/device={uid(claim)}-demo-1"],
            [f"{driver}/device={uid(claim)}-demo-3"],
        ]
        spec = json.loads((cdi_dir / f"{driver}-{uid(claim)}.json").read_text())
        assert [d["containerEdits"]["env"] for d in spec["devices"]] == [
            ["DEMO_DEVICE_1=1"],
            ["DEMO_DEVICE_3=1"],
        ]
        # Each prepared device is Ready in the claim's status, written as this node's plugin.
        stored = json.loads(
            get_json(
                kube_client,
                f"/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/{claim_name}",
            )
        )
        status = {e["device"]: e for e in stored["status"]["devices"]}
        assert {d: (e["conditions"][0]["type"], e["data"]) for d, e in status.items()} == {
            "demo-1": ("Ready", {"env": ["DEMO_DEVICE_1=1"]}),
            "demo-3": ("Ready", {"env": ["DEMO_DEVICE_3=1"]}),
        }
        writers = {
            m["manager"] for m in stored["metadata"]["managedFields"] if m["operation"] == "Apply"
        }
        assert writers == {
            f"{driver}/{node_name}/{node_name}/demo-1",
            f"{driver}/{node_name}/{node_name}/demo-3",
        }

        assert kubelet.unprepare(driver, [claim])["claims"][uid(claim)]["error"] == ""
        assert list(cdi_dir.iterdir()) == []

        # Opaque configuration: the claim's wins over its DeviceClass's; a claim whose
        # configuration is not a DemoConfig fails alone, saying why.
        def demo_config(greeting: str, version: str = "v1") -> dict[str, Any]:
            parameters = {"apiVersion": f"{driver}/{version}", "kind": "DemoConfig"}
            return {
                "opaque": {"driver": driver, "parameters": {**parameters, "greeting": greeting}}
            }

        configured = allocated_claim(
            kube_client,
            driver,
            "example-configured",
            ["demo-0"],
            node_name,
            class_config=[demo_config("from the class")],
            config=[demo_config("hi")],
        )
        misconfigured = allocated_claim(
            kube_client,
            driver,
            "example-misconfigured",
            ["demo-2"],
            node_name,
            config=[demo_config("hi", version="v2")],
        )
        answer = kubelet.prepare(driver, [configured, misconfigured])
        assert answer["claims"][uid(misconfigured)]["error"] == (
            "ConfigError: status.allocation.devices.config[0].opaque.parameters.apiVersion: "
            "expected one of 'demo.example.com/v1', got 'demo.example.com/v2'"
        )
        spec = json.loads((cdi_dir / f"{driver}-{uid(configured)}.json").read_text())
        assert [d["containerEdits"]["env"] for d in spec["devices"]] == [
            ["DEMO_DEVICE_0=1", "DEMO_DEVICE_0_GREETING=hi"]
        ]
        assert kubelet.unprepare(driver, [configured])["claims"][uid(configured)]["error"] == ""
    finally:
        helper.stop()
        for name in (claim_name, "example-configured", "example-misconfigured"):
            delete_claim(kube_client, name)
        request(
            kube_client,
            "DELETE",
            "/apis/resource.k8s.io/v1/resourceslices",
            query=[("fieldSelector", f"spec.driver={driver}")],
        )
