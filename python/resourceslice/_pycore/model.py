"""The validated desired state (what ``validate`` builds and ``plan`` and ``edit`` read), and
the limits of a slice that more than one stage applies.

Below both stages: it imports nothing of the core, so a stage reads the model without
depending on another stage.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: Per-object overhead the packer reserves for metadata and the header (docs/core.md §4).
SLICE_OVERHEAD = 4096
MAX_DEVICES = 128
MAX_DEVICES_ADVANCED = 64


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


@dataclass(frozen=True)
class SliceSpec:
    """An explicit slice."""

    devices: list[DeviceEntry]
    shared_counters: Any
    per_device_node_selection: bool
    #: The values of ``_fields.CARRIED``, by its index, checked.
    carried: tuple[Any, ...]


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


@dataclass(frozen=True)
class DesiredState:
    driver: str
    pools: dict[str, DesiredPool]
    max_slice_bytes: int
