"""``prepare_desired``: limits and formats of ``resource.k8s.io/v1`` (docs/core.md §3).

Every message of the contract is written here; the Rust core uses the same words. Problems
are collected with their path in traversal order (dict members in sorted key order), and a
device's canonical JSON is rendered only once it is known to be valid.
"""

from __future__ import annotations

import re
import sys
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
MAX_ATTRIBUTE_VALUES = 48
MAX_VALUE_LENGTH = 64
MAX_TAINTS = 16
MAX_CONSUMES_COUNTERS = 2
MAX_COUNTERS = 32
MAX_COUNTER_SETS = 8
MAX_BINDING_CONDITIONS = 4
MAX_COMPATIBILITY_GROUPS = 2
MAX_VALID_VALUES = 10
MAX_DRIVER_LENGTH = 63
MAX_POOL_NAME_LENGTH = 253
MAX_ID_LENGTH = 32
_INT64 = 1 << 63
#: Quantities in the rules of a request policy are counted in nano units; the policy's
#: numbers must be below 10^20 (a client-side limit: exact arithmetic in 128 bits).
NANO = 10**9
POLICY_LIMIT = 10**20 * NANO

ATTRIBUTE_TYPES = ("bool", "bools", "int", "ints", "string", "strings", "version", "versions")
TAINT_EFFECTS = ("NoSchedule", "NoExecute", "None")
SKIP_NODE_OPERATIONS = ("NodePrepareResources", "NodeUnprepareResources", "*")

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
NOT_FULLY_QUALIFIED = "must be <domain>/<name>"
BAD_VERSION = "must be a semantic version (semver 2.0.0)"
ATTRIBUTE_ONE_TYPE = (
    "must have exactly one of bool, int, string, version, bools, ints, strings, versions"
)
EMPTY_LIST = "must not be empty"
REQUIRED = "is required"
BAD_LABEL_NAME = "must be a label name"
BAD_LABEL_VALUE = "must be a label value"
BAD_EFFECT = "must be one of NoSchedule, NoExecute, None"
BAD_TIME = "must be an RFC 3339 time"
BAD_DNS_LABEL = "must be a DNS label"
BAD_NODE_NAME = "must be a DNS subdomain"
BAD_QUALIFIED_NAME = "must be a qualified name"
DUPLICATE = "duplicate"
PER_DEVICE_REQUIRED = (
    "exactly one of nodeName, nodeSelector, allNodes is required with perDeviceNodeSelection"
)
PER_DEVICE_ONLY = (
    "nodeName, nodeSelector and allNodes are only allowed in a slice with perDeviceNodeSelection"
)
ONLY_TRUE = "must be true or unset"
NODE_SELECTION_REQUIRED = (
    "no node selection: a Node owner, nodeSelector, allNodes, or slices with "
    "perDeviceNodeSelection is required"
)
NODE_SELECTION_CONFLICT = (
    "at most one of a Node owner, nodeSelector, allNodes and perDeviceNodeSelection"
)
ONE_TERM = "must have exactly one node selector term"
TERMS_REQUIRED = "at least one node selector term is required"
BAD_OPERATOR = "must be one of In, NotIn, Exists, DoesNotExist, Gt, Lt"
BAD_FIELD_OPERATOR = "must be In or NotIn"
BAD_FIELD_KEY = "must be metadata.name"
VALUES_REQUIRED = "values are required with In and NotIn"
VALUES_FORBIDDEN = "values are not allowed with Exists and DoesNotExist"
ONE_VALUE = "exactly one value is required"
DEVICE_TOO_LARGE = "device too large"
BAD_DRIVER = f"must be a DNS subdomain of at most {MAX_DRIVER_LENGTH} characters"
BAD_POOL_NAME = (
    f"pool name must be at most {MAX_POOL_NAME_LENGTH} characters of /-separated DNS subdomains"
)
DEVICES_OR_SLICES = "exactly one of devices and slices is required"
NEGATIVE = "must not be negative"
BAD_DEVICES_PER_SLICE = "must be from 1 to 128"
PACKED_ONLY = "only a flat devices list is packed: not allowed with slices"
NOT_POSITIVE = "must be positive"
DEVICES_AND_COUNTERS = "a slice has devices or sharedCounters, not both"
POLICY_NEEDS_MULTIPLE = "requestPolicy needs allowMultipleAllocations: true"
ONE_POLICY = "at most one of validValues and validRange"
NOT_SORTED = "must be sorted in ascending order"
OVER_CAPACITY = "must not exceed the capacity's value"
DEFAULT_NOT_VALID = "the default must be one of validValues"
DEFAULT_OUT_OF_RANGE = "the default must be within the range"
MIN_OVER_MAX = "must not be less than min"
OFF_STEP = "min plus a multiple of step must give the default and max"
NOT_MILLI = "must be a whole number of thousandths in 64 bits"
OVER_INT64 = "must not exceed 9223372036854775807"
TOO_LARGE_FOR_POLICY = "must be below 10^20 in a request policy"
BAD_ALLOCATABLE = "must be cpu, memory or hugepages-<size>"
MAPPING_OR_OVERHEAD = "at least one of mapping and overhead is required"
KEY_OR_MULTIPLIER = "exactly one of capacityKey and deviceMultiplier is required"
UNKNOWN_CAPACITY = "must name a capacity of the device"
PER_POD_OR_CONTAINER = "at least one of perPod and perContainer is required"
CONDITIONS_NEED_BOTH = "bindingConditions and bindingFailureConditions go together"
CONDITION_OVERLAP = "must not also be a binding condition"
PARTITION_NEEDS_COUNTERS = "only allowed in a slice with devices that consume counters"
PARTITION_ATTRIBUTE = "must be a string attribute: the slice's partitionTypeAttribute"
PREPARE_WITHOUT_UNPREPARE = "NodePrepareResources needs NodeUnprepareResources or *"
BAD_SKIP = "must be one of NodePrepareResources, NodeUnprepareResources, *"


