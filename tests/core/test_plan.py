"""Packing, generations, names and node selection (docs/core.md §4, §5)."""

from __future__ import annotations

import json
import re
from types import ModuleType
from typing import Any

from core_helpers import DRIVER, OWNER, apply, bodies, creating, devices, pool, prepare


def test_empty_pool_is_one_empty_slice(core: ModuleType) -> None:
    plan = core.plan_pool(prepare(core, {"p": pool([])}), "p", [], None, None)
    assert (plan.generation, plan.slice_count, len(plan.creates)) == (1, 1, 1)
    assert "devices" not in json.loads(plan.creates[0])["spec"]


def test_129_devices_make_two_slices(core: ModuleType) -> None:
    plan = core.plan_pool(prepare(core, {"p": pool(devices(129))}), "p", [], OWNER, "node-1")
    assert [len(b["spec"]["devices"]) for b in bodies(plan)] == [128, 1]
    names = [b["metadata"]["name"] for b in bodies(plan)]
    assert [n[:-10] for n in names] == [f"00000-{DRIVER}-node-1-", f"00001-{DRIVER}-node-1-"]
    assert all(b["spec"]["nodeName"] == "node-1" for b in bodies(plan))
    assert all(b["spec"]["pool"]["resourceSliceCount"] == 2 for b in bodies(plan))


def test_taints_lower_the_limit_to_64(core: ModuleType) -> None:
    taint = {"taints": [{"key": "k", "effect": "NoSchedule"}]}
    plan = core.plan_pool(prepare(core, {"p": pool(devices(65, **taint))}), "p", [], None, None)
    assert [len(b["spec"]["devices"]) for b in bodies(plan)] == [64, 1]


def test_a_pool_packed_at_64_takes_taints_in_place(core: ModuleType) -> None:
    """At 128 a slice's first taint evicts half of it: a move, a new generation and every
    slice rewritten. Packed at 64 (the API's limit with a taint) it is one update."""
    taint = {"taints": [{"key": "k", "effect": "NoSchedule"}]}
    base = devices(300)
    tainted = [*base[:5], {**base[5], **taint}, *base[6:]]
    for per_slice, sizes, generation, updates in (
        (None, [128, 128, 44], 2, 3),
        (64, [64] * 4 + [44], 1, 1),
    ):
        extra = {} if per_slice is None else {"maxDevicesPerSlice": per_slice}
        desired = prepare(core, {"p": pool(base, **extra)})
        records = apply(core, core.plan_pool(desired, "p", [], None, None), [])
        assert [len(r.device_names) for r in records] == sizes
        plan = core.plan_pool(
            prepare(core, {"p": pool(tainted, **extra)}), "p", records, None, None
        )
        assert (plan.generation, len(plan.updates) + len(plan.creates)) == (generation, updates)


def test_byte_budget(core: ModuleType) -> None:
    plan = core.plan_pool(
        prepare(core, {"p": pool(devices(10))}, 4096 + 3 * 60), "p", [], None, None
    )
    sizes = [len(b["spec"]["devices"]) for b in bodies(plan)]
    assert sum(sizes) == 10 and len(sizes) > 1


def test_one_change_in_10000_is_one_update(core: ModuleType) -> None:
    base = devices(10_000)
    records = apply(
        core, core.plan_pool(prepare(core, {"p": pool(base)}), "p", [], OWNER, None), []
    )
    for edited in (
        base[:5000] + base[5001:],
        [*base, *devices(1, start=10_000)],
        [*base[:7], {"name": "dev-7", "attributes": {"index": {"int": -1}}}, *base[8:]],
    ):
        plan = core.plan_pool(prepare(core, {"p": pool(edited)}), "p", records, OWNER, None)
        assert (len(plan.updates), plan.creates, plan.deletes) == (1, [], [])
        assert plan.generation == 1


def test_replan_after_apply_is_empty_and_restart_same_state(core: ModuleType) -> None:
    desired = prepare(core, {"p": pool(devices(300, taints=[{"key": "a", "effect": "None"}]))})
    records = apply(core, core.plan_pool(desired, "p", [], OWNER, None), [])
    plan = core.plan_pool(desired, "p", records, OWNER, None)
    assert (plan.updates, plan.creates, plan.deletes) == ([], [], [])


