"""``prepare_desired``: limits and formats of ``resource.k8s.io/v1`` (docs/core.md §3).

Every message of the contract is written here; the Rust core uses the same words. Problems
are collected with their path in traversal order (dict members in sorted key order), and a
device's canonical JSON is rendered only once it is known to be valid.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Union

from resourceslice._pycore import canonical
from resourceslice._pycore.quantity import parse_quantity

#: Per-object overhead the packer reserves for metadata and the header (docs/core.md §4).
SLICE_OVERHEAD = 4096
MAX_DEVICES = 128
MAX_DEVICES_ADVANCED = 64
MAX_ATTRIBUTES_AND_CAPACITIES = 32
MAX_VALUE_LENGTH = 64
MAX_TAINTS = 16
MAX_CONSUMES_COUNTERS = 2
MAX_COUNTERS = 32
MAX_COUNTER_SETS = 8
MAX_BINDING_CONDITIONS = 4
MAX_DRIVER_LENGTH = 63
MAX_POOL_NAME_LENGTH = 253
_INT64 = 1 << 63

ATTRIBUTE_TYPES = ("bool", "bools", "int", "ints", "string", "strings", "version", "versions")
TAINT_EFFECTS = ("NoSchedule", "NoExecute", "None")

# The messages.
NOT_UTF8 = "not valid UTF-8"
NOT_STRING = "must be a string"
NOT_BOOLEAN = "must be a boolean"
NOT_INT64 = "out of range for a 64-bit integer"
IS_FLOAT = "must not be a float"
NOT_INTEGER = "must be an integer"
NOT_OBJECT = "must be an object"
NOT_LIST = "must be a list"
BAD_DOMAIN = "the domain must be a DNS subdomain of at most 63 characters"
BAD_ID = "the name must be a C identifier of at most 32 characters"
BAD_VERSION = "must be a semantic version (semver 2.0.0)"
ATTRIBUTE_ONE_TYPE = (
    "must have exactly one of bool, int, string, version, bools, ints, strings, versions"
)
VALUE_REQUIRED = "value is required"
KEY_REQUIRED = "key is required"
EFFECT_REQUIRED = "effect is required"
NAME_REQUIRED = "name is required"
COUNTER_SET_REQUIRED = "counterSet is required"
BAD_LABEL_NAME = "must be a label name"
BAD_LABEL_VALUE = "must be a label value"
BAD_EFFECT = "must be one of NoSchedule, NoExecute, None"
BAD_TIME = "must be an RFC 3339 time"
BAD_DNS_LABEL = "must be a DNS label"
BAD_DNS_SUBDOMAIN = "must be a DNS subdomain"
BAD_QUALIFIED_NAME = "must be a qualified name"
PER_DEVICE_REQUIRED = (
    "exactly one of nodeName, nodeSelector, allNodes is required with perDeviceNodeSelection"
)
PER_DEVICE_ONLY = (
    "nodeName, nodeSelector and allNodes are only allowed in a slice with perDeviceNodeSelection"
)
DEVICE_TOO_LARGE = "device too large"
BAD_DRIVER = f"must be a DNS subdomain of at most {MAX_DRIVER_LENGTH} characters"
BAD_POOL_NAME = (
    f"pool name must be at most {MAX_POOL_NAME_LENGTH} characters of /-separated DNS subdomains"
)
DEVICES_OR_SLICES = "exactly one of devices and slices is required"
SELECTOR_OR_ALL_NODES = "at most one of nodeSelector and allNodes"
NEGATIVE = "must not be negative"
DEVICES_AND_COUNTERS = "a slice has devices or sharedCounters, not both"


def unsupported_type(type_name: str) -> str:
    return f"unsupported type {type_name}"


def invalid_quantity(text: str) -> str:
    return f"invalid quantity {canonical.quote(text)}"


def too_many(limit: int, what: str, got: int) -> str:
    return f"at most {limit} {what}, got {got}"


def too_long() -> str:
    return f"must be at most {MAX_VALUE_LENGTH} characters"


def too_many_ids(got: int) -> str:
    return f"at most {MAX_ATTRIBUTES_AND_CAPACITIES} attributes and capacities together, got {got}"


def duplicate_counter_set(name: str) -> str:
    return f"duplicate counter set {canonical.quote(name)}"


def unknown_counter_set(name: str) -> str:
    return f"unknown counter set {canonical.quote(name)}"


def unknown_counter(name: str) -> str:
    return f"unknown counter {canonical.quote(name)} in counter set"


def duplicate_device(name: str) -> str:
    return f"duplicate device name {canonical.quote(name)}"


def duplicate_counter_set_name(name: str) -> str:
    return f"duplicate counter set name {canonical.quote(name)}"


def too_many_slice_devices(limit: int, got: int) -> str:
    return f"at most {limit} devices in a slice, got {got}"


# Input as plain data, normalised the way the Rust glue sees it.


class _Marker:
    """A value the checks refuse, remembered by kind (and type name for others)."""

    def __init__(self, kind: str, type_name: str = "") -> None:
        self.kind = kind
        self.type_name = type_name


_BIG_INT = _Marker("bigint")
_FLOAT = _Marker("float")
_BAD_STR = _Marker("badstr")

Node = Union[None, bool, int, str, _Marker, list["Node"], dict[str, "Node"]]


def _utf8_ok(s: str) -> bool:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def to_node(obj: Any) -> Node:
    """Python data -> the input tree: dict members sorted, refused values marked."""
    if obj is None or isinstance(obj, bool):
        return obj
    if isinstance(obj, str):
        return obj if _utf8_ok(obj) else _BAD_STR
    if isinstance(obj, int):
        return int(obj) if -_INT64 <= obj < _INT64 else _BIG_INT
    if isinstance(obj, float):
        return _FLOAT
    if isinstance(obj, dict):
        return dict(sorted((_entry(k, v) for k, v in obj.items()), key=lambda kv: kv[0]))
    if isinstance(obj, (list, tuple)):
        return [to_node(x) for x in obj]
    return _Marker("other", type(obj).__name__)


def _entry(key: Any, value: Any) -> tuple[str, Node]:
    if isinstance(key, str) and _utf8_ok(key):
        return key, to_node(value)
    return str(key), _Marker("other", f"{type(key).__name__} key")


def to_value(node: Node) -> Any:
    """An input tree without marked values -> JSON data."""
    if isinstance(node, dict):
        return {k: to_value(v) for k, v in node.items()}
    if isinstance(node, list):
        return [to_value(v) for v in node]
    return node


def _clean(node: Node) -> bool:
    if isinstance(node, _Marker):
        return False
    if isinstance(node, dict):
        return all(_clean(v) for v in node.values())
    if isinstance(node, list):
        return all(_clean(v) for v in node)
    return True


# Formats.

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_LABEL_BODY = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_SEMVER = re.compile(
    r"(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)"
    r"(-(0|[1-9][0-9]*|[0-9]*[a-zA-Z-][0-9a-zA-Z-]*)(\.(0|[1-9][0-9]*|[0-9]*[a-zA-Z-][0-9a-zA-Z-]*))*)?"
    r"(\+[0-9a-zA-Z-]+(\.[0-9a-zA-Z-]+)*)?"
)


def _ascii_full(pattern: re.Pattern[str], s: str) -> bool:
    return s.isascii() and pattern.fullmatch(s) is not None


def is_dns_label(s: str) -> bool:
    return len(s.encode()) <= 63 and _ascii_full(_DNS_LABEL, s)


def is_dns_subdomain(s: str) -> bool:
    return len(s.encode()) <= 253 and all(is_dns_label(p) for p in s.split("."))


def _is_label_value(s: str) -> bool:
    return s == "" or (len(s) <= 63 and _ascii_full(_LABEL_BODY, s))


def _is_qualified_name(s: str) -> bool:
    prefix, slash, name = s.partition("/")
    if not slash:
        prefix, name = "", s
    elif not prefix or not is_dns_subdomain(prefix):
        return False
    return len(name.encode()) <= 63 and _ascii_full(_LABEL_BODY, name)


# The checker.

_Seg = Union[tuple[str, str], int]


class _Errors:
    def __init__(self) -> None:
        self.path: list[_Seg] = []
        self.list: list[str] = []

    def report(self, problem: str) -> None:
        parts: list[str] = []
        for i, seg in enumerate(self.path):
            if isinstance(seg, int):
                parts.append(f"[{seg}]")
            elif seg[0] == "field":
                parts.append(seg[1] if i == 0 else f".{seg[1]}")
            else:
                parts.append(f"[{canonical.quote(seg[1])}]")
        self.list.append(f"{''.join(parts)}: {problem}")

    @contextmanager
    def at(self, seg: _Seg) -> Iterator[None]:
        self.path.append(seg)
        try:
            yield
        finally:
            self.path.pop()

    def field(self, name: str) -> Any:
        return self.at(("field", name))

    def key(self, name: str) -> Any:
        return self.at(("key", name))


def _get(entries: dict[str, Node], key: str) -> Node:
    return entries.get(key)


def _check_str(e: _Errors, v: Node) -> str | None:
    if isinstance(v, str):
        return v
    e.report(NOT_UTF8 if v is _BAD_STR else NOT_STRING)
    return None


def _check_bool(e: _Errors, v: Node) -> bool | None:
    if isinstance(v, bool):
        return v
    e.report(NOT_BOOLEAN)
    return None


def _check_int(e: _Errors, v: Node) -> int | None:
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    e.report(NOT_INT64 if v is _BIG_INT else IS_FLOAT if v is _FLOAT else NOT_INTEGER)
    return None


def _check_dict(e: _Errors, v: Node) -> dict[str, Node] | None:
    if isinstance(v, dict):
        return v
    e.report(NOT_OBJECT)
    return None


def _check_list(e: _Errors, v: Node) -> list[Node] | None:
    if isinstance(v, list):
        return v
    e.report(NOT_LIST)
    return None


def _check_generic(e: _Errors, v: Node) -> None:
    """The generic rules, for members passed through as they are."""
    if v is _BIG_INT or v is _FLOAT:
        _check_int(e, v)
    elif v is _BAD_STR:
        e.report(NOT_UTF8)
    elif isinstance(v, _Marker):
        e.report(unsupported_type(v.type_name))
    elif isinstance(v, list):
        for i, item in enumerate(v):
            with e.at(i):
                _check_generic(e, item)
    elif isinstance(v, dict):
        for k, item in v.items():
            with e.key(k):
                _check_generic(e, item)


def _check_device_id(e: _Errors, name: str) -> None:
    """Attribute / capacity / counter names: C identifier ≤ 32, optionally ``<domain ≤ 63>/``."""
    domain, slash, ident = name.partition("/")
    if not slash:
        ident = name
    elif len(domain.encode()) > 63 or not is_dns_subdomain(domain):
        e.report(BAD_DOMAIN)
    if len(ident.encode()) > 32 or not _ascii_full(_C_IDENTIFIER, ident):
        e.report(BAD_ID)


def _check_quantity(e: _Errors, v: Node) -> None:
    if isinstance(v, int) and not isinstance(v, bool):
        return
    if isinstance(v, str):
        if parse_quantity(v) is None:
            e.report(invalid_quantity(v))
        return
    _check_str(e, v)


def _check_max(e: _Errors, items: Any, limit: int, what: str) -> None:
    if len(items) > limit:
        e.report(too_many(limit, what, len(items)))


def _check_value_length(e: _Errors, s: str) -> None:
    if len(s) > MAX_VALUE_LENGTH:
        e.report(too_long())


def _check_version(e: _Errors, s: str) -> None:
    if not _ascii_full(_SEMVER, s):
        e.report(BAD_VERSION)
    _check_value_length(e, s)


def _check_scalar(e: _Errors, kind: str, v: Node) -> None:
    if kind == "bool":
        _check_bool(e, v)
    elif kind == "int":
        _check_int(e, v)
    elif (s := _check_str(e, v)) is not None:
        (_check_value_length if kind == "string" else _check_version)(e, s)


def _check_attribute(e: _Errors, v: Node) -> bool:
    """Checks one attribute; true when it is a list attribute."""
    entries = _check_dict(e, v)
    if entries is None:
        return False
    present = {k: x for k, x in entries.items() if x is not None}
    if sum(1 for k in present if k in ATTRIBUTE_TYPES) != 1:
        e.report(ATTRIBUTE_ONE_TYPE)
    is_list = False
    for k, item in present.items():
        with e.field(k):
            if k in ("bool", "int", "string", "version"):
                _check_scalar(e, k, item)
            elif k in ("bools", "ints", "strings", "versions"):
                is_list = True
                items = _check_list(e, item)
                for i, x in enumerate(items or ()):
                    with e.at(i):
                        _check_scalar(e, k[:-1], x)
            else:
                _check_generic(e, item)
    return is_list


def _check_members(
    e: _Errors, entries: dict[str, Node], special: Mapping[str, Callable[[_Errors, Node], Any]]
) -> None:
    for k, item in entries.items():
        with e.field(k):
            special.get(k, _check_generic)(e, item)


def _check_capacity(e: _Errors, v: Node) -> None:
    entries = _check_dict(e, v)
    if entries is None:
        return
    if _get(entries, "value") is None:
        e.report(VALUE_REQUIRED)
    _check_members(e, entries, {"value": _check_quantity, "requestPolicy": _check_request_policy})


def _check_quantity_list(e: _Errors, v: Node) -> None:
    for i, x in enumerate(_check_list(e, v) or ()):
        with e.at(i):
            _check_quantity(e, x)


def _check_range(e: _Errors, v: Node) -> None:
    entries = _check_dict(e, v)
    if entries is not None:
        _check_members(e, entries, dict.fromkeys(("min", "max", "step"), _check_quantity))


def _check_request_policy(e: _Errors, v: Node) -> None:
    entries = _check_dict(e, v)
    if entries is not None:
        _check_members(
            e,
            entries,
            {
                "default": _check_quantity,
                "validValues": _check_quantity_list,
                "validRange": _check_range,
            },
        )


def _check_counters(e: _Errors, v: Node) -> list[str]:
    """``{name: {"value": quantity}}``, at most 32; the names."""
    entries = _check_dict(e, v)
    if entries is None:
        return []
    _check_max(e, entries, MAX_COUNTERS, "counters")
    for name, counter in entries.items():
        with e.key(name):
            _check_device_id(e, name)
            c = _check_dict(e, counter)
            if c is None:
                continue
            if _get(c, "value") is None:
                e.report(VALUE_REQUIRED)
            _check_members(e, c, {"value": _check_quantity})
    return list(entries)


def _check_named(e: _Errors, v: Node, valid: Callable[[str], bool], problem: str) -> None:
    s = _check_str(e, v)
    if s is not None and not valid(s):
        e.report(problem)


def _check_taint(e: _Errors, v: Node) -> None:
    entries = _check_dict(e, v)
    if entries is None:
        return
    if _get(entries, "key") is None:
        e.report(KEY_REQUIRED)
    if _get(entries, "effect") is None:
        e.report(EFFECT_REQUIRED)
    _check_members(
        e,
        entries,
        {
            "key": lambda e, x: _check_named(e, x, _is_qualified_name, BAD_LABEL_NAME),
            "value": lambda e, x: _check_named(e, x, _is_label_value, BAD_LABEL_VALUE),
            "effect": lambda e, x: _check_named(e, x, TAINT_EFFECTS.__contains__, BAD_EFFECT),
            "timeAdded": lambda e, x: _check_named(
                e, x, lambda s: canonical.normalise_time(s) is not None, BAD_TIME
            ),
        },
    )


#: The counter sets a slice shares: name -> counter names.
CounterSets = dict[str, set[str]]


def _check_device(e: _Errors, v: Node, per_device: bool, counter_sets: CounterSets) -> bool:
    """Checks one device; true when it uses advanced features."""
    entries = _check_dict(e, v)
    if entries is None:
        return False
    if _get(entries, "name") is None:
        e.report(NAME_REQUIRED)
    ids = sum(len(x) for k in ("attributes", "capacity") if isinstance(x := entries.get(k), dict))
    if ids > MAX_ATTRIBUTES_AND_CAPACITIES:
        e.report(too_many_ids(ids))
    selections = sum(
        1 for k in ("nodeName", "nodeSelector", "allNodes") if entries.get(k) is not None
    )
    if per_device and selections != 1:
        e.report(PER_DEVICE_REQUIRED)
    elif not per_device and selections > 0:
        e.report(PER_DEVICE_ONLY)
    advanced = False
    for k, item in entries.items():
        if item is None:
            continue
        with e.field(k):
            if k == "name":
                _check_named(e, item, is_dns_label, BAD_DNS_LABEL)
            elif k in ("attributes", "capacity"):
                members = _check_dict(e, item)
                for name, x in (members or {}).items():
                    with e.key(name):
                        _check_device_id(e, name)
                        if k == "attributes":
                            advanced |= _check_attribute(e, x)
                        else:
                            _check_capacity(e, x)
            elif k == "taints":
                taints = _check_list(e, item)
                if taints is None:
                    continue
                advanced |= bool(taints)
                _check_max(e, taints, MAX_TAINTS, "taints")
                for i, t in enumerate(taints):
                    with e.at(i):
                        _check_taint(e, t)
            elif k == "consumesCounters":
                consumptions = _check_list(e, item)
                if consumptions is None:
                    continue
                advanced |= bool(consumptions)
                _check_max(e, consumptions, MAX_CONSUMES_COUNTERS, "counter consumptions")
                seen: set[str] = set()
                for i, c in enumerate(consumptions):
                    with e.at(i):
                        _check_consumption(e, c, counter_sets, seen)
            elif k in ("bindingConditions", "bindingFailureConditions"):
                conditions = _check_list(e, item)
                if conditions is None:
                    continue
                _check_max(e, conditions, MAX_BINDING_CONDITIONS, "conditions")
                for i, x in enumerate(conditions):
                    with e.at(i):
                        _check_named(e, x, _is_qualified_name, BAD_QUALIFIED_NAME)
            elif k == "nodeName":
                _check_named(e, item, is_dns_subdomain, BAD_DNS_SUBDOMAIN)
            elif k == "nodeSelector":
                if _check_dict(e, item) is not None:
                    _check_generic(e, item)
            elif k in ("allNodes", "bindsToNode", "allowMultipleAllocations"):
                _check_bool(e, item)
            else:
                _check_generic(e, item)
    return advanced


def _check_consumption(e: _Errors, v: Node, sets: CounterSets, seen: set[str]) -> None:
    entries = _check_dict(e, v)
    if entries is None:
        return
    set_name: str | None = None
    raw = _get(entries, "counterSet")
    if raw is None:
        e.report(COUNTER_SET_REQUIRED)
    else:
        with e.field("counterSet"):
            set_name = _check_str(e, raw)
            if set_name is not None:
                if set_name in seen:
                    e.report(duplicate_counter_set(set_name))
                seen.add(set_name)
                if set_name not in sets:
                    e.report(unknown_counter_set(set_name))
    for k, item in entries.items():
        if k == "counterSet":
            continue
        with e.field(k):
            if k != "counters":
                _check_generic(e, item)
                continue
            names = _check_counters(e, item)
            known = sets.get(set_name) if set_name is not None else None
            if known is None:
                continue
            for name in names:
                if name not in known:
                    with e.key(name):
                        e.report(unknown_counter(name))


@dataclass(frozen=True)
class DeviceEntry:
    """One device of the desired state, canonical."""

    name: str
    json: str
    #: UTF-8 length of ``json``.
    size: int
    #: Taints, consumesCounters or a list attribute: the slice limit drops to 64.
    advanced: bool
    #: Has a taint without ``timeAdded`` (the stored time is carried over).
    untimed_taints: bool


def _canonical_quantity(text: str) -> str:
    q = parse_quantity(text)
    assert q is not None, "checked quantity"
    return q.canonical


def _device_entry(e: _Errors, v: Node, advanced: bool, max_slice_bytes: int) -> DeviceEntry | None:
    value = canonical.prune(to_value(v)) or {}
    canonical.device_quantities(value, _canonical_quantity)
    untimed = False
    taints = value.get("taints")
    for taint in taints if isinstance(taints, list) else ():
        if "timeAdded" in taint:
            taint["timeAdded"] = canonical.normalise_time(taint["timeAdded"])
        else:
            untimed = True
    text = canonical.to_json(value)
    size = len(text.encode())
    if size > max_slice_bytes - SLICE_OVERHEAD:
        e.report(DEVICE_TOO_LARGE)
        return None
    return DeviceEntry(str(value.get("name", "")), text, size, advanced, untimed)


def _check_devices(
    e: _Errors,
    v: Node,
    per_device: bool,
    counter_sets: CounterSets,
    names: set[str],
    max_slice_bytes: int,
) -> list[DeviceEntry]:
    """The devices of one list (a flat pool or one slice), names unique across ``names``."""
    items = _check_list(e, v)
    out: list[DeviceEntry] = []
    for i, item in enumerate(items or ()):
        with e.at(i):
            before = len(e.list)
            advanced = _check_device(e, item, per_device, counter_sets)
            name = item.get("name") if isinstance(item, dict) else None
            if isinstance(name, str):
                if name in names:
                    with e.field("name"):
                        e.report(duplicate_device(name))
                names.add(name)
            if len(e.list) == before:
                entry = _device_entry(e, item, advanced, max_slice_bytes)
                if entry is not None:
                    out.append(entry)
    return out


@dataclass(frozen=True)
class SliceSpec:
    """An explicit slice."""

    devices: list[DeviceEntry]
    shared_counters: Any
    per_device_node_selection: bool


@dataclass(frozen=True)
class DesiredPool:
    #: A flat list (packed) or explicit slices.
    devices: list[DeviceEntry] | None
    slices: list[SliceSpec] | None
    node_selector: Any
    all_nodes: bool
    generation: int

    def device_count(self) -> int:
        if self.slices is not None:
            return sum(len(s.devices) for s in self.slices)
        return len(self.devices or ())


def _optional_bool(e: _Errors, entries: dict[str, Node], key: str) -> bool:
    raw = _get(entries, key)
    if raw is None:
        return False
    with e.field(key):
        return bool(_check_bool(e, raw))


def _check_shared_counters(e: _Errors, v: Node, set_names: set[str]) -> Any:
    counter_sets = _check_list(e, v)
    if counter_sets is None:
        return None
    _check_max(e, counter_sets, MAX_COUNTER_SETS, "counter sets")
    for j, counter_set in enumerate(counter_sets):
        with e.at(j):
            entries = _check_dict(e, counter_set)
            if entries is None:
                continue
            set_name: str | None = None
            raw = _get(entries, "name")
            if raw is None:
                e.report(NAME_REQUIRED)
            else:
                with e.field("name"):
                    set_name = _check_str(e, raw)
                    if set_name is not None:
                        if not is_dns_label(set_name):
                            e.report(BAD_DNS_LABEL)
                        if set_name in set_names:
                            e.report(duplicate_counter_set_name(set_name))
                        set_names.add(set_name)
            raw_counters = _get(entries, "counters")
            if raw_counters is not None:
                with e.field("counters"):
                    _check_counters(e, raw_counters)
            for k, x in entries.items():
                if k not in ("name", "counters"):
                    with e.field(k):
                        _check_generic(e, x)
    if not _clean(v):
        return None
    value = canonical.prune(to_value(v))
    for counter_set in value or ():
        canonical.counters_quantities(counter_set, canonical.canonical_quantity)
    return value


def _pool_counter_sets(slices: list[Node]) -> CounterSets:
    """Every counter set the pool's slices share, read without reporting: the API keeps
    sharedCounters and devices in different slices, so a device refers across slices."""
    sets: CounterSets = {}
    for item in slices:
        shared = item.get("sharedCounters") if isinstance(item, dict) else None
        for counter_set in shared if isinstance(shared, list) else ():
            if not isinstance(counter_set, dict):
                continue
            name, counters = counter_set.get("name"), counter_set.get("counters")
            if isinstance(name, str):
                sets.setdefault(name, set()).update(counters if isinstance(counters, dict) else ())
    return sets


def _check_slices(e: _Errors, v: Node, names: set[str], max_slice_bytes: int) -> list[SliceSpec]:
    items = _check_list(e, v)
    pool_sets = _pool_counter_sets(items or [])
    # Counter set names are unique in the whole pool.
    set_names: set[str] = set()
    out: list[SliceSpec] = []
    for i, item in enumerate(items or ()):
        with e.at(i):
            entries = _check_dict(e, item)
            if entries is None:
                continue
            devices = _get(entries, "devices")
            shared = _get(entries, "sharedCounters")
            per_device = _optional_bool(e, entries, "perDeviceNodeSelection")
            if isinstance(devices, list) and devices and isinstance(shared, list) and shared:
                e.report(DEVICES_AND_COUNTERS)
            shared_value = None
            if shared is not None:
                with e.field("sharedCounters"):
                    shared_value = _check_shared_counters(e, shared, set_names)
            slice_devices: list[DeviceEntry] = []
            if devices is not None:
                with e.field("devices"):
                    slice_devices = _check_devices(
                        e, devices, per_device, pool_sets, names, max_slice_bytes
                    )
            advanced = any(d.advanced for d in slice_devices)
            limit = MAX_DEVICES_ADVANCED if advanced else MAX_DEVICES
            if isinstance(devices, list) and len(devices) > limit:
                with e.field("devices"):
                    e.report(too_many_slice_devices(limit, len(devices)))
            out.append(SliceSpec(slice_devices, shared_value, per_device))
    return out


def _check_pool(e: _Errors, name: str, v: Node, max_slice_bytes: int) -> DesiredPool | None:
    if (
        not name
        or len(name.encode()) > MAX_POOL_NAME_LENGTH
        or not all(is_dns_subdomain(p) for p in name.split("/"))
    ):
        e.report(BAD_POOL_NAME)
    entries = _check_dict(e, v)
    if entries is None:
        return None
    devices = _get(entries, "devices")
    slices = _get(entries, "slices")
    if (devices is None) == (slices is None):
        e.report(DEVICES_OR_SLICES)
    raw_selector = _get(entries, "nodeSelector")
    all_nodes = _optional_bool(e, entries, "allNodes")
    if raw_selector is not None and all_nodes:
        e.report(SELECTOR_OR_ALL_NODES)
    generation = 0
    raw_generation = _get(entries, "generation")
    if raw_generation is not None:
        with e.field("generation"):
            checked = _check_int(e, raw_generation)
            if checked is None:
                return None
            if checked < 0:
                e.report(NEGATIVE)
            generation = checked
    node_selector = None
    if raw_selector is not None:
        with e.field("nodeSelector"):
            if _check_dict(e, raw_selector) is not None:
                _check_generic(e, raw_selector)
                if _clean(raw_selector):
                    node_selector = canonical.prune(to_value(raw_selector))
    names: set[str] = set()
    flat: list[DeviceEntry] | None = None
    explicit: list[SliceSpec] | None = None
    if devices is not None:
        with e.field("devices"):
            flat = _check_devices(e, devices, False, {}, names, max_slice_bytes)
    elif slices is not None:
        with e.field("slices"):
            explicit = _check_slices(e, slices, names, max_slice_bytes)
    else:
        flat = []
    return DesiredPool(flat, explicit, node_selector, all_nodes, generation)


@dataclass(frozen=True)
class DesiredState:
    driver: str
    pools: dict[str, DesiredPool]
    max_slice_bytes: int


def prepare(
    driver: Any, pools: Mapping[Any, Any], max_slice_bytes: int
) -> tuple[DesiredState | None, list[str]]:
    """Validates and canonicalises; the errors in traversal order when anything is wrong."""
    e = _Errors()
    checked_driver: str | None
    with e.field("driver"):
        checked_driver = _check_str(e, to_node(driver))
        if checked_driver is not None and (
            len(checked_driver.encode()) > MAX_DRIVER_LENGTH or not is_dns_subdomain(checked_driver)
        ):
            e.report(BAD_DRIVER)
    out: dict[str, DesiredPool] = {}
    for name, pool in sorted((_entry(k, v) for k, v in pools.items()), key=lambda kv: kv[0]):
        with e.field("pools"), e.key(name):
            checked = _check_pool(e, name, pool, max_slice_bytes)
        if checked is not None:
            out[name] = checked
    if checked_driver is None or e.list:
        return None, e.list
    return DesiredState(checked_driver, out, max_slice_bytes), []