def unsupported_type(type_name: str) -> str:
    return f"unsupported type {type_name}"


def invalid_quantity(text: str) -> str:
    return f"invalid quantity {canonical.quote(text)}"


def too_many(limit: int, what: str, got: int) -> str:
    return f"at most {limit} {what}, got {got}"


def too_long() -> str:
    return f"must be at most {MAX_VALUE_LENGTH} bytes"


def too_many_ids(got: int) -> str:
    return f"at most {MAX_ATTRIBUTES_AND_CAPACITIES} attributes and capacities together, got {got}"


def too_many_values(got: int) -> str:
    return f"at most {MAX_ATTRIBUTE_VALUES} attribute values (list items count one each), got {got}"


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


# Formats: apimachinery's, as the apiserver applies them.

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
#: A DNS subdomain as Kubernetes checks it: dot-separated labels, 253 bytes in all, and no
#: limit on one label.
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_LABEL_BODY = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_SEMVER = re.compile(
    r"(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)"
    r"(-(0|[1-9][0-9]*|[0-9]*[a-zA-Z-][0-9a-zA-Z-]*)(\.(0|[1-9][0-9]*|[0-9]*[a-zA-Z-][0-9a-zA-Z-]*))*)?"
    r"(\+[0-9a-zA-Z-]+(\.[0-9a-zA-Z-]+)*)?"
)
_HUGEPAGES = "hugepages-"


def _ascii_full(pattern: re.Pattern[str], s: str) -> bool:
    return s.isascii() and pattern.fullmatch(s) is not None


def _bytes(s: str) -> int:
    return len(s.encode())


def is_dns_label(s: str) -> bool:
    return _bytes(s) <= 63 and _ascii_full(_DNS_LABEL, s)


def is_dns_subdomain(s: str) -> bool:
    return _bytes(s) <= 253 and _ascii_full(_DNS_SUBDOMAIN, s)


def is_driver_name(s: str) -> bool:
    """A driver name, also the domain of an attribute: upper case is allowed (the server
    checks the lower-cased name, and warns)."""
    # ASCII only: Go lower-cases Unicode, where a few non-ASCII letters (the Kelvin sign)
    # become ASCII ones; no driver is named so, and both cores must agree.
    return 0 < _bytes(s) <= MAX_DRIVER_LENGTH and s.isascii() and is_dns_subdomain(s.lower())


def is_pool_name(s: str) -> bool:
    return 0 < _bytes(s) <= MAX_POOL_NAME_LENGTH and all(is_dns_subdomain(p) for p in s.split("/"))


def _is_c_identifier(s: str) -> bool:
    return _bytes(s) <= MAX_ID_LENGTH and _ascii_full(_C_IDENTIFIER, s)


def _qualified_name_problems(name: str, lower_case: bool = False) -> list[str]:
    """An attribute or capacity name: a C identifier, optionally after ``<driver name>/``
    (in lower case where the server's declarative rules check it). Like the server, a name
    with more than one slash is not looked at."""
    parts = name.split("/")
    if len(parts) == 1:
        return [] if _is_c_identifier(name) else [BAD_ID]
    if len(parts) > 2:
        return []
    domain_ok = is_driver_name(parts[0]) and not (lower_case and parts[0] != parts[0].lower())
    problems = [] if domain_ok else [BAD_DOMAIN]
    if not _is_c_identifier(parts[1]):
        problems.append(BAD_ID)
    return problems


def _is_label_value(s: str) -> bool:
    return s == "" or (_bytes(s) <= 63 and _ascii_full(_LABEL_BODY, s))


def is_label_name(s: str) -> bool:
    """A label key (taint keys, binding conditions): ``[prefix/]name``."""
    prefix, slash, name = s.partition("/")
    if not slash:
        prefix, name = "", s
    elif not prefix or not is_dns_subdomain(prefix) or "/" in name:
        return False
    return _bytes(name) <= 63 and _ascii_full(_LABEL_BODY, name)


def _is_allocatable(name: str) -> bool:
    return name in ("cpu", "memory") or name.startswith(_HUGEPAGES)


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


def _check_quantity(e: _Errors, v: Node) -> int | None:
    """A quantity (string or integer); its value in nano units when it is one, beyond
    ``POLICY_LIMIT`` in magnitude kept at that bound (with its sign)."""
    if isinstance(v, int) and not isinstance(v, bool):
        return _clamp(v * NANO)
    s = _check_str(e, v)
    if s is None:
        return None
    q = parse_quantity(s)
    if q is None:
        e.report(invalid_quantity(s))
        return None
    if q.key == "0":
        return 0
    mantissa, _, exponent = q.key.partition("e")
    # Go rounds to nano units, so the exponent is at least -9; above 10^20 the exact
    # value is not needed.
    return _clamp(int(mantissa) * 10 ** max(0, min(int(exponent) + 9, 40)))


