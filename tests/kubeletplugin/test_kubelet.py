"""The kubelet plugin, registered and called by kubelet's own code (the kubelet harness), with
claims on the real apiserver."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest
from tests.kubeletplugin.env import RecordingPlugin, allocated_claim, delete_claim, driver_name, uid

from resourceslice import kubeletplugin
from resourceslice.testing.kubelet import KubeletHarness

pytestmark = pytest.mark.integration


class Node:
    """One test's node: its driver, its plugin, the helpers started (stopped at the end)."""

    def __init__(self, request: pytest.FixtureRequest, node_dir: Path, client: Any) -> None:
        self.driver = driver_name(request.node.name)
        self.dir = node_dir
        self.client = client
        self.plugin = RecordingPlugin(self.driver)
        self.helpers: list[kubeletplugin.Helper] = []
        self.claims: list[str] = []
        self.errors: list[tuple[BaseException, str]] = []

    def start(self, plugin: Any = None, **kwargs: Any) -> kubeletplugin.Helper:
        kwargs.setdefault("registrar_dir", str(self.dir / "registry"))
        kwargs.setdefault("plugin_data_dir", str(self.dir / "plugins" / self.driver))
        kwargs.setdefault("error_handler", lambda exc, msg: self.errors.append((exc, msg)))
        helper = kubeletplugin.start(
            plugin or self.plugin, driver=self.driver, api_client=self.client, **kwargs
        )
        self.helpers.append(helper)
        return helper

    def claim(self, name: str, devices: list[str]) -> dict[str, Any]:
        claim = allocated_claim(self.client, self.driver, f"{self.driver[:20]}-{name}", devices)
        self.claims.append(claim["metadata"]["name"])
        return claim

    def close(self) -> None:
        for helper in self.helpers:
            helper.stop()
        for name in self.claims:
            delete_claim(self.client, name)


@pytest.fixture
def node(
    request: pytest.FixtureRequest, node_dir: Path, kube_client: kubernetes.client.ApiClient
) -> Iterator[Node]:
    env = Node(request, node_dir, kube_client)
    try:
        yield env
    finally:
        env.close()


def test_registers_with_kubelet(node: Node, kubelet: KubeletHarness) -> None:
    helper = node.start()
    event = kubelet.wait_registered(node.driver)
    # kubelet got the DRA socket and the services offered, newest first, and said so.
    assert event["endpoint"] == helper.plugin_socket_path
    assert event["versions"] == [kubeletplugin.DRA_V1, kubeletplugin.DRA_V1BETA1]
    assert helper.wait_registered(timeout=30)
    assert helper.registration_status is not None
    assert helper.registration_status.plugin_registered
    # kubelet's default layout, under the test's root.
    assert helper.registrar_socket_path == str(node.dir / "registry" / f"{node.driver}-reg.sock")
    assert helper.plugin_socket_path == str(node.dir / "plugins" / node.driver / "dra.sock")


def test_prepare_and_unprepare_one_claim(node: Node, kubelet: KubeletHarness) -> None:
    node.start()
    kubelet.wait_registered(node.driver)
    claim = node.claim("one", ["dev-0"])

    answer = kubelet.prepare(node.driver, [claim])
    assert "error" not in answer
    assert answer["claims"] == {
        uid(claim): {
            "error": "",
            "devices": [
                {
                    "requestNames": ["req"],
                    "poolName": "node-1",
                    "deviceName": "dev-0",
                    "cdiDeviceIDs": [f"{node.driver}/device=dev-0"],
                }
            ],
        }
    }
    # The callback got the claim as the apiserver has it, allocation included.
    (got,) = node.plugin.prepare_calls[0]
    assert got["metadata"]["uid"] == uid(claim)
    assert got["status"]["allocation"]["devices"]["results"][0]["device"] == "dev-0"
    assert node.plugin.prepared == {uid(claim)}

    answer = kubelet.unprepare(node.driver, [claim])
    assert answer["claims"] == {uid(claim): {"error": "", "devices": None}}
    assert node.plugin.unprepare_calls == [
        [
            kubeletplugin.ClaimRef(
                namespace="default", name=claim["metadata"]["name"], uid=uid(claim)
            )
        ]
    ]
    assert node.plugin.prepared == set()
