"""``plan_pool``: which slices of one pool to delete, update and create (docs/core.md §5).

Comparison works on the canonical JSON cached in ``DeviceEntry`` and ``SliceRecord``; request
bodies are rendered only for the slices that are written.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from resourceslice._pycore import canonical
from resourceslice._pycore.decode import SliceRecord
from resourceslice._pycore.model import DesiredPool, DesiredState, DeviceEntry
from resourceslice._pycore.plan import OwnerRef, Plan, index_of, slice_name
from resourceslice._pycore.plan.pack import Item, Limits, pack


class _SliceRef(NamedTuple):
    devices: list[DeviceEntry]
    shared_counters: Any
    per_device_node_selection: bool
    carried: tuple[Any, ...] = ()


def _desired_slices(
    pool: DesiredPool, current: dict[int, SliceRecord], max_bytes: int
) -> list[_SliceRef]:
    if pool.slices is not None:
        return [
            _SliceRef(
                s.devices,
                s.shared_counters,
                s.per_device_node_selection,
                s.carried,
            )
            for s in pool.slices
        ]
    devices = pool.devices or []
    # A first publish holds no device anywhere: no name index needed.
    by_name = {d.name: i for i, d in enumerate(devices)} if current else {}
    held: list[list[int]] = [[] for _ in range(max(current, default=-1) + 1)]
    for index, rec in current.items():
        held[index] = [by_name[n] for n in rec.device_names if n in by_name]
    items = [Item(d.size, d.advanced) for d in devices]
    return [
        _SliceRef([devices[i] for i in slice_], None, False)
        for slice_ in pack(items, held, Limits(max_bytes, pool.max_devices_per_slice))
    ]


class _StoredTimes:
    """Stored taint times by device name, for desired taints that name none."""

    def __init__(self, records: Sequence[SliceRecord]) -> None:
        self._records = records
        self._by_device: dict[str, str] | None = None

    def fill(self, device: DeviceEntry, written_over: SliceRecord | None) -> str:
        """``device`` with each taint lacking ``timeAdded`` given the stored one of the same
        key, value and effect, so the server's time is kept. The device as ``written_over``
        (the record the slice replaces, when of the current generation) holds it comes first."""
        if not device.untimed_taints:
            return device.json
        stored_json = None
        if written_over is not None and device.name in written_over.device_names:
            stored_json = written_over.device_jsons[written_over.device_names.index(device.name)]
        else:
            if self._by_device is None:
                self._by_device = {
                    n: d for r in self._records for n, d in zip(r.device_names, r.device_jsons)
                }
            stored_json = self._by_device.get(device.name)
        if stored_json is None:
            return device.json
        stored_taints = json.loads(stored_json).get("taints")
        if not isinstance(stored_taints, list):
            return device.json
        value = json.loads(device.json)
        for taint in value.get("taints", ()):
            if "timeAdded" in taint:
                continue
            for s in stored_taints:
                if all(s.get(k) == taint.get(k) for k in ("key", "value", "effect")):
                    if "timeAdded" in s:
                        taint["timeAdded"] = s["timeAdded"]
                    break
        return canonical.to_json(value)


def _owner_references(ours: dict[str, Any] | None, rec: SliceRecord | None) -> list[Any] | None:
    """The ownerReferences of a written slice: the stored ones as they are, ours in place of
    the stored entry with our uid (or first when there is none), so that an update keeps what
    other clients own, as upstream's update of a copy of the stored object does."""
    uid = ours.get("uid") if ours is not None else None
    stored = rec.owner_references if rec is not None else None

    def uid_of(r: Any) -> Any:
        return r.get("uid") if isinstance(r, dict) else None

    refs = [
        ours if ours is not None and uid_of(r) == uid else r
        for r in (stored if isinstance(stored, list) else ())
    ]
    if ours is not None and not any(uid_of(r) == uid for r in refs):
        refs.insert(0, ours)
    return refs or None


#: How a desired slice differs from its stored record of the current generation: not at all;
#: only in its device list (the header -- node selection, counters, count -- is as stored);
#: or as a slice (a create, an obsolete record to overwrite, a header that changes).
_UNCHANGED, _DEVICES, _SLICE = 0, 1, 2


def _keeps_generation(
    missing: int,
    updates_needed: int,
    kept: int,
    drops_current: bool,
    isolated: Callable[[], bool],
) -> bool:
    """Whether the pool's writes can go out under its current generation (docs/core.md §5).

    Consumers use only the highest generation, and only once all ``resourceSliceCount``
    slices of it are there. Without a missing slot, in-place updates keep such a pool
    consistent at every moment, in any order, when each changes only its own devices and no
    device moves between slices (``isolated`` says so; asked only when more than one update
    is needed). Filling the empty slots of an interrupted publish (a crash, a lost response,
    a slice deleted by hand) does too, when every slice of the generation that stays is
    already as desired: the new slices hold only devices no other slice has. Anything else
    needs a new generation, so that consumers never mix old and new slices.
    """
    if missing == 0:
        return updates_needed <= 1 or isolated()
    return updates_needed == 0 and kept > 0 and not drops_current


