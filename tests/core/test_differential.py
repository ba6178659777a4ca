"""Random pools and edit sequences: both cores plan alike, and plans converge."""

from __future__ import annotations

import itertools
import json
from types import ModuleType, SimpleNamespace
from typing import Any

from core_helpers import DRIVER, OWNER, apply, pool
from hypothesis import given, settings
from hypothesis import strategies as st

from resourceslice import _core, _pycore

_device = st.builds(
    lambda i, mem, tainted, pad: {
        "name": f"d{i}",
        "attributes": {"pad": {"string": "x" * pad}},
        "capacity": {"mem": {"value": mem}},
        **({"taints": [{"key": "k", "effect": "NoSchedule"}]} if tainted else {}),
    },
    st.integers(0, 400),
    st.sampled_from(["1Gi", "1024Mi", "1073741824", "500m", "0.5", "2k", "1e3", "0"]),
    st.booleans(),
    st.integers(0, 64),
)
_pools = st.dictionaries(
    st.sampled_from(["a", "b", "c/d"]),
    st.lists(_device, max_size=300).map(lambda ds: list({d["name"]: d for d in ds}.values())),
    max_size=2,
)
#: Per step: the pools, an owner or not, a node selection, a driver generation, sometimes
#: a device with a bad name (both cores must report the same errors), sometimes a sync
#: cut off after its first few writes (a crash, a lost connection), and a pool's devices
#: per slice (0 is refused).
_steps = st.lists(
    st.tuples(
        _pools,
        st.booleans(),
        st.sampled_from([None, "allNodes", "selector"]),
        st.sampled_from([0, 0, 0, 5]),
        st.integers(0, 9),
        st.sampled_from([0, 0, 1, 2, 3]),
        st.sampled_from([None, None, 64, 5, 0]),
    ),
    min_size=1,
    max_size=4,
)
_SELECTOR = {
    "nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
    ]
}
_max_bytes = st.sampled_from([1 << 20, 4096 + 20_000, 4096 + 600])


def _foreign_slice(pool_name: str, generation: int, devices: list[Any]) -> dict[str, Any]:
    return {
        "kind": "ResourceSlice",
        "metadata": {
            "name": f"legacy-{pool_name.replace('/', '-')}-{generation}",
            "uid": f"legacy-{generation}",
            "resourceVersion": "1",
        },
        "spec": {
            "driver": DRIVER,
            "allNodes": True,
            "devices": devices,
            "pool": {"name": pool_name, "generation": generation, "resourceSliceCount": 1},
        },
    }


def _summary(plan: Any) -> tuple[Any, ...]:
    return (
        plan.generation,
        plan.slice_count,
        plan.device_count,
        plan.deletes,
        plan.writes,
        plan.updates,
        plan.creates,
        plan.waiting,
    )


def _check_windows(core: ModuleType, whole: Any, *args: Any) -> None:
    """Planning again window by window (as the controller does) renders the same bodies."""
    windows = [core.plan_pool(*args, 0, 2000)]
    while windows[-1].next_write < len(whole.writes):
        windows.append(core.plan_pool(*args, windows[-1].next_write, 2000))
    assert [u for w in windows for u in w.updates] == whole.updates
    assert [c for w in windows for c in w.creates] == whole.creates
    assert all(
        (w.writes, w.deletes, w.generation) == (whole.writes, whole.deletes, whole.generation)
        for w in windows
    )
    assert whole.writes == [n for n, _ in whole.updates] + [
        json.loads(c)["metadata"]["name"] for c in whole.creates
    ]


def _first(plan: Any, writes: int) -> SimpleNamespace:
    """``plan`` cut off after its deletes and its first ``writes`` writes (updates first)."""
    return SimpleNamespace(
        deletes=plan.deletes,
        updates=plan.updates[:writes],
        creates=plan.creates[: max(0, writes - len(plan.updates))],
    )


def _duplicates_in_newest_generation(records: list[Any]) -> list[str]:
    """Devices a consumer would see twice: those in two slices of the pool's newest generation."""
    newest = max((r.generation for r in records), default=0)
    names = [n for r in records if r.generation == newest for n in r.device_names]
    return sorted({n for n in names if names.count(n) > 1})


def _check_slices(records: list[Any], wanted: list[dict[str, Any]], max_bytes: int) -> None:
    names = [n for r in records for n in r.device_names]
    assert sorted(names) == sorted(d["name"] for d in wanted)
    assert len({r.resource_slice_count for r in records}) <= 1
    for r in records:
        assert len(r.device_names) <= 128
        assert len(r.device_names) <= 64 or not any(
            "taints" in d for d in wanted if d["name"] in r.device_names
        )