def _clamp(nano: int) -> int:
    return max(-POLICY_LIMIT, min(POLICY_LIMIT, nano))


def _check_max(e: _Errors, items: Any, limit: int, what: str) -> bool:
    if len(items) > limit:
        e.report(too_many(limit, what, len(items)))
        return False
    return True


def _check_value_length(e: _Errors, s: str) -> None:
    if _bytes(s) > MAX_VALUE_LENGTH:
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


def _attribute_values(attribute: Node) -> int:
    """How many values an attribute holds towards the device's limit: its list items, or
    one for a scalar."""
    if not isinstance(attribute, dict):
        return 1
    items = sum(
        len(x)
        for k in ("bools", "ints", "strings", "versions")
        if isinstance(x := attribute.get(k), list)
    )
    return items or 1


def _check_attribute(e: _Errors, v: Node) -> bool:
    """Checks one attribute; true when it is a list attribute."""
    entries = _check_dict(e, v)
    if entries is None:
        return False
    present = {k: x for k, x in entries.items() if x is not None}
    # An empty list is there for one reading of the rule and absent for the other (the
    # server applies both): it never makes the one value.
    types = [k for k in present if k in ATTRIBUTE_TYPES]
    if len(types) != 1 or present[types[0]] == []:
        e.report(ATTRIBUTE_ONE_TYPE)
    is_list = False
    for k, item in present.items():
        with e.field(k):
            if k in ("bool", "int", "string", "version"):
                _check_scalar(e, k, item)
            elif k in ("bools", "ints", "strings", "versions"):
                is_list = True
                items = _check_list(e, item)
                if items == []:
                    e.report(EMPTY_LIST)
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
        if item is None:
            continue
        with e.field(k):
            special.get(k, _check_generic)(e, item)


def _quantities(
    e: _Errors, entries: dict[str, Node], keys: tuple[str, ...]
) -> tuple[dict[str, int], bool]:
    """The quantities at ``keys`` that are present, and whether all of them parse."""
    values: dict[str, int] = {}
    ok = True
    for k in keys:
        raw = entries.get(k)
        if raw is not None:
            with e.field(k):
                q = _check_quantity(e, raw)
            if q is None:
                ok = False
            else:
                values[k] = q
    return values, ok


def _check_capacity(e: _Errors, v: Node, multiple: bool) -> None:
    entries = _check_dict(e, v)
    if entries is None:
        return
    # A missing value is zero, as the server reads it.
    values, ok = _quantities(e, entries, ("value",))
    capacity = values.get("value", 0)
    if multiple and entries.get("requestPolicy") is not None and abs(capacity) >= POLICY_LIMIT:
        with e.field("value"):
            e.report(TOO_LARGE_FOR_POLICY)
        ok = False
    for k, item in entries.items():
        if item is None or k == "value":
            continue
        with e.field(k):
            if k != "requestPolicy":
                _check_generic(e, item)
            elif not multiple:
                e.report(POLICY_NEEDS_MULTIPLE)
                _check_request_policy(e, item, None)
            else:
                _check_request_policy(e, item, capacity if ok else None)


def _policy_quantity(e: _Errors, entries: dict[str, Node], key: str) -> tuple[int | None, bool]:
    """A quantity member of a request policy: (its nano value or None when absent, ok)."""
    raw = entries.get(key)
    if raw is None:
        return None, True
    with e.field(key):
        return _policy_value(e, raw)


def _policy_value(e: _Errors, raw: Node) -> tuple[int | None, bool]:
    q = _check_quantity(e, raw)
    if q is not None and abs(q) >= POLICY_LIMIT:
        e.report(TOO_LARGE_FOR_POLICY)
        return None, False
    return q, q is not None


def _check_request_policy(e: _Errors, v: Node, capacity: int | None) -> None:
    """A consumable capacity's policy; its rules need the capacity's value (None: only the
    formats are checked)."""
    entries = _check_dict(e, v)
    if entries is None:
        return
    for k, x in entries.items():
        if k not in ("default", "validValues", "validRange") and x is not None:
            with e.field(k):
                _check_generic(e, x)
    default, ok = _policy_quantity(e, entries, "default")
    values: list[int] = []
    raw_values = entries.get("validValues")
    if raw_values is not None:
        with e.field("validValues"):
            for i, x in enumerate(_check_list(e, raw_values) or ()):
                with e.at(i):
                    q, q_ok = _policy_value(e, x)
                    ok = ok and q_ok
                    values.append(q or 0)
    bounds: dict[str, int] = {}
    raw_range = entries.get("validRange")
    range_entries = None
    if raw_range is not None:
        with e.field("validRange"):
            range_entries = _check_dict(e, raw_range)
            for k, x in (range_entries or {}).items():
                if x is None:
                    continue
                if k in ("min", "max", "step"):
                    q, q_ok = _policy_quantity(e, range_entries or {}, k)
                    ok = ok and q_ok
                    if q is not None:
                        bounds[k] = q
                else:
                    with e.field(k):
                        _check_generic(e, x)
    if capacity is None or not ok:
        return
    if values and raw_range is not None:
        e.report(ONE_POLICY)
    elif values:
        if default is None:
            with e.field("default"):
                e.report(REQUIRED)
        else:
            with e.field("validValues"):
                _check_valid_values(e, values, default, capacity)
    elif range_entries is not None:
        if default is None:
            with e.field("default"):
                e.report(REQUIRED)
        else:
            with e.field("validRange"):
                _check_valid_range(e, bounds, default, capacity)