def _isolated_updates(
    slices: Sequence[_SliceRef], current: dict[int, SliceRecord], changes: Sequence[int]
) -> bool:
    """Whether every changed slice changes only its devices, none of which another changed
    slice holds now: then no order of the updates shows a device twice, nor hides one that
    stays.

    A device moving in from an unchanged slice would be desired twice (rejected by
    validation), so the stored devices of the changed slices are all there is to look at.
    """
    changed = [i for i, c in enumerate(changes) if c != _UNCHANGED]
    if any(changes[i] == _SLICE for i in changed):
        return False
    held = {name: i for i in changed for name in current[i].device_names}
    return all(held.get(d.name, i) == i for i in changed for d in slices[i].devices)


def _delete(r: SliceRecord) -> tuple[str, str, str]:
    return (r.name, r.uid, r.resource_version)


def _write_object(members: list[tuple[str, str]]) -> str:
    """``{"k":v,...}`` from members whose values are already JSON text, keys sorted."""
    members.sort(key=lambda m: m[0])
    return "{" + ",".join(f"{canonical.quote(k)}:{v}" for k, v in members) + "}"


class _Pool:
    """What the name and header of each slice of the planned pool take from the pool."""

    __slots__ = ("count", "driver", "node_name", "owner", "owner_ref", "pool", "wanted")

    def __init__(
        self,
        driver: str,
        pool: str,
        owner: OwnerRef | None,
        node_name: str | None,
        wanted: DesiredPool,
        count: int,
    ) -> None:
        self.driver = driver
        self.pool = pool
        self.owner = owner
        self.node_name = node_name
        self.wanted = wanted
        self.count = count
        self.owner_ref: dict[str, Any] | None = None
        if owner is not None and owner[3]:
            api_version, kind, name, uid = owner
            self.owner_ref = {
                "apiVersion": api_version,
                "kind": kind,
                "name": name,
                "uid": uid,
                "controller": True,
            }

    def name(self, index: int) -> str:
        return slice_name(index, self.driver, self.owner, self.pool)

    def node_selection(self, s: _SliceRef) -> tuple[str, Any]:
        wanted = self.wanted
        if wanted.node_selector is not None:
            return ("nodeSelector", wanted.node_selector)
        if wanted.all_nodes:
            return ("allNodes", True)
        if s.per_device_node_selection:
            return ("perDeviceNodeSelection", True)
        if self.node_name is not None:
            return ("nodeName", self.node_name)
        return ("allNodes", True)

    def header(self, s: _SliceRef, generation: int, rec: SliceRecord | None) -> dict[str, Any]:
        return canonical.header(
            self.driver,
            self.pool,
            generation,
            self.count,
            self.node_selection(s),
            s.shared_counters,
            _owner_references(self.owner_ref, rec),
            s.carried,
        )


def _change(p: _Pool, s: _SliceRef, rec: SliceRecord | None, max_gen: int) -> int:
    """How desired slice ``s`` differs from ``rec``, the record in its slot."""
    if rec is None or rec.generation < max_gen:
        return _SLICE
    if not canonical.header_eq(canonical.to_json(p.header(s, rec.generation, rec)), rec.header):
        return _SLICE
    same_devices = len(rec.device_jsons) == len(s.devices) and all(
        canonical.device_eq(d.json, stored) for d, stored in zip(s.devices, rec.device_jsons)
    )
    return _UNCHANGED if same_devices else _DEVICES


def _generation(
    wanted_generation: int,
    slices: Sequence[_SliceRef],
    current: dict[int, SliceRecord],
    changes: Sequence[int],
    dropped: Sequence[SliceRecord],
    max_gen: int,
) -> tuple[int, bool]:
    """The generation the writes go out under, and whether every slice is written (a new
    generation) or only the changed ones."""
    count = len(slices)
    # A slot without a slice of the current generation (none, or an obsolete one to be
    # overwritten) changes what consumers see of the pool, as a create would.
    missing = sum(1 for i in range(count) if i not in current or current[i].generation < max_gen)
    updates_needed = sum(c != _UNCHANGED for c in changes) - missing
    kept = count - missing - updates_needed
    drops_current = any(r.generation == max_gen for r in dropped)
    if wanted_generation > max_gen:
        return wanted_generation, True
    if _keeps_generation(
        missing,
        updates_needed,
        kept,
        drops_current,
        lambda: _isolated_updates(slices, current, changes),
    ):
        return max_gen, False
    return max_gen + 1, True