@settings(max_examples=80, deadline=None)
@given(_steps, _max_bytes)
def test_cores_agree_and_converge(steps: list[tuple[Any, ...]], max_bytes: int) -> None:
    stored: dict[str, dict[str, list[Any]]] = {"python": {}, "rust": {}}
    ids = {"python": itertools.count(), "rust": itertools.count()}
    for pools, with_owner, selection, generation, bad, cut, per_slice in steps:
        owner = OWNER if with_owner else None
        extra: dict[str, Any] = {"generation": generation, "maxDevicesPerSlice": per_slice}
        if selection == "allNodes":
            extra["allNodes"] = True
        elif selection == "selector":
            extra["nodeSelector"] = _SELECTOR
        inputs = {name: pool(devs, **extra) for name, devs in pools.items()}
        if bad == 0 and inputs:
            first = next(iter(inputs.values()))
            first["devices"] = [
                *first["devices"],
                {"name": "Bad_Name", "capacity": {"x": {"value": "1.2.3"}}},
            ]
        results = {}
        for label, core in (("python", _pycore), ("rust", _core)):
            desired, errors = core.prepare_desired(DRIVER, inputs, max_bytes)
            results[label] = (desired, errors)
        assert results["python"][1] == results["rust"][1]
        if results["python"][0] is None:
            continue
        for name in sorted({*pools, *stored["python"]}):
            if bad in (1, 2, 3) and name in pools:
                # A slice another writer left: a foreign name, with an older, equal or
                # higher pool generation than ours (migration from another naming scheme).
                foreign = json.dumps(_foreign_slice(name, bad - 1, pools[name][:3])).encode()
                for label, core in (("python", _pycore), ("rust", _core)):
                    stored[label].setdefault(name, []).append(core.decode_slice(foreign))
            plans = {}
            for label, core in (("python", _pycore), ("rust", _core)):
                existing = stored[label].get(name, [])
                plans[label] = core.plan_pool(results[label][0], name, existing, owner, None)
                _check_windows(core, plans[label], results[label][0], name, existing, owner, None)
            assert _summary(plans["python"]) == _summary(plans["rust"])
            landed = min(cut, len(plans["python"].writes) - 1)
            if landed > 0:
                # Only the deletes and the first writes land; the next sync resumes.
                for label, core in (("python", _pycore), ("rust", _core)):
                    existing = apply(
                        core, _first(plans[label], landed), stored[label].get(name, []), ids[label]
                    )
                    stored[label][name] = existing
                    assert _duplicates_in_newest_generation(existing) == []
                    plans[label] = core.plan_pool(results[label][0], name, existing, owner, None)
                assert _summary(plans["python"]) == _summary(plans["rust"])
            for label, core in (("python", _pycore), ("rust", _core)):
                records = apply(core, plans[label], stored[label].get(name, []), ids[label])
                stored[label][name] = records
                again = core.plan_pool(results[label][0], name, records, owner, None)
                assert (again.updates, again.creates, again.deletes) == ([], [], [])
            if name in pools:
                _check_slices(stored["python"][name], pools[name], max_bytes)
            else:
                assert stored["python"][name] == []


_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(1 << 64), 1 << 64),
    st.floats(allow_nan=False),
    st.sampled_from(
        [
            "",
            "a",
            "x" * 70,
            "1Gi",
            "0.5",
            "1.2.3",
            "\udcff",
            "NoSchedule",
            "1.0.0",
            "2026-01-02T03:04:05Z",
            "k",
            "a/b",
            "Bad Key",
        ]
    ),
)
_json = st.recursive(
    _leaf,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(["int", "string", "value", "key", "effect", "x", "a/b"]),
            inner,
            max_size=3,
        )
    ),
    max_leaves=8,
)
_fields = st.sampled_from(
    [
        "name",
        "attributes",
        "capacity",
        "taints",
        "consumesCounters",
        "bindingConditions",
        "nodeName",
        "allNodes",
        "allowMultipleAllocations",
        "extra",
    ]
)
_messy_device = st.dictionaries(_fields, _json, max_size=4).map(
    lambda d: {"name": "dev", **d} if "name" not in d else d
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_messy_device, max_size=4), st.booleans())
def test_cores_report_the_same_errors(devices: list[dict[str, Any]], explicit: bool) -> None:
    spec = pool(None, slices=[{"devices": devices}]) if explicit else pool(devices)
    results = [core.prepare_desired(DRIVER, {"p": spec}, 1 << 20) for core in (_pycore, _core)]
    assert results[0][1] == results[1][1]
    if results[0][0] is not None:
        plans = [c.plan_pool(r[0], "p", [], OWNER, "n") for c, r in zip((_pycore, _core), results)]
        assert _summary(plans[0]) == _summary(plans[1])
