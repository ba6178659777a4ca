"""Device-level edits of a flat pool (docs/core.md §8): devices upserted and removed by name,
without the whole desired state being read and validated again."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from resourceslice._pycore import canonical
from resourceslice._pycore.model import DesiredState, DeviceEntry


def _flat(state: DesiredState, pool: str) -> list[DeviceEntry] | None:
    """The flat device list of ``pool`` in ``state`` ([] without the pool); None for slices."""
    wanted = state.pools.get(pool)
    if wanted is None:
        return []
    return wanted.devices if wanted.slices is None else None


def with_devices(
    state: DesiredState, pool: str, batch: DesiredState, removed: Sequence[str]
) -> tuple[DesiredState | None, list[str]]:
    """``state`` with ``pool``'s devices named in ``batch`` (a desired state validated with the
    pool's node selection, holding only the upserted devices in ``pool``) replaced in place or
    appended in batch order, and those named in ``removed`` left out (unknown names are no
    error: a removal is idempotent). Other pools are shared, not copied."""
    wanted = state.pools.get(pool)
    if wanted is None:
        return None, [f"pools[{canonical.quote(pool)}]: not desired"]
    current, upserts = _flat(state, pool), _flat(batch, pool)
    if current is None or upserts is None:
        return None, [
            f"pools[{canonical.quote(pool)}]: given as slices; devices are upserted and "
            "removed by name only in a pool given as devices"
        ]
    by_name = {d.name: d for d in upserts}
    gone = set(removed)
    both = sorted(gone & by_name.keys())
    if both:
        return None, [f"remove[{canonical.quote(n)}]: also upserted" for n in both]
    devices = [by_name.pop(d.name, d) for d in current if d.name not in gone]
    devices += by_name.values()
    pools = {**state.pools, pool: dataclasses.replace(wanted, devices=devices)}
    return DesiredState(state.driver, pools, state.max_slice_bytes), []
