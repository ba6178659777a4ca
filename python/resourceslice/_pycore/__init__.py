"""The pure-Python core: same functions and results as the Rust ``_core`` (docs/core.md)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from resourceslice._pycore import edit as _edit
from resourceslice._pycore.decode import (
    SliceRecord,
    decode_list,
    decode_list_chunks,
    decode_slice,
    decode_watch_event,
)
from resourceslice._pycore.model import DesiredState
from resourceslice._pycore.plan import Plan
from resourceslice._pycore.plan.pool import plan_pool as _plan_pool
from resourceslice._pycore.validate.pool import prepare


class Desired:
    """A validated, canonical desired state: every pool of one driver. Immutable."""

    __slots__ = ("_state",)

    def __init__(self, state: DesiredState) -> None:
        self._state = state

    @property
    def driver(self) -> str:
        return self._state.driver

    def pool_names(self) -> list[str]:
        """The pools, sorted by name."""
        return sorted(self._state.pools)

    def device_count(self, pool: str) -> int:
        """Devices in ``pool`` (0 for an unknown pool)."""
        wanted = self._state.pools.get(pool)
        return 0 if wanted is None else wanted.device_count()

    def changed_pools(self, new: Desired) -> list[str]:
        """The pools whose desired content differs in ``new`` (or that only one of the two
        has), sorted: after an update, only those need a sync."""
        old_state, new_state = self._state, new._state
        every = (old_state.driver, old_state.max_slice_bytes) != (
            new_state.driver,
            new_state.max_slice_bytes,
        )
        return sorted(
            name
            for name in old_state.pools.keys() | new_state.pools.keys()
            if every or old_state.pools.get(name) != new_state.pools.get(name)
        )

    def with_devices(
        self, pool: str, batch: Desired, removed: Sequence[str]
    ) -> tuple[Desired | None, list[str]]:
        """This state with ``pool``'s devices upserted from ``batch`` (a desired state
        holding only them, in ``pool``) and those named in ``removed`` left out
        (docs/core.md §8); ``(None, errors)`` when ``pool`` is not a desired flat pool."""
        state, errors = _edit.with_devices(self._state, pool, batch._state, removed)
        return (Desired(state) if state is not None else None), errors


#: Nesting the API never needs (a node selector, the deepest part, is 5 levels). Deeper
#: input is not plain: the Python conversion refuses it with its path, before anything
#: recursive could exhaust the interpreter's recursion limit on it.
MAX_PLAIN_DEPTH = 32

_SCALAR_TYPES = frozenset({str, bool, int, float, type(None)})


def _is_plain(value: Any, depth: int) -> bool:
    kind = type(value)
    if kind in _SCALAR_TYPES:
        return True
    if depth >= MAX_PLAIN_DEPTH:
        return False
    if kind is dict:
        return all(type(k) is str and _is_plain(v, depth + 1) for k, v in value.items())
    if kind is list:
        return all(_is_plain(v, depth + 1) for v in value)
    return False


def non_plain(items: list[Any]) -> list[int]:
    """Positions of the items that are not JSON-shaped data of the exact built-in types
    (dicts with str keys, lists, str, int, float, bool, None) within ``MAX_PLAIN_DEPTH``."""
    return [i for i, item in enumerate(items) if not _is_plain(item, 0)]


def prepare_desired(
    driver: str,
    pools: Mapping[str, Mapping[str, Any]],
    max_slice_bytes: int,
    plain_only: bool = False,
) -> tuple[Desired | None, list[str] | None]:
    """Validate and canonicalise; ``(desired, [])`` or ``(None, ["path: problem", ...])``;
    ``(None, None)`` with ``plain_only`` when ``driver`` or ``pools`` hold anything that is
    not plain (``non_plain``'s rule, a pool counting as depth 0)."""
    if plain_only and not (
        _is_plain(driver, 0)
        and all(type(name) is str and _is_plain(pool, 0) for name, pool in pools.items())
    ):
        return None, None
    state, errors = prepare(driver, pools, max_slice_bytes)
    return (Desired(state) if state is not None else None), errors


def plan_pool(
    desired: Desired | None,
    pool: str,
    existing: Sequence[SliceRecord],
    owner: tuple[str, str, str, str] | None,
    node_name: str | None,
    first_write: int = 0,
    max_body_bytes: int | None = None,
) -> Plan:
    """The writes that make ``pool`` equal to ``desired`` (docs/core.md §5)."""
    return _plan_pool(
        desired._state if desired is not None else None,
        pool,
        list(existing),
        owner,
        node_name,
        first_write,
        max_body_bytes,
    )


__all__ = [
    "MAX_PLAIN_DEPTH",
    "Desired",
    "Plan",
    "SliceRecord",
    "decode_list",
    "decode_list_chunks",
    "decode_slice",
    "decode_watch_event",
    "non_plain",
    "plan_pool",
    "prepare_desired",
]
