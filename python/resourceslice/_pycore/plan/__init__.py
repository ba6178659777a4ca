"""One pool's plan (docs/core.md §5): its result, ``Plan``, and the names of a pool's slices,
which the planner and the tests share.

``pool.plan_pool`` makes the plan, ``pack`` lays out a flat pool's devices. This package
has no memo of earlier plans (the Rust core's ``replan``): every plan is made from scratch.
"""

from __future__ import annotations

import re

#: ``(api_version, kind, name, uid)`` of the slices' owner.
OwnerRef = tuple[str, str, str, str]

#: Slice names are cut to 63 characters (a DNS label's length, so they also fit in label
#: values): the readable prefix to this many, then the hash.
NAME_PREFIX_MAX = 53
NAME_HASH_LEN = 10
_HEX_PREFIX = re.compile(r"[0-9a-f]{1,8}(?![0-9a-f])")
_BASE36 = "0123456789abcdefghijklmnopqrstuvwxyz"
_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3
_U64 = (1 << 64) - 1


class Plan:
    """The writes that make one pool's slices equal to the desired state."""

    __slots__ = (
        "compared",
        "creates",
        "deletes",
        "device_count",
        "generation",
        "next_write",
        "slice_count",
        "updates",
        "waiting",
        "writes",
    )

    def __init__(
        self,
        generation: int = 0,
        slice_count: int = 0,
        device_count: int = 0,
        deletes: list[tuple[str, str, str]] | None = None,
        writes: list[str] | None = None,
        next_write: int = 0,
        updates: list[tuple[str, bytes]] | None = None,
        creates: list[bytes] | None = None,
        waiting: list[str] | None = None,
        compared: int = 0,
    ) -> None:
        self.generation = generation
        self.slice_count = slice_count
        self.device_count = device_count
        self.deletes = deletes or []
        self.writes = writes or []
        self.next_write = next_write
        self.updates = updates or []
        self.creates = creates or []
        self.waiting = waiting or []
        #: Slices compared with their records: all of them here, where every plan is made
        #: from scratch (the Rust core carries comparisons over, docs/core.md §5).
        self.compared = compared


def slice_name(index: int, driver: str, owner: OwnerRef | None, pool: str) -> str:
    """The name of desired slice ``index`` of ``pool``.

    Deterministic, not generateName: a create is then idempotent, so a retried create whose
    first response was lost, or a second controller running by mistake, gets 409 instead of
    publishing every device twice. The hash tells pools of one driver and owner apart.
    """
    owner_name = owner[2] if owner else ""
    prefix = f"{index:05x}-{driver}-" + (f"{owner_name}-" if owner else "")
    h = _FNV_OFFSET
    for byte in f"{driver}\0{owner_name}\0{pool}\0{index}".encode():
        h = ((h ^ byte) * _FNV_PRIME) & _U64
    digits = []
    for _ in range(NAME_HASH_LEN):
        h, digit = divmod(h, 36)
        digits.append(_BASE36[digit])
    return prefix[:NAME_PREFIX_MAX] + "".join(digits)


def index_of(name: str, driver: str, owner: OwnerRef | None, pool: str) -> int | None:
    """The desired slice index ``name`` is the name of, if any."""
    hex_digits = _HEX_PREFIX.match(name)
    if hex_digits is None:
        return None
    index = int(hex_digits.group(), 16)
    return index if name == slice_name(index, driver, owner, pool) else None
