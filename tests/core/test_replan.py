"""Plans carried over between syncs (docs/core.md §5, "Planning in O(changed)"): after
in-place device edits the Rust core compares only the slices that changed, and its plans
are the ones made from scratch, by itself and by the pure-Python core."""

from __future__ import annotations

import itertools
import json
from types import ModuleType
from typing import Any

from core_helpers import OWNER, pool, prepare
from hypothesis import given, settings
from hypothesis import strategies as st

from resourceslice import _core, _pycore

TAINT = {"key": "link", "value": "down", "effect": "NoSchedule"}


def _device(i: int, version: int = 0, tainted: bool = False) -> dict[str, Any]:
    return {
        "name": f"d{i}",
        "attributes": {"v": {"int": version}, "pad": {"string": "x" * (i % 7)}},
        **({"taints": [TAINT]} if tainted else {}),
    }


def _pool(devices: list[dict[str, Any]], per_slice: int) -> dict[str, Any]:
    return {"p": pool(devices, maxDevicesPerSlice=per_slice)}


def _edit(core: ModuleType, desired: Any, upserts: list[Any], removed: list[str]) -> Any:
    batch = prepare(core, _pool(upserts, 128))
    edited, errors = desired.with_devices("p", batch, removed)
    assert errors == []
    return edited


def _plan(core: ModuleType, desired: Any, records: list[Any]) -> Any:
    return core.plan_pool(desired, "p", records, OWNER, "node-1")


def _outcome(plan: Any) -> tuple[Any, ...]:
    return (
        plan.generation,
        plan.slice_count,
        plan.deletes,
        plan.writes,
        plan.updates,
        plan.creates,
        plan.waiting,
    )


