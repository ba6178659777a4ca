"""Device-level updates on the real apiserver (docs/core.md §8): devices upserted and removed
by name, with the writes of an update() to the same devices, mixed with update()."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import resourceslice as rs
from resourceslice import aio
from support.controller_env import (
    SYNC_TIMEOUT,
    ControllerEnv,
    device,
    devices_of,
    pools,
)

pytestmark = pytest.mark.integration

DEVICES = 1000
TAINT = {"key": "link", "value": "down", "effect": "NoSchedule"}


def _published(env: ControllerEnv) -> dict[str, dict[str, Any]]:
    return {d["name"]: d for s in env.slices("p") for d in devices_of(s)}


def _generations(env: ControllerEnv) -> set[int]:
    return {s["spec"]["pool"]["generation"] for s in env.slices("p")}


def test_device_updates_write_what_a_full_update_would(env: ControllerEnv) -> None:
    devs = {f"dev-{i}": device(i) for i in range(DEVICES)}
    ctrl = env.start_synced(pools(p=rs.Pool(devices=list(devs.values()))))
    before = {s["metadata"]["name"]: devices_of(s) for s in env.slices("p")}

    # Two devices of two slices changed, one removed from a third, one added. (Not a taint
    # here: a taint lowers a full slice's limit from 128 devices to 64, and the evicted
    # devices move: a new generation, as with update().)
    edited = [device(i, attributes={"index": {"int": -i}}) for i in (3, 700)]
    env.counter.reset()
    ctrl.update_devices("p", upsert=[*edited, device(5000)], remove=["dev-300"])
    assert ctrl.wait_synced(SYNC_TIMEOUT), env.errors
    # One write per slice whose devices changed: 3 (dev-5000 takes dev-300's place).
    after = {s["metadata"]["name"]: devices_of(s) for s in env.slices("p")}
    changed = [name for name in after if after[name] != before.get(name)]
    assert len(changed) == 3
    assert env.counter.writes() == {"PUT": len(changed)}
    assert _generations(env) == {1}
    published = _published(env)
    assert published["dev-3"]["attributes"] == {"index": {"int": -3}}
    assert "dev-300" not in published and "dev-5000" in published

    # The full update() of the same devices is no change: nothing is written.
    for d in edited:
        devs[d["name"]] = d
    del devs["dev-300"]
    devs["dev-5000"] = device(5000)
    env.counter.reset()
    env.update_synced(ctrl, pools(p=rs.Pool(devices=list(devs.values()))))
    assert env.counter.writes() == {}

    # After an update(), device updates apply to its state: a taint set, then cleared.
    env.update_synced(ctrl, pools(p=rs.Pool(devices=[device(i) for i in range(10)])))
    env.counter.reset()
    ctrl.update_devices("p", upsert=[device(3, taints=[TAINT])], remove=["dev-9"])
    assert ctrl.wait_synced(SYNC_TIMEOUT), env.errors
    assert _published(env)["dev-3"]["taints"][0]["key"] == "link"
    ctrl.update_devices("p", upsert=[device(3)])
    assert ctrl.wait_synced(SYNC_TIMEOUT), env.errors
    assert env.counter.writes() == {"PUT": 2}
    assert sorted(_published(env)) == sorted(f"dev-{i}" for i in range(9))
    assert "taints" not in _published(env)["dev-3"]
    assert env.errors == []


def test_taints_in_a_pool_packed_at_64_are_one_write_each(env: ControllerEnv) -> None:
    """A pool whose devices get tainted, packed at the API's limit for a slice with a
    tainted device: taints in several full slices are one write each, the generation kept
    (at 128 the first taint in a full slice moves half of it: every slice rewritten)."""
    pool = rs.Pool(devices=[device(i) for i in range(DEVICES)], max_devices_per_slice=64)
    ctrl = env.start_synced(pools(p=pool))
    assert sorted(len(devices_of(s)) for s in env.slices("p")) == [40] + [64] * 15
    env.counter.reset()
    ctrl.update_devices("p", upsert=[device(i, taints=[TAINT]) for i in (0, 64, 640)])
    assert ctrl.wait_synced(SYNC_TIMEOUT), env.errors
    assert env.counter.writes() == {"PUT": 3}
    assert _generations(env) == {1}
    assert all("taints" in _published(env)[f"dev-{i}"] for i in (0, 64, 640))
    assert env.errors == []


def test_device_updates_are_validated_and_refused_whole(env: ControllerEnv) -> None:
    ctrl = env.start_synced(
        pools(
            p=rs.Pool(devices=[device(0), device(1)]),
            s=rs.Pool(slices=[rs.Slice(devices=[device(2)])]),
        )
    )
    env.counter.reset()
    refused = [
        (("p",), {"upsert": [device(2), {"name": "Bad_Name"}]}, 'pools["p"].devices[1].name'),
        (("p",), {"upsert": [device(2), device(2)]}, "duplicate"),
        (("p",), {"upsert": [device(1)], "remove": ["dev-1"]}, 'remove["dev-1"]: also upserted'),
        (("s",), {"upsert": [device(3)]}, 'pools["s"]: given as slices'),
        (("q",), {"upsert": [device(3)]}, 'pools["q"]: not desired'),
        (("p",), {"remove": [7]}, "remove[0]: must be a string"),
    ]
    for args, kwargs, message in refused:
        with pytest.raises(rs.ValidationError, match=message.replace("[", r"\[")):
            ctrl.update_devices(*args, **kwargs)
    assert ctrl.wait_idle(SYNC_TIMEOUT)
    assert env.counter.writes() == {}
    assert sorted(_published(env)) == ["dev-0", "dev-1"]


def test_device_updates_arriving_together_are_one_write_per_slice(env: ControllerEnv) -> None:
    ctrl = env.start_synced(
        pools(p=rs.Pool(devices=[device(i) for i in range(50)])), update_interval=2.0
    )
    env.counter.reset()
    # The first change is synced at once (with the others, if they came before the worker
    # took it); the ones after it, within update_interval of that sync, are coalesced into
    # one sync at its end: at most one more write of their slice, never one per call.
    for i in range(5):
        ctrl.update_devices("p", upsert=[device(i, taints=[TAINT])])
    assert ctrl.wait_synced(SYNC_TIMEOUT), env.errors
    writes = env.counter.writes()
    assert writes.keys() == {"PUT"} and writes["PUT"] <= 2, writes
    assert all("taints" in _published(env)[f"dev-{i}"] for i in range(5))


def test_aio_device_updates(env: ControllerEnv) -> None:
    async def main() -> None:
        async with aio.start_controller(
            env.client, driver=env.driver, resources=pools(p=rs.Pool(devices=[device(0)]))
        ) as ctrl:
            assert await ctrl.wait_synced(SYNC_TIMEOUT)
            await ctrl.update_devices("p", upsert=[device(1)], remove=["dev-0"])
            assert await ctrl.wait_synced(SYNC_TIMEOUT)
            with pytest.raises(rs.ValidationError):
                await ctrl.update_devices("q", upsert=[device(1)])

    asyncio.run(main())
    assert sorted(_published(env)) == ["dev-1"]
