"""Other writers: hand edits of managed slices, and a second controller for the same driver.

On the session's apiserver; each test has drivers of its own.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import kubernetes.client
import pytest

import resourceslice as rs
from resourceslice.testing import TestCluster, wait_until
from resourceslice.testing.counting import RequestCounter
from support.controller_env import ControllerEnv, device, driver_name, node_pools

from .faults import FAULT_TABLE, Run, settle

pytestmark = [pytest.mark.integration, pytest.mark.fault]

NODE = "node-a"
OWNER = rs.Owner(
    api_version="v1", kind="Node", name=NODE, uid="0d1e5e1f-0000-4000-8000-00000000000a"
)
OTHER = "other-driver.example.com"
FAST: dict[str, Any] = {"sync_delay": 0.5, "mutation_cache_ttl": 2.0, "owner": OWNER}


@pytest.fixture
def run(kube_cluster: TestCluster, request: pytest.FixtureRequest) -> Iterator[Run]:
    r = Run(kube_cluster, "", driver_name(request.node.name))
    try:
        yield r
    finally:
        r.close()


def node_slice(env: ControllerEnv, name: str, pool: str, node: str, **spec: Any) -> Any:
    body = env.slice_body(name, pool, 1, 1, **spec)
    del body["spec"]["allNodes"]
    body["spec"]["nodeName"] = node
    return body


def versions(slices: list[dict[str, Any]]) -> dict[str, str]:
    return {s["metadata"]["name"]: s["metadata"]["resourceVersion"] for s in slices}


def test_hand_edits_are_healed_foreign_slices_untouched(run: Run) -> None:
    env = run.env
    wanted = {NODE: [device(i) for i in range(300)]}  # 3 slices
    ctrl = env.start_synced(node_pools(**{NODE: rs.Pool(devices=wanted[NODE])}), **FAST)
    # Not ours: our driver on another node, and another driver on our node.
    other_driver = node_slice(env, f"00000-{OTHER}-{NODE}-", NODE, NODE, devices=[device(0)])
    other_driver["spec"]["driver"] = OTHER
    foreign = [
        env.create_slice(node_slice(env, f"00000-{env.driver}-node-b-", "node-b", "node-b")),
        env.create_slice(other_driver),
    ]
    # The driver's slices as a whole: ours exactly, and node-b's (empty) pool left as it is.
    wanted["node-b"] = []

    def heal(fault: str, edit: Any) -> None:
        env.counter.reset()
        run.fault = fault
        edit(env.slices(NODE))
        since = time.monotonic()
        outcome = run.finish(ctrl, wanted, since)
        # Not at once: the controller waits sync_delay before acting on a watch event.
        assert outcome.seconds >= FAST["sync_delay"]
        assert sum(outcome.writes.values()) <= 4

    def edited(slices: list[dict[str, Any]]) -> None:
        first = slices[0]
        first["spec"]["devices"][0]["attributes"]["model"] = {"string": "tampered"}
        env.replace_slice(first)

    def deleted(slices: list[dict[str, Any]]) -> None:
        env.api.delete_resource_slice(slices[1]["metadata"]["name"], _preload_content=False)

    def added(slices: list[dict[str, Any]]) -> None:
        pool = slices[0]["spec"]["pool"]
        extra = node_slice(env, f"00003-{env.driver}-{NODE}-", NODE, NODE, devices=[device(10_000)])
        extra["spec"]["pool"] = pool
        env.create_slice(extra)

    heal("4a another client edits a managed slice", edited)
    [(overwritten, _)] = env.errors
    assert isinstance(overwritten, rs.ConflictingWriterError)
    assert overwritten.slice_name == env.slices(NODE)[0]["metadata"]["name"]
    heal("4b another client deletes a managed slice", deleted)
    heal("4c another client adds a slice to the pool", added)
    # The added slice was the one delete; the foreign slices are as they were created.
    assert env.counter.writes().get("DELETE") == 1
    try:
        for before in foreign:
            after = json.loads(
                env.api.read_resource_slice(before["metadata"]["name"], _preload_content=False).data
            )
            assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    finally:
        env.api.delete_collection_resource_slice(
            field_selector=f"spec.driver={OTHER}", _preload_content=False
        )


def test_two_controllers_same_desired_state(run: Run) -> None:
    env = run.env
    run.fault = "5a two controllers, same desired state"
    wanted = {NODE: [device(i) for i in range(300)]}
    resources = node_pools(**{NODE: rs.Pool(devices=wanted[NODE])})
    since = time.monotonic()
    first, first_counter = env.start(resources, **FAST), env.counter
    second_counter = env.new_counter()
    second = env.start(resources, **FAST)
    # Slice names are deterministic: of two creates of one slice, the second gets 409
    # (SliceExistsError) and that controller adopts the other's slice. Nothing is undone.
    outcome = run.finish(first, wanted, since, second, counters=[first_counter, second_counter])
    assert set(outcome.writes) == {"POST"} and outcome.writes["POST"] <= 2 * 3
    assert all(isinstance(e, rs.SliceExistsError) for e, _ in env.errors), env.errors
    for counter in (first_counter, second_counter):
        counter.reset()
    first.update(resources)
    second.update(resources)
    settle(first, env, wanted)
    settle(second, env, wanted)
    assert first_counter.writes() == second_counter.writes() == {}


def test_two_controllers_different_desired_states(run: Run) -> None:
    env = run.env
    run.fault = "5b two controllers, different desired states"
    one = [device(i) for i in range(10)]
    two = [device(i, attributes={"index": {"int": -i}}) for i in range(10)]
    reports: dict[str, list[BaseException]] = {"first": [], "second": []}
    first_counter = env.counter
    env.start_synced(
        node_pools(**{NODE: rs.Pool(devices=one)}),
        error_handler=lambda exc, _: reports["first"].append(exc),
        **FAST,
    )
    second_counter = env.new_counter()
    second = env.start(
        node_pools(**{NODE: rs.Pool(devices=two)}),
        error_handler=lambda exc, _: reports["second"].append(exc),
        **FAST,
    )
    assert second.wait_synced(30)
    since = time.monotonic()
    start = writes(first_counter, second_counter)
    # They fight: each rewrites what the other wrote. Each rewrite waits sync_delay after
    # the other's write showed up, so 8 writes take at least 3 sync_delays: a bounded rate,
    # not a tight loop.
    wait_until(lambda: writes(first_counter, second_counter) >= start + 8)
    assert time.monotonic() - since >= 3 * FAST["sync_delay"]
    # Each side's error handler names the slice the other keeps overwriting.
    for side in ("first", "second"):
        assert any(isinstance(e, rs.ConflictingWriterError) for e in reports[side]), reports


def writes(*counters: RequestCounter) -> int:
    return sum(sum(c.writes().values()) for c in counters)


def test_two_controllers_different_desired_states_leader_elected(
    run: Run, kube_client: kubernetes.client.ApiClient
) -> None:
    """5b with leader election: the standby writes nothing, whatever it wants; when the
    leader stops, the standby takes over at once and publishes its own state."""
    env = run.env
    run.fault = "5b two controllers, leader election: one writer"
    lease = env.driver.replace(".", "-")
    # Long enough that a loaded machine does not make the leader miss its renewals.
    election = rs.LeaderElection(
        "default", lease, lease_duration=6, renew_deadline=4, retry_period=0.5
    )
    one = [device(i) for i in range(10)]
    two = [device(i, attributes={"index": {"int": -i}}) for i in range(10)]
    leases = kubernetes.client.CoordinationV1Api(kube_client)
    since = time.monotonic()
    first_counter = env.counter
    first = env.start_synced(
        node_pools(**{NODE: rs.Pool(devices=one)}), leader_election=election, **FAST
    )
    second_counter = env.new_counter()
    second = env.start(node_pools(**{NODE: rs.Pool(devices=two)}), leader_election=election, **FAST)
    # Several renewals of the Lease, each a chance to fight: unfought, 5b makes 8 writes in
    # 3 sync_delays, and this lasts at least 4 renewals of 0.5 s (4 sync_delays).
    renewals: set[str] = set()

    def renewed() -> bool:
        renewals.add(str(leases.read_namespaced_lease(lease, "default").spec.renew_time))
        return len(renewals) > 4

    wait_until(renewed)
    assert first.is_leader() and not second.is_leader()
    assert second_counter.writes("resourceslices") == {}
    counters = [first_counter, second_counter]
    outcome = run.finish(first, {NODE: one}, since, counters=counters, path="resourceslices")
    assert outcome.writes == {"POST": 1}
    assert second_counter.writes("resourceslices") == {}
    assert not [e for e, _ in env.errors if isinstance(e, rs.ConflictingWriterError)]

    # The leader stops: it releases the Lease, and the standby takes over without waiting
    # for it to expire.
    run.fault = "5c leader stops: the standby takes over at once"
    since = time.monotonic()
    first.stop()
    wait_until(second.is_leader)
    takeover = time.monotonic() - since
    outcome = run.finish(
        second, {NODE: two}, since, counters=[second_counter], path="resourceslices"
    )
    FAULT_TABLE[-1] = replace(outcome, takeover=takeover)
    assert outcome.writes == {"PUT": 1}
    leases.delete_namespaced_lease(lease, "default")
