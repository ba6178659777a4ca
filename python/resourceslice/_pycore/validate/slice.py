"""The checks of what a slice says besides its devices: a node selector and a node name
(which the pool's selection, in ``pool``, and a device's own with perDeviceNodeSelection
use), counters and the counter sets a slice shares, partitionTypeAttribute,
skipNodeOperations; and their messages.

Below ``device``: a device's check applies the per-device node selection and the counters
of the sets it consumes from. The loop over a pool's slices, which checks their devices too,
and the pool's node selection are ``pool``'s, as in the Rust core.
"""

from __future__ import annotations

from typing import Any, Callable

from resourceslice._fields import CARRIED
from resourceslice._names import (
    BAD_DNS_LABEL,
    BAD_LABEL_NAME,
    BAD_LABEL_VALUE,
    is_dns_label,
    is_dns_subdomain,
    is_label_name,
    is_label_value,
)
from resourceslice._pycore import canonical
from resourceslice._pycore.validate import (
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
    get_member,
    is_clean,
    list_len,
    to_value,
)
from resourceslice._pycore.validate.scalars import (
    check_named,
    check_required_named,
    check_unique_names,
    qualified_name_problems,
    quantities,
)

MAX_COUNTERS = 32
MAX_COUNTER_SETS = 8
SKIP_NODE_OPERATIONS = ("NodePrepareResources", "NodeUnprepareResources", "*")
NOT_FULLY_QUALIFIED = "must be <domain>/<name>"
BAD_NODE_NAME = "must be a DNS subdomain"
PER_DEVICE_REQUIRED = (
    "exactly one of nodeName, nodeSelector, allNodes is required with perDeviceNodeSelection"
)
PER_DEVICE_ONLY = (
    "nodeName, nodeSelector and allNodes are only allowed in a slice with perDeviceNodeSelection"
)
ONLY_TRUE = "must be true or unset"
ONE_TERM = "must have exactly one node selector term"
TERMS_REQUIRED = "at least one node selector term is required"
BAD_OPERATOR = "must be one of In, NotIn, Exists, DoesNotExist, Gt, Lt"
BAD_FIELD_OPERATOR = "must be In or NotIn"
BAD_FIELD_KEY = "must be metadata.name"
VALUES_REQUIRED = "values are required with In and NotIn"
VALUES_FORBIDDEN = "values are not allowed with Exists and DoesNotExist"
ONE_VALUE = "exactly one value is required"
PARTITION_NEEDS_COUNTERS = "only allowed in a slice with devices that consume counters"
PARTITION_ATTRIBUTE = "must be a string attribute: the slice's partitionTypeAttribute"
PREPARE_WITHOUT_UNPREPARE = "NodePrepareResources needs NodeUnprepareResources or *"
BAD_SKIP = "must be one of NodePrepareResources, NodeUnprepareResources, *"


def duplicate_counter_set_name(name: str) -> str:
    return f"duplicate counter set name {canonical.quote(name)}"


#: The counter sets a pool shares: name -> counter names.
CounterSets = dict[str, set[str]]


def check_counters(e: Errors, v: Node) -> list[str]:
    """``{name: {"value": quantity}}``: 1 to 32 DNS labels; the names."""
    entries = check_dict(e, v)
    if entries is None:
        return []
    if not entries:
        e.report(REQUIRED)
    check_max(e, entries, MAX_COUNTERS, "counters")
    for name, counter in entries.items():
        with e.key(name):
            if not is_dns_label(name):
                e.report(BAD_DNS_LABEL)
            c = check_dict(e, counter)
            if c is not None:
                quantities(e, c, ("value",))
                for k, x in c.items():
                    if k != "value" and x is not None:
                        with e.field(k):
                            check_generic(e, x)
    return list(entries)