def _check_valid_values(e: _Errors, values: list[int], default: int, capacity: int) -> None:
    for i in range(1, len(values)):
        if values[i - 1] > values[i]:
            with e.at(i):
                e.report(NOT_SORTED)
    if not _check_max(e, values, MAX_VALID_VALUES, "values"):
        e.report(DEFAULT_NOT_VALID)
        return
    seen: set[int] = set()
    for i, value in enumerate(values):
        with e.at(i):
            if value > capacity:
                e.report(OVER_CAPACITY)
            if value in seen:
                e.report(DUPLICATE)
            seen.add(value)
    if default not in seen:
        e.report(DEFAULT_NOT_VALID)


def _is_whole(nano: int, unit: int = NANO) -> bool:
    return nano % unit == 0


def _check_valid_range(e: _Errors, bounds: dict[str, int], default: int, capacity: int) -> None:
    """The server's range rules: bounds within the capacity, the default within the bounds,
    and with a step, the default and max on the grid of min + k * step, computed in whole
    units (or in thousandths when anything is fractional) that must fit in 64 bits."""
    low = bounds.get("min")
    if low is None:
        with e.field("min"):
            e.report(REQUIRED)
        return
    high, step = bounds.get("max"), bounds.get("step")
    if low > capacity:
        with e.field("min"):
            e.report(OVER_CAPACITY)
    if default < low:
        with e.field("default"):
            e.report(DEFAULT_OUT_OF_RANGE)
    if high is not None:
        if low > high:
            with e.field("max"):
                e.report(MIN_OVER_MAX)
        if high > capacity:
            with e.field("max"):
                e.report(OVER_CAPACITY)
        if default > high:
            with e.field("default"):
                e.report(DEFAULT_OUT_OF_RANGE)
    checked = {"default": default, **bounds}
    milli = not all(_is_whole(q) for q in checked.values())
    if milli:
        milli_unit = NANO // 1000
        unsafe = [
            k
            for k, q in checked.items()
            if not _is_whole(q, milli_unit) or abs(q) // milli_unit >= _INT64
        ]
        for k in ("default", "min", "max", "step"):
            if k in unsafe:
                with e.field(k):
                    e.report(NOT_MILLI)
        if unsafe:
            return
    if step is None:
        return
    if step <= 0:
        with e.field("step"):
            e.report(NOT_POSITIVE)
        return
    if low + step > capacity:
        with e.field("step"):
            e.report(OVER_CAPACITY)
    if not milli:
        out_of_range = False
        for k in ("default", "min", "max", "step"):
            q = checked.get(k)
            if q is not None and (q < 0 or q // NANO >= _INT64):
                with e.field(k):
                    e.report(NEGATIVE if q < 0 else OVER_INT64)
                out_of_range = True
        if out_of_range:
            return
    with e.field("step"):
        for value in (default, high):
            if value is not None and (value - low) % step != 0:
                e.report(OFF_STEP)


def _check_named(e: _Errors, v: Node, valid: Callable[[str], bool], problem: str) -> str | None:
    s = _check_str(e, v)
    if s is not None and not valid(s):
        e.report(problem)
    return s


def _check_required_named(
    e: _Errors, entries: dict[str, Node], key: str, valid: Callable[[str], bool], problem: str
) -> str | None:
    """A string member the server requires: absent or empty is "required"."""
    with e.field(key):
        raw = entries.get(key)
        if raw is None or raw == "":
            e.report(REQUIRED)
            return None
        return _check_named(e, raw, valid, problem)


def _check_taint(e: _Errors, v: Node) -> None:
    entries = _check_dict(e, v)
    if entries is None:
        return
    if entries.get("key") is None:
        with e.field("key"):
            e.report(REQUIRED)
    if entries.get("effect") in (None, ""):
        with e.field("effect"):
            e.report(REQUIRED)
    _check_members(
        e,
        entries,
        {
            "key": lambda e, x: _check_named(e, x, is_label_name, BAD_LABEL_NAME),
            "value": lambda e, x: _check_named(e, x, _is_label_value, BAD_LABEL_VALUE),
            "effect": lambda e, x: _check_named(
                e, x, lambda s: s == "" or s in TAINT_EFFECTS, BAD_EFFECT
            ),
            "timeAdded": lambda e, x: _check_named(
                e, x, lambda s: canonical.normalise_time(s) is not None, BAD_TIME
            ),
        },
    )


def _check_counters(e: _Errors, v: Node) -> list[str]:
    """``{name: {"value": quantity}}``: 1 to 32 DNS labels; the names."""
    entries = _check_dict(e, v)
    if entries is None:
        return []
    if not entries:
        e.report(REQUIRED)
    _check_max(e, entries, MAX_COUNTERS, "counters")
    for name, counter in entries.items():
        with e.key(name):
            if not is_dns_label(name):
                e.report(BAD_DNS_LABEL)
            c = _check_dict(e, counter)
            if c is not None:
                _quantities(e, c, ("value",))
                for k, x in c.items():
                    if k != "value" and x is not None:
                        with e.field(k):
                            _check_generic(e, x)
    return list(entries)


def _check_unique_names(
    e: _Errors, v: Node, valid: Callable[[str], bool], problem: str, limit: int | None, what: str
) -> list[str]:
    """A list of names, each valid and unique, at most ``limit``; the strings among them."""
    items = _check_list(e, v)
    if items is None:
        return []
    if limit is not None:
        _check_max(e, items, limit, what)
    names: list[str] = []
    for i, x in enumerate(items):
        with e.at(i):
            s = _check_named(e, x, valid, problem)
            if s is not None:
                if s in names:
                    e.report(DUPLICATE)
                names.append(s)
    return names


def _check_binding_conditions(e: _Errors, entries: dict[str, Node]) -> None:
    found: dict[str, list[str]] = {}
    for k in ("bindingConditions", "bindingFailureConditions"):
        raw = entries.get(k)
        if raw is not None:
            with e.field(k):
                found[k] = _check_unique_names(
                    e, raw, is_label_name, BAD_LABEL_NAME, MAX_BINDING_CONDITIONS, "conditions"
                )
                if k == "bindingFailureConditions":
                    for i, s in enumerate(found[k]):
                        if s in found.get("bindingConditions", ()):
                            with e.at(i):
                                e.report(CONDITION_OVERLAP)
    for k, other in (
        ("bindingConditions", "bindingFailureConditions"),
        ("bindingFailureConditions", "bindingConditions"),
    ):
        if _list_len(entries.get(other)) and not _list_len(entries.get(k)):
            with e.field(k):
                e.report(CONDITIONS_NEED_BOTH)


def _list_len(v: Node) -> int:
    return len(v) if isinstance(v, list) else 0


def _check_node_selector(e: _Errors, v: Node, one_term: bool) -> None:
    """A node selector as the server checks it (core/v1 ``ValidateNodeSelector``); a slice's
    own selector has exactly one term."""
    entries = _check_dict(e, v)
    if entries is None:
        return
    with e.field("nodeSelectorTerms"):
        raw = entries.get("nodeSelectorTerms")
        terms = [] if raw is None else _check_list(e, raw)
        if terms == []:
            e.report(TERMS_REQUIRED)
        if terms is not None and one_term and len(terms) != 1:
            e.report(ONE_TERM)
        for i, term in enumerate(terms or ()):
            with e.at(i):
                t = _check_dict(e, term)
                if t is not None:
                    _check_members(
                        e,
                        t,
                        {
                            "matchExpressions": lambda e, x: _each(e, x, _check_expression),
                            "matchFields": lambda e, x: _each(e, x, _check_field_expression),
                        },
                    )
    for k, x in entries.items():
        if k != "nodeSelectorTerms" and x is not None:
            with e.field(k):
                _check_generic(e, x)


def _each(e: _Errors, v: Node, check: Callable[[_Errors, Node], None]) -> None:
    for i, x in enumerate(_check_list(e, v) or ()):
        with e.at(i):
            check(e, x)


def _requirement(e: _Errors, v: Node) -> tuple[dict[str, Node], str | None, list[str]] | None:
    """A requirement's members, operator and values (the strings among them)."""
    entries = _check_dict(e, v)
    if entries is None:
        return None
    operator = None
    values: list[str] = []
    for k, x in entries.items():
        if x is None:
            continue
        with e.field(k):
            if k == "operator":
                operator = _check_str(e, x)
            elif k == "values":
                for i, item in enumerate(_check_list(e, x) or ()):
                    with e.at(i):
                        s = _check_str(e, item)
                        values.append(s if s is not None else "")
            elif k != "key":
                _check_generic(e, x)
    return entries, operator, values


def _requirement_key(entries: dict[str, Node]) -> Node:
    key = entries.get("key")
    return "" if key is None else key


def _check_expression(e: _Errors, v: Node) -> None:
    found = _requirement(e, v)
    if found is None:
        return
    entries, operator, values = found
    with e.field("key"):
        _check_named(e, _requirement_key(entries), is_label_name, BAD_LABEL_NAME)
    with e.field("values"):
        if operator in ("In", "NotIn"):
            if not values:
                e.report(VALUES_REQUIRED)
        elif operator in ("Exists", "DoesNotExist"):
            if values:
                e.report(VALUES_FORBIDDEN)
        elif operator in ("Gt", "Lt") and len(values) != 1:
            e.report(ONE_VALUE)
        for i, s in enumerate(values):
            if not _is_label_value(s):
                with e.at(i):
                    e.report(BAD_LABEL_VALUE)
    if operator not in ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"):
        with e.field("operator"):
            e.report(BAD_OPERATOR)


def _check_field_expression(e: _Errors, v: Node) -> None:
    found = _requirement(e, v)
    if found is None:
        return
    entries, operator, values = found
    if operator in ("In", "NotIn"):
        if len(values) != 1:
            with e.field("values"):
                e.report(ONE_VALUE)
    else:
        with e.field("operator"):
            e.report(BAD_FIELD_OPERATOR)
    with e.field("key"):
        key = _check_named(e, _requirement_key(entries), "metadata.name".__eq__, BAD_FIELD_KEY)
    if key == "metadata.name":
        with e.field("values"):
            for i, s in enumerate(values):
                if not is_dns_subdomain(s):
                    with e.at(i):
                        e.report(BAD_NODE_NAME)


def _check_node_name(e: _Errors, v: Node) -> None:
    s = _check_str(e, v)
    if s == "":
        e.report(REQUIRED)
    elif s is not None and not is_dns_subdomain(s):
        e.report(BAD_NODE_NAME)


def _check_allocatable(e: _Errors, v: Node, capacity: Node) -> None:
    """``nodeAllocatableResources``: node resources (cpu, memory, hugepages) that a device
    brings, mapped from one of its capacities or per device, and overheads."""
    entries = _check_dict(e, v)
    for name, item in (entries or {}).items():
        with e.key(name):
            if not _is_allocatable(name):
                e.report(BAD_ALLOCATABLE)
            resource = _check_dict(e, item)
            if resource is None:
                continue
            if resource.get("mapping") is None and resource.get("overhead") is None:
                e.report(MAPPING_OR_OVERHEAD)
            _check_members(
                e,
                resource,
                {
                    "mapping": lambda e, x: _check_mapping(e, x, capacity),
                    "overhead": _check_overhead,
                },
            )


def _check_mapping(e: _Errors, v: Node, capacity: Node) -> None:
    entries = _check_dict(e, v)
    if entries is None:
        return
    values, _ = _quantities(e, entries, ("capacityMultiplier", "deviceMultiplier"))
    key = entries.get("capacityKey")
    if key is not None:
        with e.field("capacityKey"):
            s = _check_str(e, key)
            if s == "":
                e.report(REQUIRED)
            elif s is not None and not (isinstance(capacity, dict) and s in capacity):
                e.report(UNKNOWN_CAPACITY)
        if entries.get("capacityMultiplier") is None:
            with e.field("capacityMultiplier"):
                e.report(REQUIRED)
    elif entries.get("capacityMultiplier") is not None:
        with e.field("capacityKey"):
            e.report(REQUIRED)
    for k, q in values.items():
        if q <= 0:
            with e.field(k):
                e.report(NOT_POSITIVE)
    if (key is None) == (entries.get("deviceMultiplier") is None):
        e.report(KEY_OR_MULTIPLIER)
    for k, x in entries.items():
        if k not in ("capacityKey", "capacityMultiplier", "deviceMultiplier") and x is not None:
            with e.field(k):
                _check_generic(e, x)


def _check_overhead(e: _Errors, v: Node) -> None:
    entries = _check_dict(e, v)
    if entries is None:
        return
    values, _ = _quantities(e, entries, ("perContainer", "perPod"))
    if entries.get("perPod") is None and entries.get("perContainer") is None:
        e.report(PER_POD_OR_CONTAINER)
    for k, q in values.items():
        if q < 0:
            with e.field(k):
                e.report(NEGATIVE)
    for k, x in entries.items():
        if k not in ("perContainer", "perPod") and x is not None:
            with e.field(k):
                _check_generic(e, x)


#: The counter sets a pool shares: name -> counter names.
CounterSets = dict[str, set[str]]

_NODE_FIELDS = ("allNodes", "nodeName", "nodeSelector")


def _check_per_device(e: _Errors, entries: dict[str, Node], per_device: bool) -> None:
    """A device's own node selection, only in a slice with perDeviceNodeSelection."""
    present = [k for k in _NODE_FIELDS if entries.get(k) is not None]
    if not per_device:
        if present:
            e.report(PER_DEVICE_ONLY)
        return
    chosen = 0
    for k in present:
        with e.field(k):
            raw = entries[k]
            if k == "nodeName":
                _check_node_name(e, raw)
                chosen += raw != ""
            elif k == "nodeSelector":
                _check_node_selector(e, raw, one_term=False)
                chosen += 1
            elif _check_bool(e, raw) is False:
                e.report(ONLY_TRUE)
            else:
                chosen += 1
    if chosen != 1:
        e.report(PER_DEVICE_REQUIRED)


def _check_device(e: _Errors, v: Node, per_device: bool, counter_sets: CounterSets) -> bool:
    """Checks one device; true when it uses advanced features."""
    entries = _check_dict(e, v)
    if entries is None:
        return False
    if entries.get("name") is None:
        with e.field("name"):
            e.report(REQUIRED)
    ids = sum(len(x) for k in ("attributes", "capacity") if isinstance(x := entries.get(k), dict))
    if ids > MAX_ATTRIBUTES_AND_CAPACITIES:
        e.report(too_many_ids(ids))
    attributes = entries.get("attributes")
    if isinstance(attributes, dict):
        values = sum(_attribute_values(a) for a in attributes.values())
        if values > MAX_ATTRIBUTE_VALUES:
            e.report(too_many_values(values))
    _check_per_device(e, entries, per_device)
    multiple = entries.get("allowMultipleAllocations") is True
    advanced = False
    for k, item in entries.items():
        if item is None or k in _NODE_FIELDS:
            continue
        with e.field(k):
            if k == "name":
                _check_named(e, item, is_dns_label, BAD_DNS_LABEL)
            elif k in ("attributes", "capacity"):
                members = _check_dict(e, item)
                for name, x in (members or {}).items():
                    with e.key(name):
                        for problem in _qualified_name_problems(name):
                            e.report(problem)
                        if k == "attributes":
                            advanced |= _check_attribute(e, x)
                        else:
                            _check_capacity(e, x, multiple)
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
                continue
            elif k == "nodeAllocatableResources":
                _check_allocatable(e, item, entries.get("capacity"))
            elif k in ("bindsToNode", "allowMultipleAllocations"):
                _check_bool(e, item)
            else:
                _check_generic(e, item)
    _check_binding_conditions(e, entries)
    return advanced


def _check_consumption(e: _Errors, v: Node, sets: CounterSets, seen: set[str]) -> None:
    entries = _check_dict(e, v)
    if entries is None:
        return
    set_name = _check_required_named(e, entries, "counterSet", is_dns_label, BAD_DNS_LABEL)
    if set_name is not None:
        if set_name in seen:
            e.report(duplicate_counter_set(set_name))
        seen.add(set_name)
        if set_name not in sets:
            with e.field("counterSet"):
                e.report(unknown_counter_set(set_name))
    if entries.get("counters") is None:
        with e.field("counters"):
            e.report(REQUIRED)
    for k, item in entries.items():
        if k == "counterSet" or item is None:
            continue
        with e.field(k):
            if k == "compatibilityGroups":
                _check_unique_names(
                    e, item, is_dns_label, BAD_DNS_LABEL, MAX_COMPATIBILITY_GROUPS, "groups"
                )
                continue
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
    # Shared with the informer's records of the same text (docs/core.md §6).
    text = sys.intern(canonical.to_json(value))
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
) -> tuple[list[DeviceEntry], bool]:
    """The devices of one list (a flat pool or one slice), names unique across ``names``,
    and whether any of them uses advanced features."""
    items = _check_list(e, v)
    out: list[DeviceEntry] = []
    any_advanced = False
    for i, item in enumerate(items or ()):
        with e.at(i):
            before = len(e.list)
            advanced = _check_device(e, item, per_device, counter_sets)
            any_advanced |= advanced
            name = item.get("name") if isinstance(item, dict) else None
            if isinstance(name, str):
                if name in names:
                    e.report(duplicate_device(name))
                names.add(name)
            if len(e.list) == before:
                entry = _device_entry(e, item, advanced, max_slice_bytes)
                if entry is not None:
                    out.append(entry)
    return out, any_advanced


