"""What a consumer sees of a pool while a sync's writes land one by one (docs/core.md §5).

The view is the scheduler's (k8s.io/dynamic-resource-allocation/structured, GatherPools): the
slices of the pool's highest generation; incomplete ("being updated") while fewer than
``resourceSliceCount`` of them are there; invalid when a device name appears twice. After
every write of every plan, in plan order (and in reverse, for updates under a kept
generation), no view is invalid, and a complete one has every device desired both before and
after. Both cores plan alike throughout.

The controller sends a plan's updates concurrently when ``independent_updates`` says they
keep the generation in place (resourceslice.writer): they then land in any order, and a
consumer may see any subset of them landed. For those plans every subset is checked, which
covers every order and interleaving of the concurrent writes (each view of a landing order is
the subset landed so far).
"""

from __future__ import annotations

import itertools
import random
from types import ModuleType, SimpleNamespace
from typing import Any

from core_helpers import DRIVER, apply, pool
from hypothesis import given, settings
from hypothesis import strategies as st

from resourceslice import _core, _pycore
from resourceslice.writer import independent_updates

#: Small slices, so that a few dozen devices make several of them.
_MAX_BYTES = 4096 + 8 * 70
_CORES = (("python", _pycore), ("rust", _core))


def _view(records: list[Any]) -> set[str] | None:
    """The devices a consumer sees of the pool; None while it is incomplete."""
    if not records:
        return set()
    newest = max(r.generation for r in records)
    slices = [r for r in records if r.generation == newest]
    if any(len(slices) != r.resource_slice_count for r in slices):
        return None
    names = [n for r in slices for n in r.device_names]
    assert len(names) == len(set(names)), f"invalid view: a device twice in {names}"
    return set(names)


def _device(name: str, version: int, pad: int) -> dict[str, Any]:
    return {
        "name": name,
        "attributes": {"v": {"int": version}, "pad": {"string": "x" * pad}},
    }


#: One step: per device of 40, None (absent) or (version, pad); for explicit slices, also
#: which of 4 slices holds it.
_state = st.lists(
    st.one_of(st.none(), st.tuples(st.integers(0, 2), st.sampled_from([0, 0, 0, 60]))),
    min_size=40,
    max_size=40,
)
_placement = st.lists(st.integers(0, 3), min_size=40, max_size=40)


def _desired(state: list[Any], placement: list[int] | None) -> dict[str, Any]:
    present = [(i, _device(f"d{i}", *s)) for i, s in enumerate(state) if s is not None]
    if placement is None:
        return pool([d for _, d in present])
    slices: list[list[dict[str, Any]]] = [[] for _ in range(4)]
    for i, d in present:
        slices[placement[i]].append(d)
    return pool(None, slices=[{"devices": s} for s in slices])


def _one_by_one(plan: Any) -> list[SimpleNamespace]:
    """The plan's deletes, then each of its writes, as separate plans."""
    return [
        SimpleNamespace(deletes=plan.deletes, updates=[], creates=[]),
        *(SimpleNamespace(deletes=[], updates=[u], creates=[]) for u in plan.updates),
        *(SimpleNamespace(deletes=[], updates=[], creates=[c]) for c in plan.creates),
    ]


#: Above this many updates, landing subsets are sampled (a few hundred) instead of all of them.
_ALL_SUBSETS_UP_TO = 10


def _subsets(n: int, seed: int) -> list[tuple[int, ...]]:
    """The subsets of range(n) that may have landed: all of them for small n, else the
    empty and full ones, every one missing or holding a single update, and random others."""
    if n <= _ALL_SUBSETS_UP_TO:
        return [c for r in range(n + 1) for c in itertools.combinations(range(n), r)]
    rng = random.Random(seed)
    picked = {(), tuple(range(n))}
    picked.update((i,) for i in range(n))
    picked.update(tuple(j for j in range(n) if j != i) for i in range(n))
    picked.update(tuple(j for j in range(n) if rng.random() < 0.5) for _ in range(256))
    return sorted(picked)


def _check_concurrent_sync(
    core: ModuleType, plan: Any, records: list[Any], stays: set[str], cut: int | None = None
) -> list[Any]:
    """Lands ``plan``'s deletes, then checks the view with every subset of its updates landed:
    the states that concurrent updates, landing in any order, can show. ``cut``: the controller
    stopped once that many landed, the last ones of the plan (in flight together, any of them
    may be the ones that made it); else all of them."""
    ids = itertools.count(len(records) * 1000)
    assert not plan.creates
    base = apply(core, SimpleNamespace(deletes=plan.deletes, updates=[], creates=[]), records, ids)
    assert _view(base) is not None, "deletes before concurrent updates made the pool incomplete"
    updates = list(plan.updates)
    for subset in _subsets(len(updates), len(records)):
        step = SimpleNamespace(deletes=[], updates=[updates[i] for i in subset], creates=[])
        seen = _view(apply(core, step, base, ids))
        assert seen is not None, f"updates {subset} of {len(updates)} landed: pool incomplete"
        assert stays <= seen, f"updates {subset} landed: a complete view misses {stays - seen}"
    landed = updates if cut is None else updates[len(updates) - min(cut, len(updates)) :]
    return apply(core, SimpleNamespace(deletes=[], updates=landed, creates=[]), base, ids)


