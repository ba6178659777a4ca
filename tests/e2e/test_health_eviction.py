"""Health that evicts: a device turns unhealthy in the driver's one health source, which taints
it NoExecute — in its ResourceSlice (``update_devices``) or with a DeviceTaintRule — and tells
kubelet through the plugin's health stream. The device-taint eviction controller (of the
cluster's release) deletes the pod using it, kubelet unprepares it and its claim is released;
a new pod of the same ResourceClaimTemplate gets another device; a pod whose claim tolerates
the taint stays, and kubelet shows its device unhealthy in its status.

There is no ReplicaSet controller in the DRA cluster: the test creates the replacement pod
itself, from the same template, as a ReplicaSet would once the pod is gone.

Releases: 1.37 and 1.33 (its controller is alpha, DeviceTaintRules in v1alpha3); 1.32 has no
device taints. On 1.33 the tolerating pod is evicted too (see below), and kubelet reads no
health stream (from 1.34 on), so the test ends after the replacement there.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import resourceslice as rs
from e2e.health import TAINT_KEY, HealthDriver, HealthSource, rule_taints, slice_taints
from resourceslice.testing import DRACluster, PreparedPod, running_dra_cluster, wait_until
from resourceslice.testing import plugin as fixtures
from support.chain import EnvDriver, start_env_plugin

pytestmark = pytest.mark.integration

DRIVER = "gpu.e2e.example.com"
DEVICES = [f"gpu-{i}" for i in range(4)]
XID = "XID 79: GPU has fallen off the bus"
TOLERATION = {"key": TAINT_KEY, "operator": "Exists", "effect": "NoExecute"}


def version(release: str) -> tuple[int, ...]:
    return tuple(int(part) for part in release.split("."))


#: The releases with device taints and their eviction controller.
EVICTING = [r for r in fixtures.tested_releases() if version(r) >= (1, 33)]


@pytest.fixture(params=EVICTING)
def cluster(request: pytest.FixtureRequest) -> Iterator[DRACluster]:
    with running_dra_cluster(
        release=request.param, containers=fixtures.dra_containers(request.config)
    ) as started:
        assert started.device_taint_eviction
        yield started


def device_of(pod: PreparedPod) -> str:
    """The device the pod's container was given (EnvDriver's DEVICE_<name>=1)."""
    (env,) = pod.containers["ctr"].env
    return next(d for d in DEVICES if env == EnvDriver.env_of(d))


class Driver:
    """The plugin on one node, its health source, and where its taints go."""

    def __init__(self, cluster: DRACluster, path: str) -> None:
        self.cluster = cluster
        self.client = cluster.api_client()
        self.node = cluster.add_node("gpu-node")
        self.health = HealthSource(self.node.name, DEVICES)
        plugin = HealthDriver(DRIVER, self.node.cdi_dir, self.health)
        pool = rs.Pool(devices=[{"name": d} for d in DEVICES], max_devices_per_slice=64)
        _, self.helper = start_env_plugin(
            cluster, self.client, self.node, DRIVER, pool=pool, plugin=plugin
        )
        assert self.helper.controller is not None
        self.rules: rs.DeviceTaintRules | None = None
        if path == "slice":
            self.health.publish = slice_taints(self.helper.controller, self.node.name)
        else:
            owner = rs.Owner(api_version="v1", kind="Node", name=self.node.name)
            self.rules = rs.DeviceTaintRules(self.client, driver=DRIVER, owner=owner)
            self.health.publish = rule_taints(self.rules, self.node.name)

    def wait_published(self) -> None:
        """The taints are in the cluster."""
        synced = self.rules or self.helper.controller
        assert synced is not None and synced.wait_synced(timeout=60)

    def close(self) -> None:
        self.health.close()
        if self.rules is not None:
            self.rules.stop()
        self.helper.stop()
        self.client.close()


@pytest.fixture(params=["slice", "rule"])
def driver(cluster: DRACluster, request: pytest.FixtureRequest) -> Iterator[Driver]:
    started = Driver(cluster, request.param)
    try:
        cluster.create_device_class("gpu", driver=DRIVER)
        cluster.create_claim_template("one-gpu", device_class="gpu")
        cluster.create_claim_template(
            "one-gpu-tolerant", device_class="gpu", tolerations=[TOLERATION]
        )
        yield started
    finally:
        started.close()


def allocated(cluster: DRACluster, claims: dict[str, str]) -> list[dict[str, Any]]:
    """Those of ``claims`` (name -> uid) that are still allocated."""
    return [
        c
        for c in cluster.list_claims()
        if c["metadata"]["uid"] in claims.values() and c.get("status", {}).get("allocation")
    ]


def test_an_unhealthy_device_evicts_its_pod_and_the_replacement_gets_another(
    cluster: DRACluster, driver: Driver
) -> None:
    cluster.create_pod("worker", claim_template="one-gpu")
    cluster.create_pod("tolerant", claim_template="one-gpu-tolerant")
    worker = cluster.wait_pod_prepared("worker")
    tolerant = cluster.wait_pod_prepared("tolerant")
    broken = {device_of(worker), device_of(tolerant)}
    assert len(broken) == 2

    # The tolerant pod's device first: once the worker is evicted, the controller has seen
    # that taint too, and left the tolerant pod alone.
    driver.health.set(device_of(tolerant), healthy=False, reason="xid-79", message=XID)
    driver.wait_published()
    driver.health.set(device_of(worker), healthy=False, reason="xid-79", message=XID)

    eviction = cluster.wait_pod_evicted(worker)
    assert eviction.message == "Device Taint manager: deleting due to NoExecute taint"
    assert cluster.get_pod("worker") is None
    assert worker.claims and allocated(cluster, worker.claims) == []

    # The replacement, from the same template: another device, neither of the broken ones.
    cluster.create_pod("worker-2", claim_template="one-gpu")
    replacement = cluster.wait_pod_prepared("worker-2")
    assert device_of(replacement) not in broken

    if cluster.release == "1.33":
        # 1.33's scheduler leaves the allocation's tolerations empty (its allocator does not
        # copy the request's into the result) and its alpha controller reads them from
        # there: the tolerating pod is evicted too. Asserted, so that a change shows here.
        cluster.wait_pod_evicted(tolerant)
        return
    still = cluster.get_pod("tolerant")
    assert still is not None and still["metadata"]["uid"] == tolerant.uid
    assert "deletionTimestamp" not in still["metadata"]
    reasons = [e.get("reason") for e in cluster.pod_events(tolerant.uid)]
    assert "DeviceTaintManagerEviction" not in reasons

    # The same health, through the plugin's health stream: kubelet shows it in the pod.
    if version(cluster.release) >= (1, 34):

        def health() -> list[str]:
            status = cluster.allocated_resources_status("tolerant")
            return [r["health"] for r in status.get("claim:devices", [])]

        wait_until(lambda: health() == ["Unhealthy"], timeout=60, describe=lambda: str(health()))
        (resource,) = cluster.allocated_resources_status("tolerant")["claim:devices"]
        assert resource["resourceID"] == tolerant.containers["ctr"].cdi_devices[0]


def test_a_rule_for_a_whole_pool_evicts_every_pod_until_it_is_removed(
    cluster: DRACluster,
) -> None:
    """A central driver's rule for a selector: every device of the pool; removing the rule
    lets pods in again."""
    driver = Driver(cluster, "rule")
    try:
        assert driver.rules is not None
        cluster.create_device_class("gpu", driver=DRIVER)
        cluster.create_claim_template("one-gpu", device_class="gpu")
        pods = [f"pod-{i}" for i in range(2)]
        for pod in pods:
            cluster.create_pod(pod, claim_template="one-gpu")
        prepared = [cluster.wait_pod_prepared(pod) for pod in pods]

        selector = rs.DeviceTaintSelector(pool=driver.node.name)
        taint: rs.DeviceTaint = {"key": TAINT_KEY, "value": "maintenance", "effect": "NoExecute"}
        driver.rules.set("gpu-node-maintenance", selector, taint)
        for pod in prepared:
            cluster.wait_pod_evicted(pod)
        cluster.create_pod("after", claim_template="one-gpu")
        assert "cannot allocate all claims" in cluster.wait_pod_unschedulable("after")

        driver.rules.remove("gpu-node-maintenance")
        cluster.wait_pod_prepared("after")
    finally:
        driver.close()