def test_names_are_deterministic_and_distinct_per_pool_owner_and_index(
    core: ModuleType,
) -> None:
    def names(pool_name: str, owner: Any, driver_pools: dict[str, Any] | None = None) -> list[str]:
        desired = prepare(core, driver_pools or {pool_name: pool(devices(129))})
        return [
            b["metadata"]["name"]
            for b in bodies(core.plan_pool(desired, pool_name, [], owner, None))
        ]

    first = names("p", OWNER)
    assert first == names("p", OWNER)
    assert len(set(first)) == 2
    long_owner = ("v1", "Node", "n" * 200, "uid")
    others = names("q", OWNER) + names("p", None) + names("p", long_owner)
    assert not set(first) & set(others) and len(set(others)) == 6
    dns_label = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")
    assert all(len(n) <= 63 and dns_label.fullmatch(n) for n in first + others)


def test_names_are_stable_across_releases(core: ModuleType) -> None:
    # A changed name scheme would make an upgraded driver republish every slice it has.
    plan = core.plan_pool(prepare(core, {"node-1": pool(devices(1))}), "node-1", [], OWNER, None)
    assert [b["metadata"]["name"] for b in bodies(plan)] == [
        "00000-gpu.example.com-node-1-qk4lntserr"
    ]


def test_foreign_and_random_named_slices_are_deleted(core: ModuleType) -> None:
    desired = prepare(core, {"p": pool(devices(3))})
    records = apply(core, core.plan_pool(desired, "p", [], OWNER, None), [])
    (mine,) = records
    obj = json.loads(core.plan_pool(desired, "p", [], OWNER, None).creates[0])
    extra = []
    for name, generation in (
        ("foreign-slice", 1),
        (mine.name[:-10] + "zzzzz", 1),  # generateName: an earlier version's, or Go's
        (mine.name[:-1] + "-", 1),
        (mine.name[:-10] + "old00", 0),
    ):
        obj["metadata"] = {"name": name, "uid": "u-" + name, "resourceVersion": "5"}
        obj["spec"]["pool"]["generation"] = generation
        extra.append(core.decode_slice(json.dumps(obj).encode()))
    plan = core.plan_pool(desired, "p", [*records, *extra], OWNER, None)
    assert plan.deletes == sorted((r.name, r.uid, r.resource_version) for r in extra)
    assert (plan.updates, plan.creates, plan.generation) == ([], [], 1)


def test_obsolete_slice_is_rewritten_in_place_under_the_current_generation(
    core: ModuleType,
) -> None:
    desired = prepare(core, {"p": pool(devices(300))})
    records = apply(core, core.plan_pool(desired, "p", [], OWNER, None), [])
    # As after a crash in the middle of a generation change: slice 2 still has generation 0.
    obj = json.loads(core.plan_pool(desired, "p", [], OWNER, None).creates[2])
    stale = next(r for r in records if r.name == obj["metadata"]["name"])
    obj["metadata"].update(uid=stale.uid, resourceVersion=stale.resource_version)
    obj["spec"]["pool"]["generation"] = 0
    records = [r for r in records if r is not stale] + [core.decode_slice(json.dumps(obj).encode())]
    plan = core.plan_pool(desired, "p", records, OWNER, None)
    # Slices 0 and 1 are as desired: only the obsolete one is written, joining generation 1.
    assert (plan.deletes, plan.creates, plan.generation) == ([], [], 1)
    assert [name for name, _ in plan.updates] == [stale.name]
    assert core.plan_pool(desired, "p", apply(core, plan, records), OWNER, None).updates == []


def test_an_interrupted_publish_resumes_under_its_generation(core: ModuleType) -> None:
    desired = prepare(core, {"p": pool(devices(1000))})
    first = core.plan_pool(desired, "p", [], OWNER, None)
    # The first 3 of 8 creates landed, then the apiserver went away (or a slice was deleted
    # by hand): only the missing ones are created, nothing published is rewritten.
    partial = apply(core, creating(first.creates[:3]), [])
    plan = core.plan_pool(desired, "p", partial, OWNER, None)
    assert (plan.generation, plan.updates, plan.deletes) == (1, [], [])
    assert plan.creates == first.creates[3:]


