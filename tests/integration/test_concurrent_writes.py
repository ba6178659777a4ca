"""A pool's writes in flight together, on the real apiserver (docs/core.md §5).

In-place updates that keep the generation may land in any order, so the controller sends
up to ``max_concurrent_writes`` of one pool's at a time; every other sync (a new generation,
creates, deletes) writes one slice after another, deletes first, updates before creates.
The client's requests are counted as they leave (``RequestCounter``); a gate holds the first
few updates until as many are in flight, which only concurrent writes get through.
"""

from __future__ import annotations

from typing import Any

import pytest

import resourceslice as rs
from support.controller_env import SYNC_TIMEOUT, ControllerEnv, Gate, device, pools

pytestmark = pytest.mark.integration

#: 4 devices a slice: 40 devices are 10 slices, slice k holding dev-4k .. dev-4k+3.
PER_SLICE = 4
DEVICES = 40


def changed(i: int, v: int) -> dict[str, Any]:
    return device(i, attributes={"index": {"int": i}, "v": {"int": v}})


def desired(devs: dict[str, dict[str, Any]]) -> rs.DriverResources:
    return pools(p=rs.Pool(devices=list(devs.values()), max_devices_per_slice=PER_SLICE))


def generations(env: ControllerEnv) -> set[int]:
    return {s["spec"]["pool"]["generation"] for s in env.slices()}


def start(env: ControllerEnv, limit: int) -> tuple[rs.Controller, dict[str, dict[str, Any]]]:
    devs = {f"dev-{i}": device(i) for i in range(DEVICES)}
    ctrl = env.start(desired(devs), max_concurrent_writes=limit)
    assert ctrl.wait_idle(SYNC_TIMEOUT), env.errors
    assert len(env.slices()) == DEVICES // PER_SLICE
    env.counter.reset()
    return ctrl, devs


@pytest.mark.parametrize("limit", [4, 8])
def test_in_place_updates_are_in_flight_together_up_to_the_limit(
    env: ControllerEnv, limit: int
) -> None:
    gate = Gate(env.client)
    ctrl, devs = start(env, limit)
    # One device changed in each of the 10 slices: 10 isolated updates, generation kept.
    for round_ in range(3):
        if round_ == 0:
            gate.arm(limit)
        for k in range(DEVICES // PER_SLICE):
            devs[f"dev-{PER_SLICE * k}"] = changed(PER_SLICE * k, round_)
        env.update_synced(ctrl, desired(devs))
    assert not gate.failed, f"the first {limit} updates were never in flight together"
    assert env.errors == []
    assert env.counter.writes() == {"PUT": 30}
    assert env.counter.peak_writes_in_flight() == limit
    assert generations(env) == {1}


def test_a_limit_of_one_writes_one_slice_after_another(env: ControllerEnv) -> None:
    ctrl, devs = start(env, 1)
    for k in range(DEVICES // PER_SLICE):
        devs[f"dev-{PER_SLICE * k}"] = changed(PER_SLICE * k, 1)
    env.update_synced(ctrl, desired(devs))
    assert env.errors == []
    assert env.counter.writes() == {"PUT": 10}
    assert env.counter.peak_writes_in_flight() == 1
    assert generations(env) == {1}


def test_a_new_generation_is_written_in_order_one_at_a_time(env: ControllerEnv) -> None:
    ctrl, devs = start(env, 8)
    # A new slice: every slice is rewritten under generation 2, updates before the create.
    devs.update({f"dev-{i}": device(i) for i in range(DEVICES, DEVICES + PER_SLICE)})
    env.update_synced(ctrl, desired(devs))
    assert generations(env) == {2}
    writes = [method for method, _ in env.counter.requests() if method in ("PUT", "POST")]
    assert writes == ["PUT"] * 10 + ["POST"], writes
    assert env.counter.peak_writes_in_flight() == 1

    # The last slice emptied: dropped (deleted first), the others rewritten under generation 3.
    env.counter.reset()
    for i in range(DEVICES, DEVICES + PER_SLICE):
        del devs[f"dev-{i}"]
    env.update_synced(ctrl, desired(devs))
    assert generations(env) == {3}
    writes = [m for m, _ in env.counter.requests() if m in ("PUT", "POST", "DELETE")]
    assert writes == ["DELETE"] + ["PUT"] * 10, writes
    assert env.counter.peak_writes_in_flight() == 1
    assert env.errors == []


def test_stop_waits_for_the_writes_in_flight(env: ControllerEnv) -> None:
    ctrl, devs = start(env, 4)
    for k in range(DEVICES // PER_SLICE):
        devs[f"dev-{PER_SLICE * k}"] = changed(PER_SLICE * k, 1)
    ctrl.update(desired(devs))
    ctrl.stop()
    # Whatever was sent was answered before stop() returned; nothing is sent after it.
    sent = env.counter.writes()
    assert env.counter.statuses("PUT").get(None, 0) == 0
    assert not ctrl.running
    assert env.counter.writes() == sent