def _check_sync(
    core: ModuleType, plan: Any, records: list[Any], stays: set[str], cut: int | None = None
) -> list[Any]:
    """Lands ``plan``'s writes one at a time, checking every view between them; only the
    first ``cut`` of them when given (a controller stopped in the middle of a sync).
    A plan the controller writes concurrently lands in any order (_check_concurrent_sync)."""
    if independent_updates(plan, records):
        return _check_concurrent_sync(core, plan, records, stays, cut)
    ids = itertools.count(len(records) * 1000)
    # Updates under a kept generation of a complete pool (not the resumption of a bump cut
    # short, which is incomplete until its last obsolete slice is rewritten).
    in_place = (
        bool(records)
        and _view(records) is not None
        and plan.generation == max(r.generation for r in records)
        and not plan.creates
        and not plan.deletes
    )
    orders = [_one_by_one(plan)[:cut]]
    if in_place:
        # Under a kept generation the order must not matter: the writes race other clients.
        orders.append(list(reversed(orders[0])))
    final: list[Any] = []
    for order in orders:
        landed = records
        for step in order:
            landed = apply(core, step, landed, ids)
            seen = _view(landed)
            if in_place:
                assert seen is not None, "an in-place update made the pool incomplete"
            if seen is not None:
                assert stays <= seen, f"a complete view misses {sorted(stays - seen)}"
        final = landed
    return final


def _plans(spec: dict[str, Any], stored: dict[str, list[Any]]) -> dict[str, Any]:
    """Both cores' plans of ``spec`` over their stored records: the same."""
    plans = {}
    for label, core in _CORES:
        desired, errors = core.prepare_desired(DRIVER, {"p": spec}, _MAX_BYTES)
        assert errors == []
        plans[label] = core.plan_pool(desired, "p", stored[label], None, None)
    python, rust = plans["python"], plans["rust"]
    assert (python.generation, python.writes, python.updates, python.creates) == (
        rust.generation,
        rust.writes,
        rust.updates,
        rust.creates,
    )
    return plans


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(_state, _placement, st.integers(0, 4)), min_size=2, max_size=5),
    st.booleans(),
)
def test_no_write_misleads_a_consumer(steps: list[Any], explicit: bool) -> None:
    stored: dict[str, list[Any]] = {"python": [], "rust": []}
    before: set[str] = set()
    for state, placement, cut in steps:
        spec = _desired(state, placement if explicit else None)
        after = {f"d{i}" for i, s in enumerate(state) if s is not None}
        if cut:
            # Stopped after ``cut`` writes; a new controller plans again from what landed.
            plans = _plans(spec, stored)
            for label, core in _CORES:
                stored[label] = _check_sync(core, plans[label], stored[label], before & after, cut)
        plans = _plans(spec, stored)
        for label, core in _CORES:
            stored[label] = _check_sync(core, plans[label], stored[label], before & after)
        assert _view(stored["python"]) == after
        before = after


def test_churn_of_five_devices_in_five_slices_is_five_writes() -> None:
    """The soak's pattern: random devices changed, each in its own slice."""
    state: list[Any] = [(0, 0)] * 40
    for label, core in _CORES:
        desired, _ = core.prepare_desired(DRIVER, {"p": _desired(state, None)}, _MAX_BYTES)
        records = apply(core, core.plan_pool(desired, "p", [], None, None), [])
        assert len(records) == 5
        churned = [(1, 0) if i % 8 == 0 else s for i, s in enumerate(state)]
        desired, _ = core.prepare_desired(DRIVER, {"p": _desired(churned, None)}, _MAX_BYTES)
        plan = core.plan_pool(desired, "p", records, None, None)
        assert (label, plan.generation, len(plan.updates), plan.creates) == (label, 1, 5, [])


def _plan(core: ModuleType, spec: dict[str, Any], records: list[Any]) -> Any:
    desired, errors = core.prepare_desired(DRIVER, {"p": spec}, _MAX_BYTES)
    assert errors == []
    return core.plan_pool(desired, "p", records, None, None)


def test_only_in_place_updates_under_the_kept_generation_go_concurrently() -> None:
    """What the controller sends concurrently (resourceslice.writer.independent_updates):
    isolated updates, not a single one, not a new generation, not a resumed one."""
    state: list[Any] = [(0, 0)] * 40
    churned = [(1, 0) if i % 8 == 0 else s for i, s in enumerate(state)]
    one = [(1, 0) if i == 0 else s for i, s in enumerate(state)]
    # Explicit slices: a device moved from one to another is a new generation, every slot
    # rewritten in place (no create); cut short after two writes, it is resumed.
    placement = [i % 4 for i in range(40)]
    moved = [1 if i == 0 else p for i, p in enumerate(placement)]
    for label, core in _CORES:
        first = _plan(core, _desired(state, None), [])
        assert not independent_updates(first, []), label  # a first publish: creates
        records = apply(core, first, [])
        assert independent_updates(_plan(core, _desired(churned, None), records), records)
        assert not independent_updates(_plan(core, _desired(one, None), records), records)

        records = apply(core, _plan(core, _desired(state, placement), []), [])
        bump = _plan(core, _desired(state, moved), records)
        assert (bump.generation, len(bump.updates), bump.creates) == (2, 4, []), label
        assert not independent_updates(bump, records), label
        step = SimpleNamespace(deletes=[], updates=bump.updates[:2], creates=[])
        cut = apply(core, step, records)
        resumed = _plan(core, _desired(state, moved), cut)
        assert (resumed.generation, len(resumed.updates), resumed.creates) == (2, 2, []), label
        assert not independent_updates(resumed, cut), label