@dataclass(frozen=True)
class SliceSpec:
    """An explicit slice."""

    devices: list[DeviceEntry]
    shared_counters: Any
    per_device_node_selection: bool
    partition_type_attribute: str | None
    skip_node_operations: list[str] | None


@dataclass(frozen=True)
class DesiredPool:
    #: A flat list (packed) or explicit slices.
    devices: list[DeviceEntry] | None
    slices: list[SliceSpec] | None
    node_selector: Any
    all_nodes: bool
    generation: int
    #: At most this many devices in each packed slice (a flat pool's ``maxDevicesPerSlice``).
    max_devices_per_slice: int = MAX_DEVICES

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
            set_name = _check_required_named(e, entries, "name", is_dns_label, BAD_DNS_LABEL)
            if set_name is not None:
                if set_name in set_names:
                    e.report(duplicate_counter_set_name(set_name))
                set_names.add(set_name)
            with e.field("counters"):
                raw_counters = _get(entries, "counters")
                if raw_counters is None:
                    e.report(REQUIRED)
                else:
                    _check_counters(e, raw_counters)
            for k, x in entries.items():
                if k not in ("name", "counters") and x is not None:
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


def _check_partition_type(e: _Errors, v: Node, driver: str, devices: Node) -> str | None:
    """``partitionTypeAttribute``: a fully qualified attribute name that every device of the
    slice which consumes counters has as a string (an attribute in the driver's own domain
    may also be written bare)."""
    with e.field("partitionTypeAttribute"):
        name = _check_str(e, v)
        if name is None:
            return None
        problems = _qualified_name_problems(name, lower_case=True)
        if "/" not in name:
            problems.append(NOT_FULLY_QUALIFIED)
        for problem in problems:
            e.report(problem)
        consumers = [
            (i, d)
            for i, d in enumerate(devices if isinstance(devices, list) else ())
            if isinstance(d, dict) and _list_len(d.get("consumesCounters"))
        ]
        if not consumers:
            e.report(PARTITION_NEEDS_COUNTERS)
        # Only a name no device could carry spares the devices (the server checks them
        # for a domain in upper case too).
        if not consumers or "/" not in name or _qualified_name_problems(name):
            return name
    bare = name[len(driver) + 1 :] if name.startswith(driver + "/") else ""
    for i, device in consumers:
        attributes = device.get("attributes")
        attributes = attributes if isinstance(attributes, dict) else {}
        attribute = attributes.get(name)
        if attribute is None and bare:
            attribute = attributes.get(bare)
        if not (isinstance(attribute, dict) and attribute.get("string") is not None):
            with e.field("devices"), e.at(i), e.field("attributes"), e.key(name):
                e.report(PARTITION_ATTRIBUTE)
    return name


