"""The check of a pool and of the whole desired state, and their messages.

A pool is a flat device list or explicit slices. The loop over a pool's slices is here, not
in ``slice``: it checks each slice's devices (``device``), and a device's check uses
``slice``'s node selection, so ``slice`` stands below ``device`` and this module above both.

``prepare``, the entry point (``_pycore.prepare_desired``), makes the ``model``'s
``DesiredState``. It is here, not in the package's ``__init__``, because it uses every other
module of checks, and they all use ``__init__``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from resourceslice._names import BAD_DRIVER, BAD_POOL_NAME, is_driver_name, is_pool_name
from resourceslice._pycore import canonical
from resourceslice._pycore.model import (
    MAX_DEVICES,
    MAX_DEVICES_ADVANCED,
    DesiredPool,
    DesiredState,
    DeviceEntry,
    SliceSpec,
)
from resourceslice._pycore.validate import (
    NEGATIVE,
    Errors,
    Node,
    check_bool,
    check_dict,
    check_int,
    check_list,
    check_str,
    get_member,
    node_entry,
    to_node,
    to_value,
)
from resourceslice._pycore.validate.device import check_devices
from resourceslice._pycore.validate.slice import (
    check_carried,
    check_node_name,
    check_node_selector,
    check_shared_counters,
    pool_counter_sets,
)

DEVICES_OR_SLICES = "exactly one of devices and slices is required"
BAD_DEVICES_PER_SLICE = "must be from 1 to 128"
PACKED_ONLY = "only a flat devices list is packed: not allowed with slices"
DEVICES_AND_COUNTERS = "a slice has devices or sharedCounters, not both"
NODE_SELECTION_REQUIRED = (
    "no node selection: a Node owner, nodeSelector, allNodes, or slices with "
    "perDeviceNodeSelection is required"
)
NODE_SELECTION_CONFLICT = (
    "at most one of a Node owner, nodeSelector, allNodes and perDeviceNodeSelection"
)


def optional_bool(e: Errors, entries: dict[str, Node], key: str) -> bool:
    raw = get_member(entries, key)
    if raw is None:
        return False
    with e.field(key):
        return bool(check_bool(e, raw))


class Selection:
    """The node selection a pool gives each of its slices: a Node owner's name, a node
    selector, all nodes. The API wants exactly one per slice (perDeviceNodeSelection being
    the fourth choice)."""

    def __init__(self, e: Errors, entries: dict[str, Node]) -> None:
        self.count = 0
        self.node_selector: Any = None
        raw_name = entries.get("nodeName")
        if raw_name is not None:
            with e.field("nodeName"):
                check_node_name(e, raw_name)
            self.count += raw_name != ""
        self.all_nodes = optional_bool(e, entries, "allNodes")
        self.count += self.all_nodes
        raw_selector = entries.get("nodeSelector")
        if raw_selector is not None:
            self.count += 1
            with e.field("nodeSelector"):
                before = len(e.list)
                check_node_selector(e, raw_selector, one_term=True)
                if len(e.list) == before:
                    self.node_selector = canonical.prune(to_value(raw_selector))

    def check(self, e: Errors, per_device: bool) -> None:
        count = self.count + per_device
        if count == 0:
            e.report(NODE_SELECTION_REQUIRED)
        elif count > 1:
            e.report(NODE_SELECTION_CONFLICT)


def too_many_slice_devices(limit: int, got: int) -> str:
    return f"at most {limit} devices in a slice, got {got}"


def _check_slices(
    e: Errors,
    v: Node,
    driver: str,
    selection: Selection,
    names: set[str],
    max_slice_bytes: int,
) -> list[SliceSpec]:
    items = check_list(e, v)
    pool_sets = pool_counter_sets(items or [])
    # Counter set names are unique in the whole pool.
    set_names: set[str] = set()
    out: list[SliceSpec] = []
    for i, item in enumerate(items or ()):
        with e.at(i):
            entries = check_dict(e, item)
            if entries is None:
                continue
            devices = get_member(entries, "devices")
            shared = get_member(entries, "sharedCounters")
            per_device = optional_bool(e, entries, "perDeviceNodeSelection")
            selection.check(e, per_device)
            if isinstance(devices, list) and devices and isinstance(shared, list) and shared:
                e.report(DEVICES_AND_COUNTERS)
            shared_value = None
            if shared is not None:
                with e.field("sharedCounters"):
                    shared_value = check_shared_counters(e, shared, set_names)
            slice_devices: list[DeviceEntry] = []
            advanced = False
            if devices is not None:
                with e.field("devices"):
                    slice_devices, advanced = check_devices(
                        e, devices, per_device, pool_sets, names, max_slice_bytes
                    )
            limit = MAX_DEVICES_ADVANCED if advanced else MAX_DEVICES
            if isinstance(devices, list) and len(devices) > limit:
                with e.field("devices"):
                    e.report(too_many_slice_devices(limit, len(devices)))
            carried = check_carried(e, entries, driver, devices)
            out.append(SliceSpec(slice_devices, shared_value, per_device, carried))
    return out


def _check_pool(
    e: Errors, driver: str, name: str, v: Node, max_slice_bytes: int
) -> DesiredPool | None:
    if not is_pool_name(name):
        e.report(BAD_POOL_NAME)
    entries = check_dict(e, v)
    if entries is None:
        return None
    devices = get_member(entries, "devices")
    slices = get_member(entries, "slices")
    if (devices is None) == (slices is None):
        e.report(DEVICES_OR_SLICES)
    generation = 0
    raw_generation = get_member(entries, "generation")
    if raw_generation is not None:
        with e.field("generation"):
            checked = check_int(e, raw_generation)
            if checked is None:
                return None
            if checked < 0:
                e.report(NEGATIVE)
            generation = checked
    max_devices_per_slice = MAX_DEVICES
    raw_max_devices = get_member(entries, "maxDevicesPerSlice")
    if raw_max_devices is not None:
        with e.field("maxDevicesPerSlice"):
            checked = check_int(e, raw_max_devices)
            if checked is not None:
                if slices is not None:
                    e.report(PACKED_ONLY)
                if 1 <= checked <= MAX_DEVICES:
                    max_devices_per_slice = checked
                else:
                    e.report(BAD_DEVICES_PER_SLICE)
    selection = Selection(e, entries)
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
                flat, _ = check_devices(e, devices, False, {}, names, max_slice_bytes)
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


def prepare(
    driver: Any, pools: Mapping[Any, Any], max_slice_bytes: int
) -> tuple[DesiredState | None, list[str]]:
    """Validates and canonicalises; the errors in traversal order when anything is wrong."""
    e = Errors()
    checked_driver: str | None
    with e.field("driver"):
        checked_driver = check_str(e, to_node(driver))
        if checked_driver is not None and not is_driver_name(checked_driver):
            e.report(BAD_DRIVER)
    out: dict[str, DesiredPool] = {}
    for name, pool in sorted((node_entry(k, v) for k, v in pools.items()), key=lambda kv: kv[0]):
        with e.field("pools"), e.key(name):
            checked = _check_pool(e, checked_driver or "", name, pool, max_slice_bytes)
        if checked is not None:
            out[name] = checked
    if checked_driver is None or e.list:
        return None, e.list
    return DesiredState(checked_driver, out, max_slice_bytes), []
