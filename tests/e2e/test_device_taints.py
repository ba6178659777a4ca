"""A device the driver taints NoSchedule (device taints, published through the library) is
not allocated by kube-scheduler; once the driver clears the taint with ``update()``, it is."""

from __future__ import annotations

from typing import Any

import pytest

import resourceslice as rs
from resourceslice.testing import DRACluster
from support.chain import EnvDriver, start_env_plugin

pytestmark = pytest.mark.integration

DRIVER = "nic.e2e.example.com"
TAINT = {"key": "nic.e2e.example.com/link-down", "value": "true", "effect": "NoSchedule"}


def devices(tainted: bool) -> list[dict[str, Any]]:
    broken: dict[str, Any] = {"name": "nic-0"}
    if tainted:
        broken["taints"] = [TAINT]
    return [broken, {"name": "nic-1"}]


def test_a_tainted_device_is_not_allocated_until_the_taint_is_cleared(
    dra_cluster: DRACluster,
) -> None:
    client = dra_cluster.api_client()
    node = dra_cluster.add_node("nic-node")
    _, helper = start_env_plugin(dra_cluster, client, node, DRIVER, devices=devices(True))
    try:
        dra_cluster.create_device_class("nic", driver=DRIVER)
        dra_cluster.create_claim_template("one-nic", device_class="nic")

        dra_cluster.create_pod("first", claim_template="one-nic")
        first = dra_cluster.wait_pod_prepared("first")
        assert first.containers["ctr"].env == [EnvDriver.env_of("nic-1")]
        # nic-0 is free but tainted: the second pod waits, and the scheduler says why.
        dra_cluster.create_pod("second", claim_template="one-nic")
        assert "cannot allocate all claims" in dra_cluster.wait_pod_unschedulable("second")

        # The link is back: the driver clears the taint, and the waiting pod gets nic-0.
        helper.publish_resources(
            rs.DriverResources(pools={node.name: rs.Pool(devices=devices(False))})
        )
        second = dra_cluster.wait_pod_prepared("second")
        assert second.containers["ctr"].env == [EnvDriver.env_of("nic-0")]
    finally:
        helper.stop()
        client.close()