def _check_skip_node_operations(e: _Errors, v: Node) -> list[str] | None:
    with e.field("skipNodeOperations"):
        ops = _check_unique_names(e, v, SKIP_NODE_OPERATIONS.__contains__, BAD_SKIP, None, "")
        if "NodePrepareResources" in ops and not {"NodeUnprepareResources", "*"} & set(ops):
            e.report(PREPARE_WITHOUT_UNPREPARE)
    return ops


class _Selection:
    """The node selection a pool gives each of its slices: a Node owner's name, a node
    selector, all nodes. The API wants exactly one per slice (perDeviceNodeSelection being
    the fourth choice)."""

    def __init__(self, e: _Errors, entries: dict[str, Node]) -> None:
        self.count = 0
        self.node_selector: Any = None
        raw_name = entries.get("nodeName")
        if raw_name is not None:
            with e.field("nodeName"):
                _check_node_name(e, raw_name)
            self.count += raw_name != ""
        self.all_nodes = _optional_bool(e, entries, "allNodes")
        self.count += self.all_nodes
        raw_selector = entries.get("nodeSelector")
        if raw_selector is not None:
            self.count += 1
            with e.field("nodeSelector"):
                before = len(e.list)
                _check_node_selector(e, raw_selector, one_term=True)
                if len(e.list) == before:
                    self.node_selector = canonical.prune(to_value(raw_selector))

    def check(self, e: _Errors, per_device: bool) -> None:
        count = self.count + per_device
        if count == 0:
            e.report(NODE_SELECTION_REQUIRED)
        elif count > 1:
            e.report(NODE_SELECTION_CONFLICT)


