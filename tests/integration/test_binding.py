"""BindingController on the real apiserver, with claims allocated as kube-scheduler leaves
them while it waits in PreBind (allocation with the devices' binding conditions, its
timestamp and node, the pod in reservedFor): which devices it attaches, what it writes, when
it calls ``attach`` again, and that it writes only under its controller's Lease.
(tests/e2e/test_binding_conditions.py has kube-scheduler itself wait on it.)"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import kubernetes.client
import pytest
from kubernetes.client.exceptions import ApiException

import resourceslice as rs
from resourceslice import aio
from resourceslice._http import get_json, send_json
from resourceslice.sharding import shard_of
from resourceslice.testing import TestCluster, wait_until
from support.claim_env import claims_path, delete, entries, read

pytestmark = pytest.mark.integration

DRIVER = "fabric.example.com"
OTHER = "other.example.com"
ATTACHED = f"{DRIVER}/Attached"
FAILED = f"{DRIVER}/AttachFailed"
UNREACHABLE = f"{DRIVER}/Unreachable"
TIMEOUT = 30.0
_names = itertools.count()


def port(name: str) -> rs.Device:
    return {
        "name": name,
        "bindsToNode": True,
        "bindingConditions": [ATTACHED],
        "bindingFailureConditions": [FAILED, UNREACHABLE],
    }


def fabric(*pools: str) -> rs.DriverResources:
    selector: rs.NodeSelector = {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "fabric", "operator": "In", "values": ["a"]}]}
        ]
    }
    return rs.DriverResources(
        pools={p: rs.Pool(devices=[port("port-0"), port("port-1")], node_selector=selector)
               for p in pools}
    )  # fmt: skip


def result(pool: str, device: str, driver: str = DRIVER) -> dict[str, Any]:
    return {
        "request": "req",
        "driver": driver,
        "pool": pool,
        "device": device,
        "bindingConditions": [ATTACHED],
        "bindingFailureConditions": [FAILED, UNREACHABLE],
    }


class Claims:
    """Claims of the test's own, allocated and released by hand; deleted after it."""

    def __init__(self, client: kubernetes.client.ApiClient) -> None:
        self.client = client
        self.names: list[str] = []

    def allocate(
        self,
        results: Sequence[dict[str, Any]],
        *,
        name: str | None = None,
        node: str = "node-1",
        reserved: bool = True,
        at: str = "2026-03-01T10:00:00Z",
    ) -> dict[str, Any]:
        """A claim allocated ``results`` on ``node`` at ``at``, reserved for a pod (as
        kube-scheduler's PreBind writes it); an existing ``name`` is allocated anew."""
        path = claims_path()
        if name is None:
            name = f"bind-{next(_names)}"
            body = {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": name},
                "spec": {"devices": {"requests": [
                    {"name": "req", "exactly": {"deviceClassName": "c", "count": len(results)}}]}},
            }  # fmt: skip
            send_json(self.client, "POST", path, json.dumps(body).encode())
            self.names.append(name)
        claim = read(self.client, name)
        field = {"key": "metadata.name", "operator": "In", "values": [node]}
        claim["status"] = {
            "allocation": {
                "devices": {"results": list(results)},
                "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [field]}]},
                "allocationTimestamp": at,
            },
            **({"reservedFor": [{"resource": "pods", "name": "p", "uid": str(uuid.uuid4())}]}
               if reserved else {}),
        }  # fmt: skip
        stored: dict[str, Any] = json.loads(
            send_json(self.client, "PUT", f"{path}/{name}/status", json.dumps(claim).encode())
        )
        return stored

    def deallocate(self, name: str) -> None:
        """As kube-scheduler's PostFilter drops an allocation: status emptied."""
        claim = read(self.client, name)
        claim["status"] = {}
        send_json(self.client, "PUT", f"{claims_path()}/{name}/status", json.dumps(claim).encode())

    def conditions(self, name: str, pool: str, device: str) -> dict[str, dict[str, Any]]:
        entry = entries(read(self.client, name)).get((DRIVER, pool, device)) or {}
        return {c["type"]: c for c in entry.get("conditions") or ()}

    def wait_condition(self, name: str, pool: str, device: str, kind: str, status: str) -> None:
        wait_until(
            lambda: self.conditions(name, pool, device).get(kind, {}).get("status") == status,
            TIMEOUT,
            describe=lambda: f"{name}: {self.conditions(name, pool, device)}",
        )

    def close(self) -> None:
        for name in self.names:
            try:
                delete(self.client, name)
            except ApiException as exc:
                assert exc.status == 404


