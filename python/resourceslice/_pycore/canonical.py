"""Canonical JSON (docs/core.md §1): device and slice-header forms, semantic equality."""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Callable, Sequence
from typing import Any, Optional, Union

from resourceslice._fields import CARRIED, DEVICE_GATES, GATES
from resourceslice._pycore.quantity import parse_quantity

#: The node selection members of a slice spec; the API allows one of them.
NODE_SELECTION_KEYS = ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection")

_TIME = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt]([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.[0-9]+)?"
    r"(?:[Zz]|([+-])([0-9]{2}):([0-9]{2}))"
)

#: Rewrites one quantity string; None keeps the value as it is.
QuantityMap = Callable[[str], Optional[str]]


def to_json(value: Any) -> str:
    """Canonical JSON text of an already pruned value."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def quote(key: str) -> str:
    """A string as JSON (map keys in error paths, names in messages)."""
    return json.dumps(key, ensure_ascii=False)


def prune(value: Any) -> Any:
    """Drops null members, empty lists and empty objects, recursively; None when nothing is
    left (absent == empty, as the apiserver stores it)."""
    if isinstance(value, dict):
        kept = {k: p for k, v in value.items() if (p := prune(v)) is not None}
        return kept or None
    if isinstance(value, list):
        items = [p for v in value if (p := prune(v)) is not None]
        return items or None
    return value


def normalise_time(text: str) -> str | None:
    """RFC 3339 (``Z`` or ``±HH:MM``, optional fraction) to ``YYYY-MM-DDTHH:MM:SSZ`` in UTC."""
    m = _TIME.fullmatch(text)
    if m is None:
        return None
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    offset = 0
    if m.group(7):
        oh, om = int(m.group(8)), int(m.group(9))
        if oh > 23 or om > 59:
            return None
        offset = (oh * 60 + om) * (1 if m.group(7) == "+" else -1)
    if hour > 23 or minute > 59 or second > 59:
        return None
    try:
        when = datetime.datetime(year, month, day, hour, minute, second)
        when -= datetime.timedelta(minutes=offset)
    except (ValueError, OverflowError):
        return None
    return when.strftime("%Y-%m-%dT%H:%M:%SZ") if 1 <= when.year <= 9999 else None


def _map_quantity(holder: dict[str, Any], key: str, f: QuantityMap) -> None:
    value = holder.get(key)
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if isinstance(value, str):
        mapped = f(value)
        if mapped is not None:
            holder[key] = mapped


def counters_quantities(counter_set: Any, f: QuantityMap) -> None:
    """Rewrites ``counters.*.value`` of one counter set in place."""
    counters = counter_set.get("counters") if isinstance(counter_set, dict) else None
    if isinstance(counters, dict):
        for counter in counters.values():
            if isinstance(counter, dict):
                _map_quantity(counter, "value", f)


def device_quantities(device: dict[str, Any], f: QuantityMap) -> None:
    """Rewrites every quantity of a device (the paths of docs/core.md §1) in place."""
    capacity = device.get("capacity")
    if isinstance(capacity, dict):
        for cap in capacity.values():
            if not isinstance(cap, dict):
                continue
            _map_quantity(cap, "value", f)
            policy = cap.get("requestPolicy")
            if not isinstance(policy, dict):
                continue
            _map_quantity(policy, "default", f)
            values = policy.get("validValues")
            if isinstance(values, list):
                policy["validValues"] = [_mapped(v, f) for v in values]
            valid_range = policy.get("validRange")
            if isinstance(valid_range, dict):
                for key in ("min", "max", "step"):
                    _map_quantity(valid_range, key, f)
    consumes = device.get("consumesCounters")
    if isinstance(consumes, list):
        for counter_set in consumes:
            counters_quantities(counter_set, f)
    allocatable = device.get("nodeAllocatableResources")
    if isinstance(allocatable, dict):
        for resource in allocatable.values():
            for part, keys in _ALLOCATABLE_QUANTITIES:
                holder = resource.get(part) if isinstance(resource, dict) else None
                if isinstance(holder, dict):
                    for key in keys:
                        _map_quantity(holder, key, f)


#: The quantities of a ``nodeAllocatableResources`` entry, by member.
_ALLOCATABLE_QUANTITIES = (
    ("mapping", ("capacityMultiplier", "deviceMultiplier")),
    ("overhead", ("perContainer", "perPod")),
)


def _mapped(value: Any, f: QuantityMap) -> Any:
    holder = {"v": value}
    _map_quantity(holder, "v", f)
    return holder["v"]


def header_quantities(header: dict[str, Any], f: QuantityMap) -> None:
    sets = header.get("sharedCounters")
    if isinstance(sets, list):
        for counter_set in sets:
            counters_quantities(counter_set, f)


def canonical_quantity(text: str) -> str | None:
    q = parse_quantity(text)
    return None if q is None else q.canonical


def value_key(text: str) -> str | None:
    q = parse_quantity(text)
    return None if q is None else q.key


def stored_device(device: Any) -> tuple[str, str] | None:
    """``(name, canonical JSON)`` of a device as the apiserver returned it."""
    pruned = prune(device)
    if not isinstance(pruned, dict):
        return None
    device_quantities(pruned, canonical_quantity)
    name = pruned.get("name")
    return (name if isinstance(name, str) else "", to_json(pruned))


def stored_header(header: dict[str, Any]) -> str:
    header_quantities(header, canonical_quantity)
    return to_json(header)


def controller_references(owner_references: Any) -> Any:
    """The entries of ``ownerReferences`` with ``controller: true``.

    The API allows one controller reference per object: that one is the controller's (its
    owner's). Other owner references, labels, annotations and finalizers belong to other
    clients: an update keeps them as stored, and a change of them alone is no change.
    """
    if not isinstance(owner_references, list):
        return owner_references
    return [r for r in owner_references if isinstance(r, dict) and r.get("controller") is True]


def header(
    driver: str,
    pool: str,
    generation: int,
    count: int,
    node_selection: tuple[str, Any] | None,
    shared_counters: Any,
    owner_references: Any,
    carried: Sequence[Any] = (),
) -> dict[str, Any]:
    """The part of a slice that is not its device list nor its identity, pruned: what the
    controller owns of it, the spec and the controller reference (``controller_references``).

    ``carried``: the values of ``_fields.CARRIED``, by its index (shorter: the rest absent)."""
    h: dict[str, Any] = {
        "driver": driver,
        "pool": {"name": pool, "generation": generation, "resourceSliceCount": count},
        "sharedCounters": shared_counters,
        **{f.name: v for f, v in zip(CARRIED, carried)},
        "ownerReferences": controller_references(owner_references),
    }
    if node_selection is not None:
        h[node_selection[0]] = node_selection[1]
    pruned = prune(h)
    assert isinstance(pruned, dict)
    return pruned


def device_eq(desired: str, stored: str) -> bool:
    """Semantic equality of a desired device and a stored one, both canonical JSON."""
    if desired == stored:
        return True
    d, s = json.loads(desired), json.loads(stored)
    device_quantities(d, value_key)
    device_quantities(s, value_key)
    # The server fills in a taint's time: a desired taint without one accepts any.
    d_taints, s_taints = d.get("taints"), s.get("taints")
    if isinstance(d_taints, list) and isinstance(s_taints, list):
        for d_taint, s_taint in zip(d_taints, s_taints):
            if "timeAdded" not in d_taint and isinstance(s_taint, dict):
                s_taint.pop("timeAdded", None)
    return bool(d == s)


def header_eq(a: str, b: str) -> bool:
    """Semantic equality of two slice headers as canonical JSON (counters by value)."""
    if a == b:
        return True
    ha, hb = json.loads(a), json.loads(b)
    header_quantities(ha, value_key)
    header_quantities(hb, value_key)
    return bool(ha == hb)


#: Members whose keys are names (written ``["key"]`` in a path), not field names.
_MAP_FIELDS = frozenset({"attributes", "capacity", "counters", "nodeAllocatableResources"})

Segment = Union[str, int]


def _feature(path: list[Segment]) -> str | None:
    names = [s for s in path if isinstance(s, str)]
    # The last of the gated names in the path decides
    # (``consumesCounters[0].compatibilityGroups`` is DRADeviceCompatibilityGroups); Go's
    # ``DroppedFieldsError.DisabledFeatures()`` makes the same guesses, from counts.
    for name in reversed(names):
        if name in GATES:
            return GATES[name]
    # A device's own node selection (spec.devices[i].nodeName...).
    if len(names) >= 3 and names[1] == "devices":
        return DEVICE_GATES.get(names[2])
    return None


def _path_text(path: list[Segment]) -> str:
    out = ""
    for i, segment in enumerate(path):
        if isinstance(segment, int):
            out += f"[{segment}]"
        elif i > 0 and path[i - 1] in _MAP_FIELDS:
            out += f"[{quote(segment)}]"
        else:
            out += f".{segment}" if out else segment
    return out


def _not_contained(sent: Any, stored: Any, path: list[Segment], out: list[list[Segment]]) -> None:
    """Appends the paths of what ``sent`` has and ``stored`` has not, or has otherwise."""
    if isinstance(sent, dict):
        if not isinstance(stored, dict):
            out.append(path)
            return
        for key in sorted(sent):
            if key in stored:
                _not_contained(sent[key], stored[key], [*path, key], out)
            else:
                out.append([*path, key])
    elif isinstance(sent, list):
        if not isinstance(stored, list):
            out.append(path)
            return
        for i, item in enumerate(sent):
            if i < len(stored):
                _not_contained(item, stored[i], [*path, i], out)
            else:
                out.append([*path, i])
    elif type(sent) is not type(stored) or sent != stored:
        out.append(path)


def _by_value(header_json: str, device_jsons: list[str], compared: list[bool]) -> dict[str, Any]:
    """A slice as ``{"metadata": {"ownerReferences"}, "spec": {...}}``, quantities as value
    keys; a device not ``compared`` is 0 (on both sides: equal, or not stored at all)."""
    spec = json.loads(header_json)
    header_quantities(spec, value_key)
    devices: list[Any] = []
    for device_json, compare in zip(device_jsons, compared):
        if compare:
            device = json.loads(device_json)
            device_quantities(device, value_key)
            devices.append(device)
        else:
            devices.append(0)
    if devices:
        spec["devices"] = devices
    owners = spec.pop("ownerReferences", None)
    return {"metadata": {"ownerReferences": owners}, "spec": spec} if owners else {"spec": spec}


def dropped_fields(
    sent_header: str, sent_devices: list[str], stored_header: str, stored_devices: list[str]
) -> tuple[list[str], list[str]]:
    """``(paths, features)``: what was sent and is not in what was stored, and the feature
    gates that are probably off for it (sorted). What the server or a webhook added (a label,
    a taint's time, a default) is no drop; quantities compare by value."""
    if sent_header == stored_header and sent_devices == stored_devices:
        return [], []
    # Only devices stored at the same position with other JSON are parsed and compared.
    compared = [
        i < len(stored_devices) and d != stored_devices[i] for i, d in enumerate(sent_devices)
    ]
    missing: list[list[Segment]] = []
    _not_contained(
        _by_value(sent_header, sent_devices, compared),
        _by_value(stored_header, stored_devices, compared + [False] * len(stored_devices)),
        [],
        missing,
    )
    features = {f for f in map(_feature, missing) if f is not None}
    return [_path_text(p) for p in missing], sorted(features)