def _check_slices(
    e: _Errors,
    v: Node,
    driver: str,
    selection: _Selection,
    names: set[str],
    max_slice_bytes: int,
) -> list[SliceSpec]:
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
            selection.check(e, per_device)
            if isinstance(devices, list) and devices and isinstance(shared, list) and shared:
                e.report(DEVICES_AND_COUNTERS)
            shared_value = None
            if shared is not None:
                with e.field("sharedCounters"):
                    shared_value = _check_shared_counters(e, shared, set_names)
            slice_devices: list[DeviceEntry] = []
            advanced = False
            if devices is not None:
                with e.field("devices"):
                    slice_devices, advanced = _check_devices(
                        e, devices, per_device, pool_sets, names, max_slice_bytes
                    )
            limit = MAX_DEVICES_ADVANCED if advanced else MAX_DEVICES
            if isinstance(devices, list) and len(devices) > limit:
                with e.field("devices"):
                    e.report(too_many_slice_devices(limit, len(devices)))
            raw_partition = entries.get("partitionTypeAttribute")
            partition = None
            if raw_partition is not None:
                partition = _check_partition_type(e, raw_partition, driver, devices)
            raw_skip = entries.get("skipNodeOperations")
            skip = None
            if raw_skip is not None:
                skip = _check_skip_node_operations(e, raw_skip) or None
            out.append(SliceSpec(slice_devices, shared_value, per_device, partition, skip))
    return out


