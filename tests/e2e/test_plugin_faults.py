"""``PluginFaults`` on a node of the DRA cluster: what kubelet's DRA manager does with a plugin
whose registration fails, whose prepare blocks, and whose unprepare fails — as a pod shows it."""

from __future__ import annotations

from collections.abc import Iterator

import kubernetes.client
import pytest

import resourceslice as rs
from resourceslice import kubeletplugin
from resourceslice.testing import DRACluster, PodNotPrepared, wait_until
from resourceslice.testing.pluginfaults import PluginFaults
from support.chain import EnvDriver, plugin_dirs

pytestmark = pytest.mark.integration

DRIVER = "asic.e2e.example.com"


class AsicNode:
    """A node whose plugin publishes two ASICs, with faults; a DeviceClass and a claim."""

    def __init__(self, cluster: DRACluster) -> None:
        self.cluster = cluster
        self.client = cluster.api_client()
        self.node = cluster.add_node("asic-node")
        self.faults = PluginFaults()
        self.helper: kubeletplugin.Helper | None = None
        cluster.create_device_class("asic", driver=DRIVER)
        self.claim_uid = cluster.create_claim("asic", device_class="asic")["metadata"]["uid"]

    def start(self) -> kubeletplugin.Helper:
        self.helper = kubeletplugin.start(
            EnvDriver(DRIVER, self.node.cdi_dir),
            driver=DRIVER,
            api_client=self.client,
            node_name=self.node.name,
            interceptors=[self.faults],
            **plugin_dirs(self.node, DRIVER),
        )
        pool = rs.Pool(devices=[{"name": "asic-0"}, {"name": "asic-1"}])
        self.helper.publish_resources(rs.DriverResources(pools={self.node.name: pool}))
        assert self.helper.controller is not None
        assert self.helper.controller.wait_synced(timeout=60)
        return self.helper

    def close(self) -> None:
        self.faults.clear()
        if self.helper is not None:
            self.helper.stop()
        self.client.close()


@pytest.fixture
def asic(dra_cluster: DRACluster) -> Iterator[AsicNode]:
    node = AsicNode(dra_cluster)
    try:
        yield node
    finally:
        node.close()


def test_a_failing_get_info_leaves_the_driver_unregistered_until_it_passes(
    dra_cluster: DRACluster, asic: AsicNode
) -> None:
    failing = asic.faults.fail_get_info("ASIC firmware not loaded")
    helper = asic.start()
    failing.wait_hit(2)  # kubelet asked, and asked again
    assert dra_cluster.events("register") == []
    # A pod placed meanwhile cannot be prepared: for kubelet the driver is not there.
    dra_cluster.create_pod("pod", claim="asic")
    assert f"DRA driver {DRIVER} is not registered" in dra_cluster.wait_prepare_failed("pod")

    failing.clear()
    dra_cluster.wait_registered(asic.node.name, DRIVER)
    assert helper.wait_registered(timeout=30)
    dra_cluster.wait_pod_prepared("pod")


def test_a_blocked_prepare_keeps_the_pod_pending_until_released(
    dra_cluster: DRACluster, asic: AsicNode
) -> None:
    asic.start()
    dra_cluster.wait_registered(asic.node.name, DRIVER)
    blocked = asic.faults.block_prepare("asic")
    dra_cluster.create_pod("pod", claim="asic")
    blocked.wait_hit()  # kubelet waits in NodePrepareResources from now on
    pod = dra_cluster.get_pod("pod")
    assert pod is not None and pod["spec"]["nodeName"] == asic.node.name
    assert pod["status"]["phase"] == "Pending"
    assert dra_cluster.why_not_prepared("pod") == "pending"  # no error: it is waiting
    with pytest.raises(PodNotPrepared):
        dra_cluster.wait_pod_prepared("pod", timeout=0.5)
    assert not list(asic.node.cdi_dir.glob("*"))  # the driver has not been called

    blocked.clear()
    prepared = dra_cluster.wait_pod_prepared("pod")
    assert prepared.containers["ctr"].env in (["DEVICE_asic_0=1"], ["DEVICE_asic_1=1"])
    assert blocked.hits == 1  # one call, which waited: kubelet's deadline was not reached
    assert dra_cluster.events("prepareFailed") == []


def test_a_failing_unprepare_keeps_the_deleted_pod_and_its_claim_until_it_passes(
    dra_cluster: DRACluster, asic: AsicNode
) -> None:
    asic.start()
    dra_cluster.wait_registered(asic.node.name, DRIVER)
    dra_cluster.create_pod("pod", claim="asic")
    dra_cluster.wait_pod_prepared("pod")

    ref = kubeletplugin.ClaimRef("default", "asic", asic.claim_uid)
    failing = asic.faults.fail_unprepare(ref, "ASIC still busy")
    kubernetes.client.CoreV1Api(asic.client).delete_namespaced_pod("pod", "default")
    failing.wait_hit()
    wait_until(lambda: dra_cluster.events("unprepareFailed"), timeout=30)
    (failure, *_) = dra_cluster.events("unprepareFailed")
    assert "ASIC still busy" in failure["error"]
    # kubelet keeps the pod (terminating) and the claim reserved for it while it retries.
    pod = dra_cluster.get_pod("pod")
    assert pod is not None and pod["metadata"].get("deletionTimestamp")
    (claim,) = dra_cluster.pod_claims("pod")
    assert [r["name"] for r in claim["status"]["reservedFor"]] == ["pod"]
    assert list(asic.node.cdi_dir.glob("*"))  # still prepared

    failing.clear()
    dra_cluster.delete_pod("pod")  # kubelet's next try unprepares it, and the pod goes
    (claim,) = dra_cluster.list_claims()
    assert not claim["status"].get("allocation")
    assert not list(asic.node.cdi_dir.glob("*"))
