"""Stable packing of a flat device list into slices (docs/core.md §4).

Devices stay where they are; only new or evicted devices move, into the lowest slice with
room. That keeps one changed device one update call, however large the pool.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

from resourceslice._pycore.model import MAX_DEVICES_ADVANCED, SLICE_OVERHEAD


class Item(NamedTuple):
    """What the limits need to know of a device."""

    size: int
    advanced: bool


class Limits(NamedTuple):
    """What one slice may hold: the byte budget, and the device count (the pool's
    ``maxDevicesPerSlice``, else the API's maximum), lowered to the API's limit for slices
    with taints, counters or list attributes."""

    max_bytes: int
    max_devices: int

    def devices(self, advanced: bool) -> int:
        return min(self.max_devices, MAX_DEVICES_ADVANCED) if advanced else self.max_devices


class _Bin:
    __slots__ = ("advanced", "bytes", "devices")

    def __init__(self) -> None:
        self.devices: list[int] = []
        self.bytes = 0
        self.advanced = 0

    def fits(self, item: Item, limits: Limits) -> bool:
        return (
            len(self.devices) < limits.devices(bool(self.advanced) or item.advanced)
            and SLICE_OVERHEAD + self.bytes + item.size < limits.max_bytes
        )

    def breaks_limits(self, limits: Limits) -> bool:
        return (
            len(self.devices) > limits.devices(bool(self.advanced))
            or SLICE_OVERHEAD + self.bytes > limits.max_bytes
        )

    def push(self, index: int, item: Item) -> None:
        self.devices.append(index)
        self.bytes += item.size + 1
        self.advanced += item.advanced

    def pop(self, items: Sequence[Item]) -> int:
        index = self.devices.pop()
        self.bytes -= items[index].size + 1
        self.advanced -= items[index].advanced
        return index


def _place(bins: list[_Bin], items: Sequence[Item], order: Iterable[int], limits: Limits) -> None:
    """Places ``order`` into ``bins``: each device into the lowest bin it fits, else a new one."""
    # Bins below ``full`` hold the maximum count and can never take another device.
    full = 0
    for index in order:
        while full < len(bins) and len(bins[full].devices) >= limits.max_devices:
            full += 1
        item = items[index]
        for b in bins[full:]:
            if b.fits(item, limits):
                b.push(index, item)
                break
        else:
            fresh = _Bin()
            fresh.push(index, item)
            bins.append(fresh)


def pack(
    items: Sequence[Item], current: Sequence[Sequence[int]], limits: Limits
) -> list[list[int]]:
    """Packs ``items`` (desired order) given ``current``: per slice index, the desired devices it
    holds now, in stored order. Returns device indices per slice, slice ``i`` at position ``i``."""
    kept = [False] * len(items)
    evicted: list[int] = []
    bins: list[_Bin] = []
    for held in current:
        b = _Bin()
        for index in held:
            if not kept[index]:
                kept[index] = True
                b.push(index, items[index])
        while b.breaks_limits(limits):
            index = b.pop(items)
            kept[index] = False
            evicted.append(index)
        bins.append(b)
    was_evicted = set(evicted)
    order = [i for i in range(len(items)) if not kept[i] and i not in was_evicted]
    order += [i for i in evicted if not kept[i]]
    _place(bins, items, order, limits)
    fresh: list[_Bin] = []
    _place(fresh, items, range(len(items)), limits)
    slack = max(1, len(fresh) // 10)
    # Empty slices at the end would only be deleted later; slice 0 always stays.
    while len(bins) > 1 and not bins[-1].devices:
        bins.pop()
    if len(bins) > len(fresh) + slack:
        bins = fresh
    return [b.devices for b in bins] or [[]]
