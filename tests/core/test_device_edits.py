"""Device-level edits (docs/core.md §8): the same calls give the same desired state as full
updates of the equivalent device list, on both cores."""

from __future__ import annotations

import itertools
from types import ModuleType
from typing import Any

from core_helpers import MAX_BYTES, apply, pool, prepare
from hypothesis import given, settings
from hypothesis import strategies as st

from resourceslice import _core, _pycore


def _device(i: int, version: int) -> dict[str, Any]:
    return {"name": f"d{i}", "attributes": {"v": {"int": version}}}


def _edit(core: ModuleType, desired: Any, upserts: list[Any], removed: list[str]) -> Any:
    batch = prepare(core, {"p": pool(upserts)})
    edited, errors = desired.with_devices("p", batch, removed)
    assert errors == []
    return edited


#: Per call: devices upserted (index, version) and indices removed.
_calls = st.lists(
    st.tuples(
        st.dictionaries(st.integers(0, 60), st.integers(0, 3), max_size=6),
        st.sets(st.integers(0, 60), max_size=6),
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 50), _calls)
def test_edits_equal_full_updates(initial: int, calls: list[Any]) -> None:
    model = {f"d{i}": _device(i, 0) for i in range(initial)}
    state = {}
    stored: dict[str, list[Any]] = {"python": [], "rust": []}
    ids = {"python": itertools.count(), "rust": itertools.count()}
    for label, core in (("python", _pycore), ("rust", _core)):
        state[label] = prepare(core, {"p": pool(list(model.values()))})
    for upserted, removed in calls:
        gone = sorted(f"d{i}" for i in removed - upserted.keys())
        upserts = [_device(i, v) for i, v in upserted.items()]
        for name in gone:
            model.pop(name, None)
        for d in upserts:
            model[d["name"]] = d  # in place when known, else appended
        plans = {}
        for label, core in (("python", _pycore), ("rust", _core)):
            state[label] = _edit(core, state[label], upserts, gone)
            full = prepare(core, {"p": pool(list(model.values()))})
            assert full.changed_pools(state[label]) == []
            assert state[label].device_count("p") == len(model)
            plans[label] = core.plan_pool(state[label], "p", stored[label], None, None)
            stored[label] = apply(core, plans[label], stored[label], ids[label])
        assert (plans["python"].updates, plans["python"].creates) == (
            plans["rust"].updates,
            plans["rust"].creates,
        )


def test_edits_report_what_they_cannot_do(core: ModuleType) -> None:
    desired = prepare(
        core,
        {"flat": pool([_device(0, 0)]), "sliced": pool(None, slices=[{"devices": []}])},
        MAX_BYTES,
    )
    batch = prepare(core, {"flat": pool([_device(1, 0)]), "sliced": pool([_device(1, 0)])})
    assert desired.with_devices("flat", batch, ["d1", "d9"]) == (
        None,
        ['remove["d1"]: also upserted'],
    )
    assert desired.with_devices("gone", batch, []) == (None, ['pools["gone"]: not desired'])
    _, errors = desired.with_devices("sliced", batch, [])
    assert errors == [
        'pools["sliced"]: given as slices; devices are upserted and removed by name only '
        "in a pool given as devices"
    ]
    # Another pool's content is untouched; a removal of an unknown name is no error.
    edited, errors = desired.with_devices("flat", batch, ["d9"])
    assert errors == [] and desired.changed_pools(edited) == ["flat"]
    assert edited.device_count("flat") == 2 and edited.device_count("sliced") == 0
