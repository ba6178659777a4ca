"""The checks of one device: attributes, capacities and their request policies, taints,
counter consumption, binding conditions, node allocatable resources; the device list of a
flat pool or of one slice, with each valid device's canonical JSON; and their messages.
"""

from __future__ import annotations

import sys

from resourceslice._names import (
    BAD_DNS_LABEL,
    BAD_LABEL_NAME,
    BAD_LABEL_VALUE,
    is_dns_label,
    is_label_name,
    is_label_value,
)
from resourceslice._pycore import canonical
from resourceslice._pycore.model import SLICE_OVERHEAD, DeviceEntry
from resourceslice._pycore.quantity import parse_quantity
from resourceslice._pycore.validate import (
    DUPLICATE,
    INT64,
    NEGATIVE,
    NOT_POSITIVE,
    REQUIRED,
    Errors,
    Node,
    check_bool,
    check_dict,
    check_generic,
    check_list,
    check_max,
    check_members,
    check_str,
    list_len,
    to_value,
)
from resourceslice._pycore.validate.scalars import (
    NANO,
    POLICY_LIMIT,
    check_named,
    check_quantity,
    check_required_named,
    check_scalar,
    check_unique_names,
    is_allocatable,
    qualified_name_problems,
    quantities,
)
from resourceslice._pycore.validate.slice import (
    NODE_FIELDS,
    CounterSets,
    check_counters,
    check_per_device,
)

MAX_ATTRIBUTES_AND_CAPACITIES = 32
MAX_ATTRIBUTE_VALUES = 48
MAX_TAINTS = 16
MAX_CONSUMES_COUNTERS = 2
MAX_BINDING_CONDITIONS = 4
MAX_COMPATIBILITY_GROUPS = 2
MAX_VALID_VALUES = 10
ATTRIBUTE_TYPES = ("bool", "bools", "int", "ints", "string", "strings", "version", "versions")
TAINT_EFFECTS = ("NoSchedule", "NoExecute", "None")
ATTRIBUTE_ONE_TYPE = (
    "must have exactly one of bool, int, string, version, bools, ints, strings, versions"
)
EMPTY_LIST = "must not be empty"
BAD_EFFECT = "must be one of NoSchedule, NoExecute, None"
BAD_TIME = "must be an RFC 3339 time"
DEVICE_TOO_LARGE = "device too large"
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


def _check_attribute(e: Errors, v: Node) -> bool:
    """Checks one attribute; true when it is a list attribute."""
    entries = check_dict(e, v)
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
                check_scalar(e, k, item)
            elif k in ("bools", "ints", "strings", "versions"):
                is_list = True
                items = check_list(e, item)
                if items == []:
                    e.report(EMPTY_LIST)
                for i, x in enumerate(items or ()):
                    with e.at(i):
                        check_scalar(e, k[:-1], x)
            else:
                check_generic(e, item)
    return is_list


def _check_capacity(e: Errors, v: Node, multiple: bool) -> None:
    entries = check_dict(e, v)
    if entries is None:
        return
    # A missing value is zero, as the server reads it.
    values, ok = quantities(e, entries, ("value",))
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
                check_generic(e, item)
            elif not multiple:
                e.report(POLICY_NEEDS_MULTIPLE)
                _check_request_policy(e, item, None)
            else:
                _check_request_policy(e, item, capacity if ok else None)


def _policy_quantity(e: Errors, entries: dict[str, Node], key: str) -> tuple[int | None, bool]:
    """A quantity member of a request policy: (its nano value or None when absent, ok)."""
    raw = entries.get(key)
    if raw is None:
        return None, True
    with e.field(key):
        return _policy_value(e, raw)


def _policy_value(e: Errors, raw: Node) -> tuple[int | None, bool]:
    q = check_quantity(e, raw)
    if q is not None and abs(q) >= POLICY_LIMIT:
        e.report(TOO_LARGE_FOR_POLICY)
        return None, False
    return q, q is not None


