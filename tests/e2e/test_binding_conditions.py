"""Binding conditions on the DRA cluster: kube-scheduler itself waits in PreBind for the
conditions that resourceslice.binding sets.

A central driver publishes a fabric pool whose ports carry binding conditions (and
``bindsToNode``), and attaches a port to the node the scheduler picked; the kubelet plugin
on every node prepares it. Only releases whose scheduler has ``DRADeviceBindingConditions``
(1.34+; beta and on from 1.36) run: 1.33 and 1.32 are skipped, saying so.

Each test fails on a cluster without the feature: there the pod is bound at once, on the
first port, and its device never waited to be attached.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import resourceslice as rs
from resourceslice import kubeletplugin
from resourceslice._http import get_json
from resourceslice._kubeclient import ClosingApiClient
from resourceslice.testing import DRACluster, running_dra_cluster, wait_until
from resourceslice.testing.plugin import dra_containers
from resourceslice.testing.plugin import tested_releases as releases_to_test
from support.chain import EnvDriver, start_env_plugin
from support.cli import Output

pytestmark = pytest.mark.integration

DRIVER = "fabric.e2e.example.com"
POOL = "fabric-a"
ATTACHED = f"{DRIVER}/Attached"
FAILED = f"{DRIVER}/AttachFailed"
UNREACHABLE = {"key": f"{DRIVER}/unreachable", "value": "true", "effect": "NoSchedule"}
#: The releases whose kube-scheduler waits on binding conditions (KEP-5007).
FIRST_RELEASE = (1, 34)
#: kube-scheduler polls the claim every 5 s while it waits in PreBind.
SCHEDULER_POLL = 5.0
#: kube-scheduler's binding timeout (DynamicResourcesArgs.bindingTimeout; 600 s by default)
#: in the cluster of the test marked ``binding_timeout``: long enough for a few of its polls.
BINDING_TIMEOUT = 20.0
HERE = Path(__file__).resolve().parent


def port(i: int, taints: list[dict[str, str]] | None = None) -> rs.Device:
    device: rs.Device = {
        "name": f"port-{i}",
        "bindsToNode": True,
        "bindingConditions": [ATTACHED],
        "bindingFailureConditions": [FAILED],
    }
    if taints:
        device["taints"] = taints  # type: ignore[typeddict-item]
    return device


def fabric_pool(ports: int = 2) -> rs.DriverResources:
    selector: rs.NodeSelector = {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "fabric", "operator": "In", "values": ["a"]}]}]}  # fmt: skip
    return rs.DriverResources(
        pools={POOL: rs.Pool(devices=[port(i) for i in range(ports)], node_selector=selector)}
    )


@pytest.fixture(params=releases_to_test())
def cluster(request: pytest.FixtureRequest) -> Iterator[DRACluster]:
    """A DRA cluster of each release whose scheduler has binding conditions."""
    release = str(request.param)
    if tuple(map(int, release.split("."))) < FIRST_RELEASE:
        pytest.skip(
            f"kube-scheduler {release} has no DRADeviceBindingConditions (alpha in 1.34, beta "
            "and on by default from 1.36): it would bind the pod without waiting"
        )
    marker = request.node.get_closest_marker("binding_timeout")
    with running_dra_cluster(
        release=release,
        binding_timeout=marker and marker.args[0],
        containers=dra_containers(request.config),
    ) as made:
        yield made


class Fabric:
    """Two nodes on the fabric with the kubelet plugin, and the central driver's publisher
    (optionally its binding helper too) in this process."""

    def __init__(self, cluster: DRACluster) -> None:
        self.cluster = cluster
        self.client: ClosingApiClient = cluster.api_client()
        self.nodes = [cluster.add_node(f"fabric-{i}", labels={"fabric": "a"}) for i in range(2)]
        self.helpers: list[kubeletplugin.Helper] = [
            start_env_plugin(cluster, self.client, node, DRIVER)[1] for node in self.nodes
        ]
        self.ctrl: rs.Controller | None = None
        self.binder: rs.BindingController | None = None
        cluster.create_device_class("port", driver=DRIVER)
        cluster.create_claim_template("one-port", device_class="port")

    def publish(self, attach: rs.AttachCallback) -> rs.Controller:
        """The central driver in this process: its pool published, its binding helper."""
        self.ctrl = rs.start_controller(self.client, driver=DRIVER, resources=fabric_pool())
        assert self.ctrl.wait_synced(timeout=60)
        self.binder = rs.start_binding_controller(self.ctrl, attach=attach)
        assert self.binder.wait_synced(60)
        return self.ctrl

    def node_of(self, pod: str) -> str | None:
        found = self.cluster.get_pod(pod) or {}
        return found.get("spec", {}).get("nodeName")

    def pod_events(self, pod: str) -> list[str]:
        """The reasons of the events about ``pod`` (the scheduler's among them)."""
        listed = json.loads(get_json(self.client, "/api/v1/namespaces/default/events"))
        return [e["reason"] for e in listed["items"] if e["involvedObject"]["name"] == pod]

    def claim_device(self, pod: str) -> tuple[str, dict[str, Any]]:
        """The pod's allocated device, and its status conditions by type."""
        (claim,) = self.cluster.pod_claims(pod)
        (result,) = claim["status"]["allocation"]["devices"]["results"]
        entries = {e["device"]: e for e in claim["status"].get("devices") or ()}
        found = entries.get(result["device"], {}).get("conditions") or ()
        return result["device"], {c["type"]: c for c in found}

    def close(self) -> None:
        if self.binder is not None:
            self.binder.stop()
        if self.ctrl is not None:
            self.ctrl.stop()
        for helper in self.helpers:
            helper.stop()
        self.client.close()


@pytest.fixture
def fabric(cluster: DRACluster) -> Iterator[Fabric]:
    made = Fabric(cluster)
    try:
        yield made
    finally:
        made.close()


class Attach:
    """The driver's attach: each call recorded; ``gate`` holds it until set; ``fail``: the
    ports that cannot be attached (tainted by the driver as it finds out, then False)."""

    def __init__(self, fabric: Fabric) -> None:
        self.fabric = fabric
        self.calls: list[tuple[rs.BindingDevice, float]] = []
        self.called = threading.Condition()
        self.gate = threading.Event()
        self.gate.set()
        self.fail: set[str] = set()
        self.hang: set[str] = set()
        self.released = threading.Event()

    def __call__(self, claim: dict[str, Any], device: rs.BindingDevice) -> bool:
        with self.called:
            self.calls.append((device, time.monotonic()))
            self.called.notify_all()
        if device.device in self.hang:
            self.released.wait()  # the fabric manager never answers (until the test ends)
            return True
        assert self.gate.wait(120)
        if device.device in self.fail:
            assert self.fabric.ctrl is not None
            self.fabric.ctrl.update_devices(POOL, upsert=[port(int(device.device[-1]),
                                                               [UNREACHABLE])])  # fmt: skip
            return False
        return True

    def wait_calls(self, count: int, timeout: float = 60) -> list[rs.BindingDevice]:
        with self.called:
            assert self.called.wait_for(lambda: len(self.calls) >= count, timeout), self.calls
            return [device for device, _ in self.calls]


def test_the_pod_is_bound_only_once_its_device_is_attached(fabric: Fabric) -> None:
    attach = Attach(fabric)
    attach.gate.clear()
    fabric.publish(attach)
    fabric.cluster.create_pod("waits", claim_template="one-port")
    (device,) = attach.wait_calls(1)
    # The scheduler has reserved the claim and waits in PreBind for the condition.
    wait_until(lambda: "BindingConditionsPending" in fabric.pod_events("waits"), 30,
               describe=lambda: str(fabric.pod_events("waits")))  # fmt: skip
    _, status = fabric.claim_device("waits")
    assert (status[ATTACHED]["status"], status[ATTACHED]["reason"]) == ("False", "Attaching")
    # Across more than one of the scheduler's polls, the pod stays unbound.
    with pytest.raises(AssertionError, match="not met"):
        wait_until(lambda: fabric.node_of("waits"), 2 * SCHEDULER_POLL, interval=0.2)
    attach.gate.set()
    pod = fabric.cluster.wait_pod_prepared("waits")
    # Bound where the device was attached: the node the allocation named.
    assert pod.node == device.node and device.node in {n.name for n in fabric.nodes}
    name, status = fabric.claim_device("waits")
    assert name == device.device and pod.containers["ctr"].env == [EnvDriver.env_of(name)]
    assert (status[ATTACHED]["status"], status[ATTACHED]["reason"]) == ("True", "Attached")
    assert not device.retry


def test_a_failed_attach_makes_the_scheduler_allocate_another_device(fabric: Fabric) -> None:
    attach = Attach(fabric)
    attach.fail = {"port-0"}  # the allocator's first choice
    fabric.publish(attach)
    fabric.cluster.create_pod("moves", claim_template="one-port")
    pod = fabric.cluster.wait_pod_prepared("moves", timeout=120)
    first, second = attach.wait_calls(2)
    assert (first.device, second.device) == ("port-0", "port-1")
    # A new allocation, not a retry of the failed one.
    assert first.claim_uid == second.claim_uid and first.allocated_at != second.allocated_at
    assert not second.retry
    name, status = fabric.claim_device("moves")
    assert name == "port-1" and pod.containers["ctr"].env == [EnvDriver.env_of("port-1")]
    assert status[ATTACHED]["status"] == "True" and FAILED not in status


@pytest.mark.binding_timeout(BINDING_TIMEOUT)
def test_an_attach_that_never_answers_hits_the_binding_timeout(fabric: Fabric) -> None:
    attach = Attach(fabric)
    attach.hang = {"port-0"}
    ctrl = fabric.publish(attach)
    try:
        fabric.cluster.create_pod("stuck", claim_template="one-port")
        (first,) = attach.wait_calls(1)
        assert first.device == "port-0"
        started = time.monotonic()
        # The fabric's operator sees port-0 is unreachable; the allocation already made
        # stays until the scheduler gives up on it.
        ctrl.update_devices(POOL, upsert=[port(0, [UNREACHABLE])])
        pod = fabric.cluster.wait_pod_prepared("stuck", timeout=BINDING_TIMEOUT + 120)
        # Not before the timeout: the scheduler waited for port-0 that long, then moved on.
        assert time.monotonic() - started >= BINDING_TIMEOUT - 2 * SCHEDULER_POLL
        name, status = fabric.claim_device("stuck")
        assert status[ATTACHED]["status"] == "True"
        assert name == "port-1" and pod.containers["ctr"].env == [EnvDriver.env_of("port-1")]
        assert [d.device for d in attach.wait_calls(2)] == ["port-0", "port-1"]
    finally:
        attach.released.set()
    # port-0's attach answers at last: its outcome is not written on the new allocation.
    assert fabric.binder is not None and fabric.binder.wait_idle(60)
    (claim,) = fabric.cluster.pod_claims("stuck")
    assert [e["device"] for e in claim["status"].get("devices") or ()] == ["port-1"]


def test_a_standby_completes_the_attach_of_a_leader_killed_mid_attach(
    fabric: Fabric, tmp_path: Path
) -> None:
    calls = tmp_path / "calls.jsonl"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(Path(rs.__file__).parents[1]), str(HERE.parent)]))  # fmt: skip

    def replica(identity: str, *flags: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, str(HERE / "binding_replica.py"),
             "--kubeconfig", str(fabric.cluster.apiserver.kubeconfigs["admin"]),
             "--driver", DRIVER, "--pool", POOL, "--identity", identity,
             "--lease", "fabric-binding", "--calls", str(calls), *flags],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        )  # fmt: skip

    def read_calls() -> list[dict[str, Any]]:
        if not calls.exists():
            return []
        return [json.loads(line) for line in calls.read_text().splitlines()]

    leader = replica("replica-a", "--hang")
    standby: subprocess.Popen[str] | None = None
    try:
        Output(leader).wait_for("out", "leading")
        standby = replica("replica-b")
        standby_out = Output(standby)
        standby_out.wait_for("out", "started")
        fabric.cluster.create_pod("survives", claim_template="one-port")
        wait_until(read_calls, 60)
        leader.send_signal(signal.SIGKILL)  # mid-attach: no release of the Lease
        leader.wait()
        standby_out.wait_for("out", "leading")
        pod = fabric.cluster.wait_pod_prepared("survives", timeout=90)
        first, second = read_calls()
        assert (first["identity"], first["retry"]) == ("replica-a", False)
        assert (second["identity"], second["retry"]) == ("replica-b", True)
        # The same claim, device and allocation: a retry the driver can tell as one.
        same = ("claim_uid", "device", "allocated_at", "node")
        assert [first[k] for k in same] == [second[k] for k in same]
        name, status = fabric.claim_device("survives")
        assert name == second["device"] and pod.node == second["node"]
        assert status[ATTACHED]["status"] == "True"
    finally:
        for process in (leader, standby):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()