class _Server:
    """The stored ResourceSlices as the apiserver holds them, as JSON objects."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self._versions = itertools.count(1)
        self._decoded: dict[tuple[str, str, str], Any] = {}

    def apply(self, plan: Any, writes: int | None = None) -> None:
        """Carries out ``plan``: its deletes, then its first ``writes`` writes (all: None)."""
        for name, _, _ in plan.deletes:
            del self.objects[name]
        bodies = [json.loads(b) for _, b in plan.updates] + [json.loads(b) for b in plan.creates]
        for obj in bodies[:writes]:
            meta = obj["metadata"]
            stored = self.objects.get(meta["name"])
            assert meta.get("resourceVersion") == (stored and stored["metadata"]["resourceVersion"])
            meta["uid"] = stored["metadata"]["uid"] if stored else f"uid-{meta['name']}"
            meta["resourceVersion"] = str(next(self._versions))
            for device in obj["spec"].get("devices", []):
                for taint in device.get("taints", []):
                    taint.setdefault("timeAdded", "2026-01-02T03:04:05Z")
            self.objects[meta["name"]] = obj

    def foreign_edit(self, which: int) -> None:
        """Another client changes the first device of one stored slice."""
        if self.objects:
            obj = self.objects[sorted(self.objects)[which % len(self.objects)]]
            if obj["spec"].get("devices"):
                obj["spec"]["devices"][0]["attributes"]["v"] = {"int": 99}
            obj["metadata"]["resourceVersion"] = str(next(self._versions))

    def records(self, core: ModuleType) -> list[Any]:
        """The records an informer would hold: the same object until the slice changes."""
        out = []
        for name, obj in self.objects.items():
            key = (core.__name__, name, obj["metadata"]["resourceVersion"])
            if key not in self._decoded:
                self._decoded[key] = core.decode_slice(json.dumps(obj).encode())
            out.append(self._decoded[key])
        return out


def test_one_device_changed_compares_one_slice() -> None:
    devices = [_device(i) for i in range(1000)]
    desired = prepare(_core, _pool(devices, 64))
    server = _Server()
    server.apply(_plan(_core, desired, []))
    first = _plan(_core, desired, server.records(_core))  # the informer's events' sync
    assert (first.writes, first.compared) == ([], 16)
    edited = _edit(_core, desired, [_device(500, 1, tainted=True)], [])
    plan = _plan(_core, edited, server.records(_core))
    assert plan.compared == 1
    devices[500] = _device(500, 1, tainted=True)
    scratch = _plan(_core, prepare(_core, _pool(devices, 64)), server.records(_core))
    assert _outcome(plan) == _outcome(scratch) and scratch.compared == 16
    assert len(plan.updates) == 1 and plan.creates == []
    server.apply(plan)
    again = _plan(_core, edited, server.records(_core))  # the write's own watch event
    assert (again.writes, again.compared) == ([], 1)


def test_what_the_memo_cannot_vouch_for_is_planned_from_scratch() -> None:
    devices = [_device(i) for i in range(300)]
    desired = prepare(_core, _pool(devices, 16))
    server = _Server()
    server.apply(_plan(_core, desired, []))
    assert _plan(_core, desired, server.records(_core)).compared == 19
    # A device added: positions are not kept, no memo is carried.
    grown = _edit(_core, desired, [_device(300)], [])
    assert _plan(_core, grown, server.records(_core)).compared == 19
    # An in-place edit from a pool that was planned, against a slice someone else edited.
    edited = _edit(_core, desired, [_device(7, 2)], [])
    server.foreign_edit(3)
    plan = _plan(_core, edited, server.records(_core))
    assert plan.compared == 2  # the edited device's slice, and the record that changed
    devices[7] = _device(7, 2)
    scratch = _plan(_core, prepare(_core, _pool(devices, 16)), server.records(_core))
    assert _outcome(plan) == _outcome(scratch)


def test_a_chain_of_edits_never_planned_is_cut() -> None:
    """A standby replica edits and never plans: it must not keep every version alive."""
    desired = prepare(_core, _pool([_device(i) for i in range(300)], 16))
    server = _Server()
    server.apply(_plan(_core, desired, []))
    assert _plan(_core, desired, server.records(_core)).compared == 19
    edited = desired
    for version in range(1, 201):
        edited = _edit(_core, edited, [_device(1, version)], [])
    assert _plan(_core, edited, server.records(_core)).compared == 1
    for version in range(201, 501):
        edited = _edit(_core, edited, [_device(1, version)], [])
    assert _plan(_core, edited, server.records(_core)).compared == 19


def test_an_update_that_leaves_a_pool_equal_keeps_its_plan() -> None:
    devices = [_device(i) for i in range(300)]
    before = prepare(_core, {**_pool(devices, 16), "q": pool([_device(0)])})
    server = _Server()
    server.apply(_plan(_core, before, []))
    assert _plan(_core, before, server.records(_core)).compared == 19
    after = prepare(_core, {**_pool(devices, 16), "q": pool([_device(0, 1)])})
    assert before.changed_pools(after) == ["q"]
    assert after.changed_pools(before) == ["q"]  # either way round: no loop
    plan = _plan(_core, after, server.records(_core))
    assert (plan.writes, plan.compared) == ([], 0)


#: One step: ("edit", upserts as (index, version, tainted)) in place; ("grow"/"shrink", n);
#: ("sync", how many of the plan's writes the apiserver carries out, None for all);
#: ("foreign", which slice another client edits); ("update", None): the same devices again.
_edit_step = st.tuples(
    st.just("edit"),
    st.lists(st.tuples(st.integers(0, 199), st.integers(0, 3), st.booleans()), max_size=5),
)
_sync_step = st.tuples(st.just("sync"), st.none() | st.integers(0, 3))
# Edits and syncs drawn three times as often as the rest: carrying a plan over needs them.
_step = st.one_of(
    _edit_step,
    _edit_step,
    _edit_step,
    _sync_step,
    _sync_step,
    _sync_step,
    st.tuples(st.sampled_from(["grow", "shrink"]), st.integers(1, 3)),
    st.tuples(st.just("foreign"), st.integers(0, 50)),
    st.tuples(st.just("update"), st.none()),
)


@settings(max_examples=150, deadline=None)
@given(
    st.integers(0, 200),
    st.sampled_from([4, 16, 64]),
    st.lists(_step, min_size=1, max_size=20),
)
def test_carried_plans_are_plans_from_scratch(
    initial: int, per_slice: int, steps: list[tuple[str, Any]]
) -> None:
    model = {f"d{i}": _device(i) for i in range(initial)}
    cores = {"rust": _core, "python": _pycore}
    initial_pool = _pool(list(model.values()), per_slice)
    desired = {label: prepare(core, initial_pool) for label, core in cores.items()}
    server = _Server()
    grown = itertools.count(1000)

    def edit(upserts: list[Any], removed: list[str]) -> None:
        for name in removed:
            del model[name]
        for d in upserts:
            model[d["name"]] = d
        for label, core in cores.items():
            desired[label] = _edit(core, desired[label], upserts, removed)

    # Published, then synced once more on the informer's events: a plan to carry over.
    for kind, arg in [("sync", None), ("sync", None), *steps]:
        if kind == "edit":
            known = {i: (i, v, t) for i, v, t in arg if f"d{i}" in model}
            edit([_device(*args) for args in known.values()], [])
        elif kind == "grow":
            edit([_device(next(grown)) for _ in range(arg)], [])
        elif kind == "shrink":
            edit([], list(model)[:arg])
        elif kind == "foreign":
            server.foreign_edit(arg)
        elif kind == "update":  # the whole desired state again, as update() hands it over
            for label, core in cores.items():
                new = prepare(core, _pool(list(model.values()), per_slice))
                assert desired[label].changed_pools(new) == []
                desired[label] = new
        else:
            plans = {
                label: _plan(core, desired[label], server.records(core))
                for label, core in cores.items()
            }
            full = prepare(_core, _pool(list(model.values()), per_slice))
            scratch = _plan(_core, full, server.records(_core))
            assert _outcome(plans["rust"]) == _outcome(scratch) == _outcome(plans["python"])
            server.apply(plans["rust"], arg)