def _check_request_policy(e: Errors, v: Node, capacity: int | None) -> None:
    """A consumable capacity's policy; its rules need the capacity's value (None: only the
    formats are checked)."""
    entries = check_dict(e, v)
    if entries is None:
        return
    for k, x in entries.items():
        if k not in ("default", "validValues", "validRange") and x is not None:
            with e.field(k):
                check_generic(e, x)
    default, ok = _policy_quantity(e, entries, "default")
    values: list[int] = []
    raw_values = entries.get("validValues")
    if raw_values is not None:
        with e.field("validValues"):
            for i, x in enumerate(check_list(e, raw_values) or ()):
                with e.at(i):
                    q, q_ok = _policy_value(e, x)
                    ok = ok and q_ok
                    values.append(q or 0)
    bounds: dict[str, int] = {}
    raw_range = entries.get("validRange")
    range_entries = None
    if raw_range is not None:
        with e.field("validRange"):
            range_entries = check_dict(e, raw_range)
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
                        check_generic(e, x)
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


def _check_valid_values(e: Errors, values: list[int], default: int, capacity: int) -> None:
    for i in range(1, len(values)):
        if values[i - 1] > values[i]:
            with e.at(i):
                e.report(NOT_SORTED)
    if not check_max(e, values, MAX_VALID_VALUES, "values"):
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