def test_missing_slices_with_other_changes_bump_the_generation(core: ModuleType) -> None:
    base = devices(300)
    first = core.plan_pool(prepare(core, {"p": pool(base)}), "p", [], OWNER, None)
    two_of_three = apply(core, creating(first.creates[:2]), [])
    edited = [{**base[0], "attributes": {"index": {"int": -1}}}, *base[1:]]
    plan = core.plan_pool(prepare(core, {"p": pool(edited)}), "p", two_of_three, OWNER, None)
    assert (plan.generation, len(plan.updates), len(plan.creates)) == (2, 2, 1)
    # A slice of the current generation to delete (here: a name not ours) holds devices
    # consumers may be using: filling the gap under the same generation could show them twice.
    foreign = json.loads(first.creates[2])
    foreign["metadata"] = {"name": "foreign", "uid": "u-foreign", "resourceVersion": "9"}
    with_foreign = [*two_of_three, core.decode_slice(json.dumps(foreign).encode())]
    plan = core.plan_pool(prepare(core, {"p": pool(base)}), "p", with_foreign, OWNER, None)
    assert plan.deletes == [("foreign", "u-foreign", "9")]
    assert (plan.generation, len(plan.updates), len(plan.creates)) == (2, 2, 1)


def test_driver_generation_wins_and_pool_removal_deletes_all(core: ModuleType) -> None:
    records = apply(
        core, core.plan_pool(prepare(core, {"p": pool(devices(2))}), "p", [], None, None), []
    )
    plan = core.plan_pool(
        prepare(core, {"p": pool(devices(2), generation=7)}), "p", records, None, None
    )
    assert plan.generation == 7 and len(plan.updates) == 1
    gone = core.plan_pool(prepare(core, {}), "p", records, None, None)
    assert gone.deletes == [(r.name, r.uid, r.resource_version) for r in records]
    assert (gone.generation, gone.updates, gone.creates) == (0, [], [])


def test_changed_slices_are_updated_in_place_under_their_generation(core: ModuleType) -> None:
    base = devices(10_000)
    records = apply(core, core.plan_pool(prepare(core, {"p": pool(base)}), "p", [], None, None), [])
    by_device = {n: r.name for r in records for n in r.device_names}
    for changed in ([0, 200], [1, 3000, 5000, 7000, 9999]):
        edited = [dict(d) for d in base]
        for i in changed:
            edited[i]["attributes"] = {"index": {"int": -1 - i}}
        plan = core.plan_pool(prepare(core, {"p": pool(edited)}), "p", records, None, None)
        # One write per changed slice, not a rewrite of all 79 under a new generation.
        assert (plan.generation, plan.creates, plan.deletes) == (1, [], [])
        assert sorted(n for n, _ in plan.updates) == sorted(by_device[f"dev-{i}"] for i in changed)
        assert {b["spec"]["pool"]["generation"] for b in bodies(plan)} == {1}


