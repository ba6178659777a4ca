"""The driver's kubelet plugin over its life on a node: restarted while pods run, and failing
to prepare — as kubelet's DRA manager and the container runtime see it."""

from __future__ import annotations

import json

import pytest

from e2e.chain import start_env_plugin
from resourceslice._http import get_json
from resourceslice.testing import DRACluster, PodNotPrepared

pytestmark = pytest.mark.integration

DRIVER = "fpga.e2e.example.com"
DEVICES = [{"name": f"fpga-{i}"} for i in range(4)]


def test_a_plugin_restart_keeps_running_pods_devices_and_serves_new_pods_once_back(
    dra_cluster: DRACluster,
) -> None:
    client = dra_cluster.api_client()
    node = dra_cluster.add_node("fpga-node")
    _, helper = start_env_plugin(dra_cluster, client, node, DRIVER, devices=DEVICES)
    try:
        dra_cluster.create_device_class("fpga", driver=DRIVER)
        dra_cluster.create_claim_template("one-fpga", device_class="fpga")
        dra_cluster.create_pod("running", claim_template="one-fpga")
        before = dra_cluster.wait_pod_prepared("running").containers["ctr"]

        # The plugin goes (a DaemonSet pod replaced): kubelet deregisters it.
        helper.stop()
        dra_cluster.wait_deregistered(node.name, DRIVER)
        # A pod placed meanwhile cannot be prepared: kubelet says the driver is missing.
        dra_cluster.create_pod("new", claim_template="one-fpga")
        missing = dra_cluster.wait_prepare_failed("new")
        assert f"DRA driver {DRIVER} is not registered" in missing
        assert dra_cluster.why_not_prepared("new") == missing

        _, helper = start_env_plugin(dra_cluster, client, node, DRIVER, devices=DEVICES)
        # Back: the waiting pod is prepared on kubelet's next try.
        new = dra_cluster.wait_pod_prepared("new")
        assert new.containers["ctr"].env != before.env
        # The running pod kept its devices all along: never unprepared, its claim still
        # allocated to it, and a container started now gets the same edits.
        assert not [e for e in dra_cluster.events("unprepared") if e["pod"]["name"] == "running"]
        (claim,) = dra_cluster.pod_claims("running")
        assert [r["name"] for r in claim["status"]["reservedFor"]] == ["running"]
        assert dra_cluster.container_edits("running") == before
    finally:
        helper.stop()
        client.close()


def test_a_failing_prepare_is_reported_where_kubelet_reports_it_and_retried(
    dra_cluster: DRACluster,
) -> None:
    client = dra_cluster.api_client()
    node = dra_cluster.add_node("fpga-node")
    plugin, helper = start_env_plugin(dra_cluster, client, node, DRIVER, devices=DEVICES)
    try:
        dra_cluster.create_device_class("fpga", driver=DRIVER)
        dra_cluster.create_claim_template("one-fpga", device_class="fpga")
        plugin.prepare_error = "bitstream not loaded"
        dra_cluster.create_pod("pod", claim_template="one-fpga")
        assert "bitstream not loaded" in dra_cluster.wait_prepare_failed("pod")
        with pytest.raises(PodNotPrepared, match="bitstream not loaded"):
            dra_cluster.wait_pod_prepared("pod", timeout=0.5)

        # kubelet's event on the pod carries the driver's error, as `kubectl describe` shows.
        events = json.loads(
            get_json(
                client,
                "/api/v1/namespaces/default/events",
                [("fieldSelector", "involvedObject.name=pod,reason=FailedPrepareDynamicResources")],
            )
        )["items"]
        assert events and all("bitstream not loaded" in e["message"] for e in events)
        assert {e["source"]["component"] for e in events} == {"kubelet"}
        assert not (node.cdi_dir).exists() or not list(node.cdi_dir.iterdir())

        # Fixed: kubelet's retry prepares it, and the container gets its device.
        plugin.prepare_error = None
        prepared = dra_cluster.wait_pod_prepared("pod")
        (env,) = prepared.containers["ctr"].env
        assert env.startswith("DEVICE_fpga_")
    finally:
        helper.stop()
        client.close()