def _check_valid_range(e: Errors, bounds: dict[str, int], default: int, capacity: int) -> None:
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
            if not _is_whole(q, milli_unit) or abs(q) // milli_unit >= INT64
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
            if q is not None and (q < 0 or q // NANO >= INT64):
                with e.field(k):
                    e.report(NEGATIVE if q < 0 else OVER_INT64)
                out_of_range = True
        if out_of_range:
            return
    with e.field("step"):
        for value in (default, high):
            if value is not None and (value - low) % step != 0:
                e.report(OFF_STEP)


def _check_taint(e: Errors, v: Node) -> None:
    entries = check_dict(e, v)
    if entries is None:
        return
    if entries.get("key") is None:
        with e.field("key"):
            e.report(REQUIRED)
    if entries.get("effect") in (None, ""):
        with e.field("effect"):
            e.report(REQUIRED)
    check_members(
        e,
        entries,
        {
            "key": lambda e, x: check_named(e, x, is_label_name, BAD_LABEL_NAME),
            "value": lambda e, x: check_named(e, x, is_label_value, BAD_LABEL_VALUE),
            "effect": lambda e, x: check_named(
                e, x, lambda s: s == "" or s in TAINT_EFFECTS, BAD_EFFECT
            ),
            "timeAdded": lambda e, x: check_named(
                e, x, lambda s: canonical.normalise_time(s) is not None, BAD_TIME
            ),
        },
    )


def _check_binding_conditions(e: Errors, entries: dict[str, Node]) -> None:
    found: dict[str, list[str]] = {}
    for k in ("bindingConditions", "bindingFailureConditions"):
        raw = entries.get(k)
        if raw is not None:
            with e.field(k):
                found[k] = check_unique_names(
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
        if list_len(entries.get(other)) and not list_len(entries.get(k)):
            with e.field(k):
                e.report(CONDITIONS_NEED_BOTH)


def _check_allocatable(e: Errors, v: Node, capacity: Node) -> None:
    """``nodeAllocatableResources``: node resources (cpu, memory, hugepages) that a device
    brings, mapped from one of its capacities or per device, and overheads."""
    entries = check_dict(e, v)
    for name, item in (entries or {}).items():
        with e.key(name):
            if not is_allocatable(name):
                e.report(BAD_ALLOCATABLE)
            resource = check_dict(e, item)
            if resource is None:
                continue
            if resource.get("mapping") is None and resource.get("overhead") is None:
                e.report(MAPPING_OR_OVERHEAD)
            check_members(
                e,
                resource,
                {
                    "mapping": lambda e, x: _check_mapping(e, x, capacity),
                    "overhead": _check_overhead,
                },
            )


def _check_mapping(e: Errors, v: Node, capacity: Node) -> None:
    entries = check_dict(e, v)
    if entries is None:
        return
    values, _ = quantities(e, entries, ("capacityMultiplier", "deviceMultiplier"))
    key = entries.get("capacityKey")
    if key is not None:
        with e.field("capacityKey"):
            s = check_str(e, key)
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
                check_generic(e, x)


def _check_overhead(e: Errors, v: Node) -> None:
    entries = check_dict(e, v)
    if entries is None:
        return
    values, _ = quantities(e, entries, ("perContainer", "perPod"))
    if entries.get("perPod") is None and entries.get("perContainer") is None:
        e.report(PER_POD_OR_CONTAINER)
    for k, q in values.items():
        if q < 0:
            with e.field(k):
                e.report(NEGATIVE)
    for k, x in entries.items():
        if k not in ("perContainer", "perPod") and x is not None:
            with e.field(k):
                check_generic(e, x)


def _check_device(e: Errors, v: Node, per_device: bool, counter_sets: CounterSets) -> bool:
    """Checks one device; true when it uses advanced features."""
    entries = check_dict(e, v)
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
    check_per_device(e, entries, per_device)
    multiple = entries.get("allowMultipleAllocations") is True
    advanced = False
    for k, item in entries.items():
        if item is None or k in NODE_FIELDS:
            continue
        with e.field(k):
            if k == "name":
                check_named(e, item, is_dns_label, BAD_DNS_LABEL)
            elif k in ("attributes", "capacity"):
                members = check_dict(e, item)
                for name, x in (members or {}).items():
                    with e.key(name):
                        for problem in qualified_name_problems(name):
                            e.report(problem)
                        if k == "attributes":
                            advanced |= _check_attribute(e, x)
                        else:
                            _check_capacity(e, x, multiple)
            elif k == "taints":
                taints = check_list(e, item)
                if taints is None:
                    continue
                advanced |= bool(taints)
                check_max(e, taints, MAX_TAINTS, "taints")
                for i, t in enumerate(taints):
                    with e.at(i):
                        _check_taint(e, t)
            elif k == "consumesCounters":
                consumptions = check_list(e, item)
                if consumptions is None:
                    continue
                advanced |= bool(consumptions)
                check_max(e, consumptions, MAX_CONSUMES_COUNTERS, "counter consumptions")
                seen: set[str] = set()
                for i, c in enumerate(consumptions):
                    with e.at(i):
                        _check_consumption(e, c, counter_sets, seen)
            elif k in ("bindingConditions", "bindingFailureConditions"):
                continue
            elif k == "nodeAllocatableResources":
                _check_allocatable(e, item, entries.get("capacity"))
            elif k in ("bindsToNode", "allowMultipleAllocations"):
                check_bool(e, item)
            else:
                check_generic(e, item)
    _check_binding_conditions(e, entries)
    return advanced


def _check_consumption(e: Errors, v: Node, sets: CounterSets, seen: set[str]) -> None:
    entries = check_dict(e, v)
    if entries is None:
        return
    set_name = check_required_named(e, entries, "counterSet", is_dns_label, BAD_DNS_LABEL)
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
                check_unique_names(
                    e, item, is_dns_label, BAD_DNS_LABEL, MAX_COMPATIBILITY_GROUPS, "groups"
                )
                continue
            if k != "counters":
                check_generic(e, item)
                continue
            names = check_counters(e, item)
            known = sets.get(set_name) if set_name is not None else None
            if known is None:
                continue
            for name in names:
                if name not in known:
                    with e.key(name):
                        e.report(unknown_counter(name))


def _canonical_quantity(text: str) -> str:
    q = parse_quantity(text)
    assert q is not None, "checked quantity"
    return q.canonical


def _device_entry(e: Errors, v: Node, advanced: bool, max_slice_bytes: int) -> DeviceEntry | None:
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


def check_devices(
    e: Errors,
    v: Node,
    per_device: bool,
    counter_sets: CounterSets,
    names: set[str],
    max_slice_bytes: int,
) -> tuple[list[DeviceEntry], bool]:
    """The devices of one list (a flat pool or one slice), names unique across ``names``,
    and whether any of them uses advanced features."""
    items = check_list(e, v)
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