def _explicit(*slices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return pool(None, slices=[{"devices": s, **extra} for s in slices])


def test_a_device_moving_between_slices_bumps_the_generation(core: ModuleType) -> None:
    """Removed from one slice before it is added to the other, a consumer would see the pool
    complete without it; added first, twice: neither is a view of the pool."""
    a, b, c = devices(3), devices(3, start=3), devices(3, start=6)
    desired = prepare(core, {"p": _explicit(a, b, c)})
    records = apply(core, core.plan_pool(desired, "p", [], None, None), [])
    moved = prepare(core, {"p": _explicit(a[1:], [*b, a[0]], c)})
    plan = core.plan_pool(moved, "p", records, None, None)
    assert (plan.generation, len(plan.updates)) == (2, 3)
    # Two slices changing only their own devices, with one leaving: in place.
    edited = prepare(core, {"p": _explicit(a[1:], [{**b[0], "attributes": {}}, *b[1:]], c)})
    plan = core.plan_pool(edited, "p", records, None, None)
    assert (plan.generation, len(plan.updates)) == (1, 2)


def test_a_device_evicted_by_its_growth_bumps_the_generation(core: ModuleType) -> None:
    max_bytes = 4096 + 4 * 60
    base = devices(11)
    records = apply(
        core, core.plan_pool(prepare(core, {"p": pool(base)}, max_bytes), "p", [], None, None), []
    )
    assert [len(r.device_names) for r in records] == [4, 4, 3]
    grown = [{**d, "attributes": {"pad": {"string": "x" * 40}}} for d in base[:2]] + base[2:]
    plan = core.plan_pool(prepare(core, {"p": pool(grown)}, max_bytes), "p", records, None, None)
    # dev-3 leaves slice 0 for slice 2: no slice created, yet a move.
    assert [len(b["spec"]["devices"]) for b in bodies(plan)] == [3, 4, 4]
    assert plan.generation == 2


def test_a_header_change_beside_other_updates_bumps_the_generation(core: ModuleType) -> None:
    """Counter sets are pool-wide: a device may consume from another slice's set."""
    counters = [{"name": "gpu-0", "counters": {"mem": {"value": "2Gi"}}}]
    consumer = {
        "name": "part-0",
        "consumesCounters": [{"counterSet": "gpu-0", "counters": {"mem": {"value": "1Gi"}}}],
    }
    sets = {"devices": None, "sharedCounters": counters}
    desired = prepare(core, {"p": pool(None, slices=[sets, {"devices": [consumer]}])})
    records = apply(core, core.plan_pool(desired, "p", [], None, None), [])
    bigger = [{"name": "gpu-0", "counters": {"mem": {"value": "4Gi"}}}]
    using = {
        **consumer,
        "consumesCounters": [{"counterSet": "gpu-0", "counters": {"mem": {"value": "3Gi"}}}],
    }
    changed = prepare(
        core,
        {"p": pool(None, slices=[{**sets, "sharedCounters": bigger}, {"devices": [using]}])},
    )
    plan = core.plan_pool(changed, "p", records, None, None)
    assert (plan.generation, len(plan.updates)) == (2, 2)


def test_labels_and_annotations_are_echoed_on_update(core: ModuleType) -> None:
    records = apply(
        core, core.plan_pool(prepare(core, {"p": pool(devices(1))}), "p", [], None, None), []
    )
    obj = json.loads(
        core.plan_pool(prepare(core, {"p": pool(devices(1))}), "p", [], None, None).creates[0]
    )
    obj["metadata"] = {
        "name": records[0].name,
        "uid": "u",
        "resourceVersion": "3",
        "labels": {"team": "x"},
        "annotations": {"note": "y"},
    }
    labelled = core.decode_slice(json.dumps(obj).encode())
    plan = core.plan_pool(prepare(core, {"p": pool(devices(2))}), "p", [labelled], None, None)
    ((_, body),) = plan.updates
    meta = json.loads(body)["metadata"]
    assert meta == {
        "name": records[0].name,
        "resourceVersion": "3",
        "labels": {"team": "x"},
        "annotations": {"note": "y"},
    }


def test_changed_pools_are_those_whose_content_differs(core: ModuleType) -> None:
    base = {
        "same": pool(devices(3, capacity={"memory": {"value": "1Gi"}})),
        "edited": pool(devices(3)),
        "removed": pool(devices(1)),
        "regenerated": pool(devices(1)),
        "reselected": pool(devices(1), allNodes=True),
    }
    old = prepare(core, base)
    new = prepare(
        core,
        {
            **{k: v for k, v in base.items() if k != "removed"},
            # The same devices given in another spelling are the same content.
            "same": pool(devices(3, capacity={"memory": {"value": "1024Mi"}})),
            "edited": pool([*devices(2), {"name": "dev-2", "attributes": {"index": {"int": -1}}}]),
            "regenerated": pool(devices(1), generation=5),
            "reselected": pool(
                devices(1),
                nodeSelector={
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": ["n"]}
                            ]
                        }
                    ]
                },
            ),
            "added": pool([]),
        },
    )
    changed = ["added", "edited", "regenerated", "removed", "reselected"]
    assert old.changed_pools(new) == changed
    assert new.changed_pools(old) == changed
    assert old.changed_pools(old) == []
    # Another byte budget packs every pool differently.
    assert old.changed_pools(prepare(core, base, 4096 + 3 * 60)) == sorted(base)


def test_update_keeps_finalizers_and_foreign_owner_references(core: ModuleType) -> None:
    obj = json.loads(
        core.plan_pool(prepare(core, {"p": pool(devices(1))}), "p", [], OWNER, None).creates[0]
    )
    foreign = {"apiVersion": "v1", "kind": "ConfigMap", "name": "cm", "uid": "u-cm"}
    stale_ours = {"apiVersion": "v1", "kind": "Node", "name": "old", "uid": OWNER[3]}
    obj["metadata"].update(
        uid="u",
        resourceVersion="3",
        finalizers=["example.com/keep"],
        ownerReferences=[foreign, stale_ours],
        labels={"team": "x"},
    )
    stored = core.decode_slice(json.dumps(obj).encode())
    plan = core.plan_pool(prepare(core, {"p": pool(devices(2))}), "p", [stored], OWNER, None)
    ((_, body),) = plan.updates
    meta = json.loads(body)["metadata"]
    ours = dict(zip(("apiVersion", "kind", "name", "uid"), OWNER), controller=True)
    assert meta["finalizers"] == ["example.com/keep"]
    assert meta["ownerReferences"] == [foreign, ours]
    assert meta["labels"] == {"team": "x"}
    # What was written, once stored, is what is wanted: no further update.
    written = json.loads(body)
    written["metadata"].update(uid="u", resourceVersion="4")
    again = core.plan_pool(
        prepare(core, {"p": pool(devices(2))}),
        "p",
        [core.decode_slice(json.dumps(written).encode())],
        OWNER,
        None,
    )
    assert (again.updates, again.creates, again.deletes) == ([], [], [])
    # Without a stored entry of ours, ours comes first and the others follow as stored.
    obj["metadata"]["ownerReferences"] = [foreign]
    plan = core.plan_pool(
        prepare(core, {"p": pool(devices(2))}),
        "p",
        [core.decode_slice(json.dumps(obj).encode())],
        OWNER,
        None,
    )
    assert json.loads(plan.updates[0][1])["metadata"]["ownerReferences"] == [ours, foreign]


