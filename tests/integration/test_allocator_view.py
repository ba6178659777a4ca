"""The scheduler's view of a pool while controllers change it (docs/core.md §5).

The oracle is tests/allocview: the allocator of k8s.io/dynamic-resource-allocation/structured
v0.37.2, asked after every watch event for all the driver's devices. Through churn in several
slices, additions and removals, a device moving between slices, a controller restarted in the
middle of a sync and two controllers at once: no view is invalid, none is incomplete while
slices are only updated in place, and a complete view never misses a device desired both
before and after the change. The same with a pool's in-place updates in flight together
(``max_concurrent_writes``), held until they are, so that they land in the server's order.
"""

from __future__ import annotations

import json
import queue
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import resourceslice as rs
from resourceslice.testing import TestCluster
from resourceslice.testing.cluster import build_go_binary
from support.controller_env import (
    SYNC_TIMEOUT,
    ControllerEnv,
    Gate,
    device,
    pools,
)

pytestmark = pytest.mark.integration

_SOURCE = Path(__file__).resolve().parent.parent / "allocview"
#: A handful of these devices per slice: a pool of 24 is several slices.
MAX_SLICE_BYTES = 4096 + 8 * 105
View = dict[str, Any]


class AllocView:
    """One oracle process watching the driver's slices; its views arrive in a queue."""

    def __init__(self, cluster: TestCluster, driver: str) -> None:
        binary = build_go_binary(
            _SOURCE, binary="allocview", cache_name="allocview", what="the allocator oracle"
        )
        self._process = subprocess.Popen(
            [
                str(binary),
                f"--kubeconfig={cluster.kubeconfigs['admin']}",
                f"--driver={driver}",
                "--node=node-1",
            ],
            stdout=subprocess.PIPE,
        )
        self._lines: queue.Queue[View | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        #: Slice name -> resourceVersion, as the oracle has seen them.
        self.seen: dict[str, str] = {}
        while "ready" not in self._next():
            pass

    def _read(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            self._lines.put(json.loads(line))
        self._lines.put(None)

    def _next(self) -> View:
        line = self._lines.get(timeout=SYNC_TIMEOUT)
        assert line is not None, f"allocview exited with {self._process.wait()}"
        return line

    def event(self) -> View:
        """The view after the next event."""
        view = self._next()
        if view.get("deleted"):
            self.seen.pop(view["slice"], None)
        elif view.get("slice"):
            self.seen[view["slice"]] = view["rv"]
        return view

    def views_until(self, stored: dict[str, str]) -> list[View]:
        """The views after each event, until the oracle has seen the slices as ``stored``."""
        views = []
        while self.seen != stored:
            views.append(self.event())
        return views

    def close(self) -> None:
        self._process.terminate()
        self._process.wait()
        if self._process.stdout is not None:
            self._process.stdout.close()


@pytest.fixture(name="oracle")
def oracle_fixture(kube_cluster: TestCluster, env: ControllerEnv) -> Iterator[AllocView]:
    view = AllocView(kube_cluster, env.driver)
    try:
        yield view
    finally:
        view.close()


def _stored(env: ControllerEnv) -> dict[str, str]:
    return {s["metadata"]["name"]: s["metadata"]["resourceVersion"] for s in env.slices()}


def _desired(devs: dict[str, dict[str, Any]]) -> rs.DriverResources:
    return pools(p=rs.Pool(devices=list(devs.values())))


def _check(views: list[View], before: set[str], after: set[str], in_place: bool) -> None:
    """No view misleads: none invalid (nor an error), none incomplete for in-place updates,
    every complete one between ``before`` and ``after`` with what both have."""
    stays = before & after
    for view in views:
        assert view["state"] in ("complete", "incomplete"), (view, view.get("reason"))
        if in_place:
            assert view["state"] == "complete", view
        if view["state"] == "complete":
            seen = set(view["devices"])
            assert stays <= seen, f"missing {sorted(stays - seen)}: {view}"
            assert seen <= before | after, view
    assert views and views[-1]["state"] == "complete", views[-1:]
    assert set(views[-1]["devices"]) == after


def _apply(devs: dict[str, dict[str, Any]], edit: dict[str, dict[str, Any] | None]) -> None:
    """Set (or remove, for None) each edited device in ``devs``."""
    for name, new in edit.items():
        if new is None:
            del devs[name]
        else:
            devs[name] = new


def _changed(i: int, v: int) -> dict[str, Any]:
    """Device ``i`` at version ``v`` of its attributes."""
    return device(i, attributes={"index": {"int": i}, "v": {"int": v}})


def test_no_view_misleads_the_allocator(env: ControllerEnv, oracle: AllocView) -> None:
    devs = {f"dev-{i}": device(i) for i in range(24)}
    ctrl = env.start_synced(_desired(devs), max_slice_bytes=MAX_SLICE_BYTES)
    _check(oracle.views_until(_stored(env)), set(), set(devs), in_place=False)
    assert len(oracle.seen) > 2

    controllers = [ctrl]

    def step(edit: dict[str, dict[str, Any] | None], in_place: bool, restart: bool = False) -> None:
        before = set(devs)
        _apply(devs, edit)
        for c in controllers:
            c.update(_desired(devs))
        views = []
        if restart:
            # Stopped once its first write is seen, a new controller finishes the sync.
            views.append(oracle.event())
            controllers[0].stop()
            env.new_counter()
            controllers[0] = env.start(_desired(devs), max_slice_bytes=MAX_SLICE_BYTES)
        for c in controllers:
            assert c.wait_synced(SYNC_TIMEOUT), env.errors
        views += oracle.views_until(_stored(env))
        _check(views, before, set(devs), in_place)

    # Churn: a device in each slice changed, several times; then removals and additions.
    for v in range(3):
        step({f"dev-{i}": _changed(i, v) for i in (0, 9, 17)}, in_place=True)
    step({"dev-3": None, "dev-12": None}, in_place=True)
    step({"dev-30": device(30), "dev-31": device(31)}, in_place=True)
    # A device grown out of its slice moves to another: a new generation.
    pad = {"index": {"int": 1}, **{f"pad{k}": {"string": "x" * 60} for k in range(3)}}
    step({"dev-1": device(1, attributes=pad)}, in_place=False)
    # A controller restarted in the middle of in-place updates.
    step({f"dev-{i}": _changed(i, 7) for i in (2, 10, 18)}, in_place=True, restart=True)
    # Two controllers with the same desired state, racing each other's writes.
    env.new_counter()
    controllers.append(env.start(_desired(devs), max_slice_bytes=MAX_SLICE_BYTES))
    for v in range(3):
        step({f"dev-{i}": _changed(i, 10 + v) for i in (4, 11, 19, 30)}, in_place=True)
    step({"dev-5": None, "dev-40": device(40)}, in_place=True)
    # Racing controllers see each other's writes: 409 on a stale resourceVersion, and the
    # other's write reported as a conflicting writer. Nothing else went wrong.
    unexpected = [
        e
        for e, _ in env.errors
        if not isinstance(e, rs.ConflictingWriterError) and getattr(e, "status", None) != 409
    ]
    assert unexpected == []


def test_concurrent_updates_never_mislead_the_allocator(
    env: ControllerEnv, oracle: AllocView
) -> None:
    """Eight slices of four devices (the allocator gives a claim at most 32); each step
    changes every slice in place, the eight updates held until all are in flight, so they
    race each other to the server."""
    limit, per_slice, count = 8, 4, 8
    gate = Gate(env.client)
    devs = {f"dev-{i}": device(i) for i in range(count * per_slice)}

    def desired() -> rs.DriverResources:
        return pools(p=rs.Pool(devices=list(devs.values()), max_devices_per_slice=per_slice))

    ctrl = env.start_synced(desired(), max_concurrent_writes=limit)
    _check(oracle.views_until(_stored(env)), set(), set(devs), in_place=False)
    assert len(oracle.seen) == count

    def step(edit: dict[str, dict[str, Any] | None]) -> None:
        before = set(devs)
        _apply(devs, edit)
        gate.arm(limit)
        ctrl.update(desired())
        assert ctrl.wait_synced(SYNC_TIMEOUT), env.errors
        assert not gate.failed, "the updates were not in flight together"
        _check(oracle.views_until(_stored(env)), before, set(devs), in_place=True)

    for v in range(3):
        step({f"dev-{per_slice * k + v}": _changed(per_slice * k + v, v) for k in range(count)})
    # A device out of two slices (more would make the packer compact the pool: a new
    # generation), then new ones into the room left, beside changes in the other slices.
    others = {f"dev-{per_slice * k}": _changed(per_slice * k, 5) for k in range(2, count)}
    step({"dev-3": None, "dev-7": None, **others})
    others = {f"dev-{per_slice * k}": _changed(per_slice * k, 6) for k in range(2, count)}
    step({"dev-100": device(100), "dev-101": device(101), **others})
    assert env.errors == []
    assert env.counter.peak_writes_in_flight() == limit
    assert {s["spec"]["pool"]["generation"] for s in env.slices()} == {1}