def _check_pool(
    e: _Errors, driver: str, name: str, v: Node, max_slice_bytes: int
) -> DesiredPool | None:
    if not is_pool_name(name):
        e.report(BAD_POOL_NAME)
    entries = _check_dict(e, v)
    if entries is None:
        return None
    devices = _get(entries, "devices")
    slices = _get(entries, "slices")
    if (devices is None) == (slices is None):
        e.report(DEVICES_OR_SLICES)
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
    max_devices_per_slice = MAX_DEVICES
    raw_max_devices = _get(entries, "maxDevicesPerSlice")
    if raw_max_devices is not None:
        with e.field("maxDevicesPerSlice"):
            checked = _check_int(e, raw_max_devices)
            if checked is not None:
                if slices is not None:
                    e.report(PACKED_ONLY)
                if 1 <= checked <= MAX_DEVICES:
                    max_devices_per_slice = checked
                else:
                    e.report(BAD_DEVICES_PER_SLICE)
    selection = _Selection(e, entries)
    names: set[str] = set()
    flat: list[DeviceEntry] | None = None
    explicit: list[SliceSpec] | None = None
    if slices is not None and devices is None:
        with e.field("slices"):
            explicit = _check_slices(e, slices, driver, selection, names, max_slice_bytes)
    else:
        selection.check(e, False)
        if devices is not None:
            with e.field("devices"):
                flat, _ = _check_devices(e, devices, False, {}, names, max_slice_bytes)
        else:
            flat = []
    return DesiredPool(
        flat,
        explicit,
        selection.node_selector,
        selection.all_nodes,
        generation,
        max_devices_per_slice,
    )


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
        if checked_driver is not None and not is_driver_name(checked_driver):
            e.report(BAD_DRIVER)
    out: dict[str, DesiredPool] = {}
    for name, pool in sorted((_entry(k, v) for k, v in pools.items()), key=lambda kv: kv[0]):
        with e.field("pools"), e.key(name):
            checked = _check_pool(e, checked_driver or "", name, pool, max_slice_bytes)
        if checked is not None:
            out[name] = checked
    if checked_driver is None or e.list:
        return None, e.list
    return DesiredState(checked_driver, out, max_slice_bytes), []
