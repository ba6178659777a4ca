"""The driver's kubelet plugin over its life on a node: restarted while pods run, and failing
to prepare — as kubelet's DRA manager and the container runtime see it."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from resourceslice import kubeletplugin
from resourceslice._http import get_json
from resourceslice.testing import DRACluster, PodNotPrepared
from support.chain import EnvDriver, start_env_plugin

pytestmark = pytest.mark.integration

DRIVER = "fpga.e2e.example.com"
DEVICES = [{"name": f"fpga-{i}"} for i in range(4)]


class FpgaNode:
    """A node running the driver's plugin (publishing its FPGAs), and a claim template."""

    def __init__(self, cluster: DRACluster) -> None:
        self.cluster = cluster
        self.client = cluster.api_client()
        self.node = cluster.add_node("fpga-node")
        self.helper: kubeletplugin.Helper | None = None
        self.plugin = self.start_plugin()
        cluster.create_device_class("fpga", driver=DRIVER)
        cluster.create_claim_template("one-fpga", device_class="fpga")

    def start_plugin(self) -> EnvDriver:
        self.plugin, self.helper = start_env_plugin(
            self.cluster, self.client, self.node, DRIVER, devices=DEVICES
        )
        return self.plugin

    def stop_plugin(self) -> None:
        if self.helper is not None:
            self.helper.stop()
            self.helper = None

    def close(self) -> None:
        self.stop_plugin()
        self.client.close()


@pytest.fixture
def fpga(dra_cluster: DRACluster) -> Iterator[FpgaNode]:
    node = FpgaNode(dra_cluster)
    try:
        yield node
    finally:
        node.close()


def test_a_plugin_restart_keeps_running_pods_devices_and_serves_new_pods_once_back(
    dra_cluster: DRACluster, fpga: FpgaNode
) -> None:
    dra_cluster.create_pod("running", claim_template="one-fpga")
    before = dra_cluster.wait_pod_prepared("running").containers["ctr"]

    # The plugin goes (a DaemonSet pod replaced): kubelet deregisters it.
    fpga.stop_plugin()
    dra_cluster.wait_deregistered(fpga.node.name, DRIVER)
    # A pod placed meanwhile cannot be prepared: kubelet says the driver is missing.
    dra_cluster.create_pod("new", claim_template="one-fpga")
    missing = dra_cluster.wait_prepare_failed("new")
    assert f"DRA driver {DRIVER} is not registered" in missing
    assert dra_cluster.why_not_prepared("new") == missing

    fpga.start_plugin()
    # Back: the waiting pod is prepared on kubelet's next try.
    new = dra_cluster.wait_pod_prepared("new")
    assert new.containers["ctr"].env != before.env
    # The running pod kept its devices all along: never unprepared, its claim still
    # allocated to it, and a container started now gets the same edits.
    assert not [e for e in dra_cluster.events("unprepared") if e["pod"]["name"] == "running"]
    (claim,) = dra_cluster.pod_claims("running")
    assert [r["name"] for r in claim["status"]["reservedFor"]] == ["running"]
    assert dra_cluster.container_edits("running") == before


def test_a_failing_prepare_is_reported_where_kubelet_reports_it_and_retried(
    dra_cluster: DRACluster, fpga: FpgaNode
) -> None:
    fpga.plugin.prepare_error = "bitstream not loaded"
    dra_cluster.create_pod("pod", claim_template="one-fpga")
    assert "bitstream not loaded" in dra_cluster.wait_prepare_failed("pod")
    with pytest.raises(PodNotPrepared, match="bitstream not loaded"):
        dra_cluster.wait_pod_prepared("pod", timeout=0.5)

    # kubelet's event on the pod carries the driver's error, as `kubectl describe` shows.
    events = json.loads(
        get_json(
            fpga.client,
            "/api/v1/namespaces/default/events",
            [("fieldSelector", "involvedObject.name=pod,reason=FailedPrepareDynamicResources")],
        )
    )["items"]
    assert events and all("bitstream not loaded" in e["message"] for e in events)
    assert {e["source"]["component"] for e in events} == {"kubelet"}
    assert not fpga.node.cdi_dir.exists() or not list(fpga.node.cdi_dir.iterdir())

    # Fixed: kubelet's retry prepares it, and the container gets its device.
    fpga.plugin.prepare_error = None
    prepared = dra_cluster.wait_pod_prepared("pod")
    (env,) = prepared.containers["ctr"].env
    assert env.startswith("DEVICE_fpga_")
