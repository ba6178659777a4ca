"""10,000 devices in one flat pool on the real apiserver: the write counts that matter."""

from __future__ import annotations

import pytest

import resourceslice as rs
from support.controller_env import (
    ControllerEnv,
    device,
    pools,
)

pytestmark = pytest.mark.integration

DEVICES = 10_000


def test_ten_thousand_devices(env: ControllerEnv) -> None:
    devs = [device(i) for i in range(DEVICES)]
    ctrl = env.start_synced(pools(p=rs.Pool(devices=devs)))
    # ceil(10000 / 128) slices, one create each, nothing else.
    assert env.counter.writes() == {"POST": 79}
    published = env.slices()
    assert len(published) == 79
    assert sum(len(s["spec"]["devices"]) for s in published) == DEVICES

    devs[5000] = device(5000, attributes={"index": {"int": -1}})
    env.counter.reset()
    env.update_synced(ctrl, pools(p=rs.Pool(devices=devs)))
    assert env.counter.writes() == {"PUT": 1}
    assert {s["spec"]["pool"]["generation"] for s in env.slices()} == {1}

    # Changes in several slices: one PUT per changed slice, the generation kept (it was 79
    # PUTs under a new generation for 2 devices in 2 slices).
    for changed in ([0, 9999], [1, 2000, 4000, 6000, 8000]):
        for i in changed:
            devs[i] = device(i, attributes={"index": {"int": -1 - i}})
        env.counter.reset()
        env.update_synced(ctrl, pools(p=rs.Pool(devices=devs)))
        assert env.counter.writes() == {"PUT": len(changed)}
        assert {s["spec"]["pool"]["generation"] for s in env.slices()} == {1}

    with env.restart(ctrl, pools(p=rs.Pool(devices=devs))):
        assert env.counter.writes() == {}
    assert env.errors == []