def _published(core: ModuleType, n: int = 1, **pool_kw: Any) -> tuple[Any, list[Any]]:
    """The desired state of pool "p" and its records once published."""
    desired = prepare(core, {"p": pool(devices(n), **pool_kw)})
    return desired, apply(core, core.plan_pool(desired, "p", [], OWNER, None), [])


def _edited(core: ModuleType, record: Any, **meta: Any) -> Any:
    """``record`` as another client left it: its object with ``meta`` set (the body of the
    record's own last write, re-read)."""
    plan = core.plan_pool(
        prepare(core, {"p": pool(devices(len(record.device_names)), generation=9)}),
        "p",
        [record],
        OWNER,
        None,
    )
    ((_, body),) = plan.updates
    obj = json.loads(body)
    obj["spec"]["pool"]["generation"] = record.generation
    obj["metadata"].update(uid=record.uid, resourceVersion=str(int(record.resource_version) + 1))
    obj["metadata"].update(meta)
    return core.decode_slice(json.dumps(obj).encode())


def test_metadata_of_others_is_no_change(core: ModuleType) -> None:
    desired, [record] = _published(core)
    foreign = {"apiVersion": "v1", "kind": "ConfigMap", "name": "cm", "uid": "u-cm"}
    ours = dict(zip(("apiVersion", "kind", "name", "uid"), OWNER), controller=True)
    edited = _edited(
        core,
        record,
        labels={"team": "x"},
        annotations={"note": "y"},
        finalizers=["example.com/keep"],
        ownerReferences=[ours, foreign],
    )
    assert record.same_content(edited) and edited.same_content(record)
    plan = core.plan_pool(desired, "p", [edited], OWNER, None)
    assert (plan.updates, plan.creates, plan.deletes) == ([], [], [])
    # Our controller reference gone, or no longer the controller: ours to put back.
    for refs in ([foreign], [{**ours, "controller": False}, foreign]):
        taken = _edited(core, record, ownerReferences=refs)
        assert not record.same_content(taken)
        assert [n for n, _ in core.plan_pool(desired, "p", [taken], OWNER, None).updates] == [
            record.name
        ]


def test_slice_being_deleted_is_not_deleted_again(core: ModuleType) -> None:
    _, [record] = _published(core)
    going = _edited(core, record, deletionTimestamp="2026-01-01T00:00:00Z", finalizers=["x/y"])
    assert going.deleting and not record.deleting
    assert core.plan_pool(None, "p", [record], OWNER, None).deletes == [
        (record.name, record.uid, record.resource_version)
    ]
    plan = core.plan_pool(None, "p", [going], OWNER, None)
    assert (plan.deletes, plan.writes, plan.waiting) == ([], [], [])


def test_desired_slice_being_deleted_waits_for_its_name(core: ModuleType) -> None:
    desired, records = _published(core, 129)
    first, second = sorted(records, key=lambda r: r.name)
    going = _edited(core, first, deletionTimestamp="2026-01-01T00:00:00Z", finalizers=["x/y"])
    plan = core.plan_pool(desired, "p", [going, second], OWNER, None)
    # Slot 0 would be created again, but its name is taken until the slice is gone; the
    # other slice, already as desired, is left alone.
    assert (plan.waiting, plan.writes, plan.deletes) == ([first.name], [], [])
    assert plan.generation == 1
    gone = core.plan_pool(desired, "p", [second], OWNER, None)
    assert (gone.waiting, gone.writes, gone.generation) == ([], [first.name], 1)