class Calls:
    """What ``attach`` was called with, and what it answers (by device name)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: list[tuple[dict[str, Any], rs.BindingDevice]] = []
        self.answers: dict[str, Any] = {}
        self.gates: dict[str, threading.Event] = {}
        self.called = threading.Condition(self.lock)

    def __call__(self, claim: dict[str, Any], device: rs.BindingDevice) -> bool:
        with self.lock:
            self.calls.append((claim, device))
            self.called.notify_all()
            gate = self.gates.get(device.device)
            answer = self.answers.get(device.device, True)
        if gate is not None:
            assert gate.wait(4 * TIMEOUT)  # longer than any wait of a test
        if isinstance(answer, list):
            answer = answer.pop(0) if len(answer) > 1 else answer[0]
        if isinstance(answer, BaseException):
            raise answer
        return bool(answer)

    def devices(self) -> list[rs.BindingDevice]:
        with self.lock:
            return [device for _, device in self.calls]

    def wait_calls(self, count: int) -> list[rs.BindingDevice]:
        with self.lock:
            assert self.called.wait_for(lambda: len(self.calls) >= count, TIMEOUT), self.calls
        return self.devices()


@pytest.fixture
def client(kube_cluster: TestCluster) -> Iterator[kubernetes.client.ApiClient]:
    admin = kube_cluster.api_client("admin")
    try:
        yield admin
    finally:
        admin.close()


@pytest.fixture
def claims(client: kubernetes.client.ApiClient) -> Iterator[Claims]:
    made = Claims(client)
    try:
        yield made
    finally:
        made.close()


@pytest.fixture
def ctrl(client: kubernetes.client.ApiClient) -> Iterator[rs.Controller]:
    with rs.start_controller(client, driver=DRIVER, resources=fabric("fabric")) as controller:
        yield controller


def test_an_attached_device_gets_its_binding_conditions_true(
    ctrl: rs.Controller, claims: Claims
) -> None:
    calls = Calls()
    seen_during_attach: list[dict[str, Any]] = []

    def attach(claim: dict[str, Any], device: rs.BindingDevice) -> bool:
        # What a user sees while it runs: the condition False, "Attaching".
        seen_during_attach.append(claims.conditions(device.claim, device.pool, device.device))
        return calls(claim, device)

    with rs.start_binding_controller(ctrl, attach=attach) as binder:
        claim = claims.allocate([result("fabric", "port-1")], node="node-7")
        name = claim["metadata"]["name"]
        claims.wait_condition(name, "fabric", "port-1", ATTACHED, "True")
        assert binder.wait_idle(TIMEOUT)
        (device,) = calls.devices()
        assert device == rs.BindingDevice(
            namespace="default", claim=name, claim_uid=claim["metadata"]["uid"], driver=DRIVER,
            pool="fabric", device="port-1", request="req", share_id=None, node="node-7",
            binding_conditions=(ATTACHED,), binding_failure_conditions=(FAILED, UNREACHABLE),
            allocated_at="2026-03-01T10:00:00Z", retry=False,
        )  # fmt: skip
        (passed, _), *_ = calls.calls
        assert passed["metadata"]["uid"] == claim["metadata"]["uid"]
        assert seen_during_attach[0][ATTACHED]["status"] == "False"
        assert seen_during_attach[0][ATTACHED]["reason"] == "Attaching"
        done = claims.conditions(name, "fabric", "port-1")
        assert done[ATTACHED]["reason"] == "Attached"
        assert done[ATTACHED]["message"] == "attached to node node-7"
        assert FAILED not in done
        assert binder.stats() == rs.BindingStats(attaches=1, attached=1)


def test_a_failed_attach_sets_the_failure_condition(ctrl: rs.Controller, claims: Claims) -> None:
    calls = Calls()
    calls.answers = {
        "port-0": False,
        "port-1": rs.BindingFailedError("no path to node-1", "NoPath", UNREACHABLE),
    }
    with rs.start_binding_controller(ctrl, attach=calls) as binder:
        plain = claims.allocate([result("fabric", "port-0")])["metadata"]["name"]
        chosen = claims.allocate([result("fabric", "port-1")])["metadata"]["name"]
        claims.wait_condition(plain, "fabric", "port-0", FAILED, "True")
        claims.wait_condition(chosen, "fabric", "port-1", UNREACHABLE, "True")
        assert binder.wait_idle(TIMEOUT)
        failed = claims.conditions(plain, "fabric", "port-0")
        assert (failed[ATTACHED]["status"], failed[ATTACHED]["reason"]) == ("False", "AttachFailed")
        assert failed[FAILED]["reason"] == "AttachFailed"
        named = claims.conditions(chosen, "fabric", "port-1")
        assert named[UNREACHABLE]["reason"] == "NoPath"
        assert named[UNREACHABLE]["message"] == "no path to node-1"
        assert FAILED not in named
        assert binder.stats() == rs.BindingStats(attaches=2, failed=2)


def test_a_transient_error_is_reported_and_attach_called_again_as_a_retry(
    ctrl: rs.Controller, claims: Claims
) -> None:
    calls = Calls()
    calls.answers = {"port-0": [ConnectionError("fabric manager unreachable"), True]}
    reported: list[BaseException] = []

    def handler(exc: BaseException, message: str) -> None:
        reported.append(exc)

    with rs.start_binding_controller(ctrl, attach=calls, error_handler=handler) as binder:
        name = claims.allocate([result("fabric", "port-0")])["metadata"]["name"]
        claims.wait_condition(name, "fabric", "port-0", ATTACHED, "True")
        first, second = calls.devices()
        assert (first.retry, second.retry) == (False, True)
        assert first.allocated_at == second.allocated_at
        assert [str(e) for e in reported] == ["fabric manager unreachable"]
        assert binder.stats() == rs.BindingStats(attaches=2, attached=1, errors=1)


def test_an_async_attach_runs_on_the_loop_that_started_the_helper(
    client: kubernetes.client.ApiClient, claims: Claims
) -> None:
    """An asyncio driver: its controller from resourceslice.aio, its attach a coroutine on
    its own loop (where its loop-bound objects work), the helper stopped by ``async with``."""
    loops: list[asyncio.AbstractEventLoop] = []

    async def attach(claim: dict[str, Any], device: rs.BindingDevice) -> bool:
        loops.append(asyncio.get_running_loop())
        await asyncio.sleep(0)
        return True

    async def main() -> None:
        async with aio.start_controller(
            client, driver=DRIVER, resources=fabric("fabric")
        ) as ctrl, rs.start_binding_controller(ctrl, attach=attach):  # fmt: skip
            name = claims.allocate([result("fabric", "port-0")])["metadata"]["name"]
            await asyncio.get_running_loop().run_in_executor(
                None, claims.wait_condition, name, "fabric", "port-0", ATTACHED, "True"
            )
        assert loops == [asyncio.get_running_loop()]

    asyncio.run(main())


def test_only_pending_devices_of_the_controllers_pools_are_attached(
    ctrl: rs.Controller, claims: Claims
) -> None:
    calls = Calls()
    with rs.start_binding_controller(ctrl, attach=calls) as binder:
        # Not ours: another driver's device, a pool the controller does not publish, a
        # device without binding conditions, a claim nobody waits for (not reserved).
        claims.allocate([result("fabric", "port-0", driver=OTHER)])
        claims.allocate([result("elsewhere", "port-0")])
        plain = {k: v for k, v in result("fabric", "port-0").items() if "binding" not in k}
        claims.allocate([plain])
        claims.allocate([result("fabric", "port-0")], reserved=False)
        # Ours: two devices of one claim, one of them settled already.
        both = claims.allocate([result("fabric", "port-0"), result("fabric", "port-1")])
        name = both["metadata"]["name"]
        done = rs.DeviceStatusWriter(claims.client, driver=DRIVER, field_manager="other-writer")
        done.set(both, pool="fabric", device="port-0", conditions=[
            {"type": ATTACHED, "status": "True", "reason": "Attached"}])  # fmt: skip
        claims.wait_condition(name, "fabric", "port-1", ATTACHED, "True")
        assert binder.wait_idle(TIMEOUT)
        assert [(d.claim, d.device) for d in calls.devices()] == [(name, "port-1")]


def test_an_outcome_is_not_written_once_the_allocation_changed(
    ctrl: rs.Controller, claims: Claims
) -> None:
    """The scheduler gave up (a timeout) while attach ran, and allocated the claim again:
    the new allocation is attached while the old attach still hangs, and the late outcome
    is not written over it."""
    calls = Calls()
    calls.gates["port-0"] = threading.Event()
    with rs.start_binding_controller(ctrl, attach=calls) as binder:
        name = claims.allocate([result("fabric", "port-0")])["metadata"]["name"]
        calls.wait_calls(1)
        claims.deallocate(name)
        claims.allocate([result("fabric", "port-1")], name=name, at="2026-03-01T10:10:00Z")
        claims.wait_condition(name, "fabric", "port-1", ATTACHED, "True")
        calls.gates["port-0"].set()
        assert binder.wait_idle(TIMEOUT)
        first, second = calls.devices()
        assert (first.device, second.device, second.retry) == ("port-0", "port-1", False)
        assert ("fabric", "port-0") not in {k[1:3] for k in entries(read(claims.client, name))}


def test_a_leader_that_lost_its_lease_during_an_attach_does_not_write_its_outcome(
    client: kubernetes.client.ApiClient, claims: Claims
) -> None:
    election = rs.LeaderElection(
        "default", f"bind-lost-{uuid.uuid4().hex[:6]}", identity="leader",
        lease_duration=3, renew_deadline=2, retry_period=0.4,
    )  # fmt: skip
    lost = threading.Event()

    def handler(exc: BaseException, message: str) -> None:
        if isinstance(exc, rs.LeadershipLostError):
            lost.set()

    calls = Calls()
    calls.gates["port-0"] = threading.Event()
    with rs.start_controller(
        client, driver=DRIVER, resources=fabric("fabric"), leader_election=election,
        error_handler=handler,
    ) as leader, rs.start_binding_controller(leader, attach=calls) as binder:  # fmt: skip
        wait_until(leader.is_leader, TIMEOUT)
        name = claims.allocate([result("fabric", "port-0")])["metadata"]["name"]
        calls.wait_calls(1)
        # Another replica takes the Lease over: the leader's next renewal finds it so.
        path = f"/apis/coordination.k8s.io/v1/namespaces/default/leases/{election.name}"
        lease = json.loads(get_json(client, path))
        lease["spec"]["holderIdentity"] = "usurper"
        send_json(client, "PUT", path, json.dumps(lease).encode())
        assert lost.wait(TIMEOUT)
        assert not leader.is_leader()
        calls.gates["port-0"].set()
        assert binder.wait_idle(TIMEOUT)
        state = claims.conditions(name, "fabric", "port-0")
        assert (state[ATTACHED]["status"], state[ATTACHED]["reason"]) == ("False", "Attaching")
        assert binder.stats() == rs.BindingStats(attaches=1, attached=1)


def two_pools_on_two_shards() -> tuple[str, str]:
    names = (f"fabric-{i}" for i in itertools.count())
    first = next(names)
    second = next(n for n in names if shard_of(n, 2) != shard_of(first, 2))
    return first, second


def test_sharded_replicas_attach_the_devices_of_their_shards_pools(
    kube_cluster: TestCluster, claims: Claims
) -> None:
    pools = two_pools_on_two_shards()
    lease = f"bind-shards-{uuid.uuid4().hex[:6]}"
    replicas: dict[str, tuple[rs.Controller, rs.BindingController, Calls]] = {}
    clients = []
    try:
        for identity in ("replica-a", "replica-b"):
            election = rs.LeaderElection(
                "default", lease, identity=identity, shards=2,
                lease_duration=3, renew_deadline=2, retry_period=0.4,
            )  # fmt: skip
            clients.append(kube_cluster.api_client("admin"))
            ctrl = rs.start_controller(
                clients[-1], driver=DRIVER, resources=fabric(*pools), leader_election=election
            )
            calls = Calls()
            replicas[identity] = (ctrl, rs.start_binding_controller(ctrl, attach=calls), calls)

        def holder(pool: str) -> str | None:
            found = [i for i, (c, _, _) in replicas.items() if c._holds(pool)]
            return found[0] if len(found) == 1 else None

        # One shard each, once the shares settle.
        wait_until(lambda: {holder(p) for p in pools} == set(replicas), TIMEOUT)
        made = {pool: claims.allocate([result(pool, "port-0")]) for pool in pools}
        for pool, claim in made.items():
            claims.wait_condition(claim["metadata"]["name"], pool, "port-0", ATTACHED, "True")
        for pool in pools:
            attached_by = [i for i, (_, _, calls) in replicas.items()
                           if pool in {d.pool for d in calls.devices()}]  # fmt: skip
            assert attached_by == [holder(pool)], pool
    finally:
        for ctrl, binder, _ in replicas.values():
            binder.stop()
            ctrl.stop()
        for made_client in clients:
            made_client.close()