def check_node_selector(e: Errors, v: Node, one_term: bool) -> None:
    """A node selector as the server checks it (core/v1 ``ValidateNodeSelector``); a slice's
    own selector has exactly one term."""
    entries = check_dict(e, v)
    if entries is None:
        return
    with e.field("nodeSelectorTerms"):
        raw = entries.get("nodeSelectorTerms")
        terms = [] if raw is None else check_list(e, raw)
        if terms == []:
            e.report(TERMS_REQUIRED)
        if terms is not None and one_term and len(terms) != 1:
            e.report(ONE_TERM)
        for i, term in enumerate(terms or ()):
            with e.at(i):
                t = check_dict(e, term)
                if t is not None:
                    check_members(
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
                check_generic(e, x)


def _each(e: Errors, v: Node, check: Callable[[Errors, Node], None]) -> None:
    for i, x in enumerate(check_list(e, v) or ()):
        with e.at(i):
            check(e, x)


def _requirement(e: Errors, v: Node) -> tuple[dict[str, Node], str | None, list[str]] | None:
    """A requirement's members, operator and values (the strings among them)."""
    entries = check_dict(e, v)
    if entries is None:
        return None
    operator = None
    values: list[str] = []
    for k, x in entries.items():
        if x is None:
            continue
        with e.field(k):
            if k == "operator":
                operator = check_str(e, x)
            elif k == "values":
                for i, item in enumerate(check_list(e, x) or ()):
                    with e.at(i):
                        s = check_str(e, item)
                        values.append(s if s is not None else "")
            elif k != "key":
                check_generic(e, x)
    return entries, operator, values


def _requirement_key(entries: dict[str, Node]) -> Node:
    key = entries.get("key")
    return "" if key is None else key


def _check_expression(e: Errors, v: Node) -> None:
    found = _requirement(e, v)
    if found is None:
        return
    entries, operator, values = found
    with e.field("key"):
        check_named(e, _requirement_key(entries), is_label_name, BAD_LABEL_NAME)
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
            if not is_label_value(s):
                with e.at(i):
                    e.report(BAD_LABEL_VALUE)
    if operator not in ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"):
        with e.field("operator"):
            e.report(BAD_OPERATOR)


def _check_field_expression(e: Errors, v: Node) -> None:
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
        key = check_named(e, _requirement_key(entries), "metadata.name".__eq__, BAD_FIELD_KEY)
    if key == "metadata.name":
        with e.field("values"):
            for i, s in enumerate(values):
                if not is_dns_subdomain(s):
                    with e.at(i):
                        e.report(BAD_NODE_NAME)


def check_node_name(e: Errors, v: Node) -> None:
    s = check_str(e, v)
    if s == "":
        e.report(REQUIRED)
    elif s is not None and not is_dns_subdomain(s):
        e.report(BAD_NODE_NAME)


NODE_FIELDS = ("allNodes", "nodeName", "nodeSelector")


def check_per_device(e: Errors, entries: dict[str, Node], per_device: bool) -> None:
    """A device's own node selection, only in a slice with perDeviceNodeSelection."""
    present = [k for k in NODE_FIELDS if entries.get(k) is not None]
    if not per_device:
        if present:
            e.report(PER_DEVICE_ONLY)
        return
    chosen = 0
    for k in present:
        with e.field(k):
            raw = entries[k]
            if k == "nodeName":
                check_node_name(e, raw)
                chosen += raw != ""
            elif k == "nodeSelector":
                check_node_selector(e, raw, one_term=False)
                chosen += 1
            elif check_bool(e, raw) is False:
                e.report(ONLY_TRUE)
            else:
                chosen += 1
    if chosen != 1:
        e.report(PER_DEVICE_REQUIRED)


def check_shared_counters(e: Errors, v: Node, set_names: set[str]) -> Any:
    counter_sets = check_list(e, v)
    if counter_sets is None:
        return None
    check_max(e, counter_sets, MAX_COUNTER_SETS, "counter sets")
    for j, counter_set in enumerate(counter_sets):
        with e.at(j):
            entries = check_dict(e, counter_set)
            if entries is None:
                continue
            set_name = check_required_named(e, entries, "name", is_dns_label, BAD_DNS_LABEL)
            if set_name is not None:
                if set_name in set_names:
                    e.report(duplicate_counter_set_name(set_name))
                set_names.add(set_name)
            with e.field("counters"):
                raw_counters = get_member(entries, "counters")
                if raw_counters is None:
                    e.report(REQUIRED)
                else:
                    check_counters(e, raw_counters)
            for k, x in entries.items():
                if k not in ("name", "counters") and x is not None:
                    with e.field(k):
                        check_generic(e, x)
    if not is_clean(v):
        return None
    value = canonical.prune(to_value(v))
    for counter_set in value or ():
        canonical.counters_quantities(counter_set, canonical.canonical_quantity)
    return value


def pool_counter_sets(slices: list[Node]) -> CounterSets:
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


def check_partition_type(e: Errors, v: Node, driver: str, devices: Node) -> str | None:
    """``partitionTypeAttribute``: a fully qualified attribute name that every device of the
    slice which consumes counters has as a string (an attribute in the driver's own domain
    may also be written bare)."""
    with e.field("partitionTypeAttribute"):
        name = check_str(e, v)
        if name is None:
            return None
        problems = qualified_name_problems(name, lower_case=True)
        if "/" not in name:
            problems.append(NOT_FULLY_QUALIFIED)
        for problem in problems:
            e.report(problem)
        consumers = [
            (i, d)
            for i, d in enumerate(devices if isinstance(devices, list) else ())
            if isinstance(d, dict) and list_len(d.get("consumesCounters"))
        ]
        if not consumers:
            e.report(PARTITION_NEEDS_COUNTERS)
        # Only a name no device could carry spares the devices (the server checks them
        # for a domain in upper case too).
        if not consumers or "/" not in name or qualified_name_problems(name):
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


def check_skip_node_operations(e: Errors, v: Node) -> list[str] | None:
    with e.field("skipNodeOperations"):
        ops = check_unique_names(e, v, SKIP_NODE_OPERATIONS.__contains__, BAD_SKIP, None, "")
        if "NodePrepareResources" in ops and not {"NodeUnprepareResources", "*"} & set(ops):
            e.report(PREPARE_WITHOUT_UNPREPARE)
    return ops


#: The checkers the table's ``check`` column names (``_fields.py``): a carried slice
#: field's value, given the driver and the slice's devices.
_CHECKERS: dict[str, Callable[[Errors, Node, str, Node], Any]] = {
    "partition-type": check_partition_type,
    "node-operations": lambda e, v, driver, devices: check_skip_node_operations(e, v) or None,
}


def check_carried(
    e: Errors, entries: dict[str, Node], driver: str, devices: Node
) -> tuple[Any, ...]:
    """The carried fields of a slice (``_fields.CARRIED``, by its index), each checked by its
    checker."""
    out = []
    for f in CARRIED:
        v = entries.get(f.name)
        out.append(None if v is None else _CHECKERS[f.check](e, v, driver, devices))
    return tuple(out)