def _write_order(
    p: _Pool,
    changes: Sequence[int],
    write_all: bool,
    current: dict[int, SliceRecord],
    existing: Sequence[SliceRecord],
) -> tuple[list[int], list[str]]:
    """The slots to write, updates before creates (docs/core.md §5), each in index order; and
    the names of the creates that wait."""
    going = {r.name for r in existing if r.deleting}
    to_write = []
    waiting = []
    for i in (i for i in range(p.count) if write_all or changes[i] != _UNCHANGED):
        name = p.name(i)
        # A create whose name a slice being deleted holds waits until it is gone.
        if i not in current and name in going:
            waiting.append(name)
        else:
            to_write.append(i)
    to_write.sort(key=lambda i: i not in current)
    return to_write, waiting


def _body(
    p: _Pool,
    name: str,
    s: _SliceRef,
    stored: SliceRecord | None,
    generation: int,
    max_gen: int,
    times: _StoredTimes,
) -> bytes:
    """The request body that writes desired slice ``s`` as ``name`` over ``stored``."""
    spec = p.header(s, generation, stored)
    spec.pop("ownerReferences", None)  # the controller's alone: all go in metadata
    metadata: dict[str, Any] = {"name": name}
    owner_refs = _owner_references(p.owner_ref, stored)
    if owner_refs is not None:
        metadata["ownerReferences"] = owner_refs
    if stored is not None:
        # Others' metadata as stored: a PUT replaces the whole object.
        for key, value in (
            ("labels", stored.labels),
            ("annotations", stored.annotations),
            ("finalizers", stored.finalizers),
        ):
            if value is not None:
                metadata[key] = value
        metadata["resourceVersion"] = stored.resource_version
    spec_members = [(k, canonical.to_json(v)) for k, v in spec.items()]
    if s.devices:
        written_over = stored if stored is not None and stored.generation == max_gen else None
        devices = ",".join(times.fill(d, written_over) for d in s.devices)
        spec_members.append(("devices", "[" + devices + "]"))
    return _write_object(
        [
            ("apiVersion", canonical.quote("resource.k8s.io/v1")),
            ("kind", canonical.quote("ResourceSlice")),
            ("metadata", canonical.to_json(metadata)),
            ("spec", _write_object(spec_members)),
        ]
    ).encode()


def plan_pool(
    desired: DesiredState | None,
    pool: str,
    existing: Sequence[SliceRecord],
    owner: OwnerRef | None,
    node_name: str | None,
    first_write: int = 0,
    max_body_bytes: int | None = None,
) -> Plan:
    """Plans ``pool``; see docs/core.md §5."""
    # A slice being deleted is going away: never deleted again nor updated, and its name
    # is taken until it is gone. Its generation still counts: consumers see it until then.
    live = [r for r in existing if not r.deleting]
    wanted = desired.pools.get(pool) if desired is not None else None
    if desired is None or wanted is None:
        return Plan(deletes=sorted(_delete(r) for r in live))
    driver = desired.driver
    max_gen = max((r.generation for r in existing), default=0)
    dropped: list[SliceRecord] = []
    current: dict[int, SliceRecord] = {}
    for rec in live:
        index = index_of(rec.name, driver, owner, pool)
        if index is None:
            dropped.append(rec)
        else:
            current[index] = rec
    slices = _desired_slices(wanted, current, desired.max_slice_bytes)
    count = len(slices)
    dropped.extend(r for i, r in current.items() if i >= count)
    deletes = sorted(_delete(r) for r in dropped)

    p = _Pool(driver, pool, owner, node_name, wanted, count)
    changes = [_change(p, s, current.get(i), max_gen) for i, s in enumerate(slices)]
    generation, write_all = _generation(
        wanted.generation, slices, current, changes, dropped, max_gen
    )
    to_write, waiting = _write_order(p, changes, write_all, current, existing)
    names = [p.name(i) for i in to_write]
    times = _StoredTimes([r for r in existing if r.generation == max_gen])
    updates: list[tuple[str, bytes]] = []
    creates: list[bytes] = []
    rendered = 0
    next_write = first_write
    for i, name in zip(to_write[first_write:], names[first_write:]):
        if max_body_bytes is not None and next_write > first_write and rendered >= max_body_bytes:
            break
        stored = current.get(i)
        body = _body(p, name, slices[i], stored, generation, max_gen, times)
        if stored is not None:
            updates.append((name, body))
        else:
            creates.append(body)
        rendered += len(body)
        next_write += 1
    return Plan(
        generation,
        count,
        wanted.device_count(),
        deletes,
        names,
        next_write,
        updates,
        creates,
        waiting,
        count,
    )
