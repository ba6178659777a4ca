"""The informer's view of the cluster: slice records by name, indexed by pool name."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from resourceslice._core import SliceRecord

    #: ``(old, new)``: an add is ``(None, new)``, a delete ``(old, None)``.
    Change = tuple[Optional[SliceRecord], Optional[SliceRecord]]


class SliceStore:
    """Thread-safe; records are immutable, so callers get them without copying."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._slices: dict[str, SliceRecord] = {}
        self._names_by_pool: dict[str, set[str]] = {}

    def _put_locked(self, record: SliceRecord) -> SliceRecord | None:
        old = self._slices.get(record.name)
        if old is not None and old.pool != record.pool:
            self._unindex_locked(old)
        self._slices[record.name] = record
        self._names_by_pool.setdefault(record.pool, set()).add(record.name)
        return old

    def _unindex_locked(self, record: SliceRecord) -> None:
        names = self._names_by_pool.get(record.pool)
        if names is not None:
            names.discard(record.name)
            if not names:
                del self._names_by_pool[record.pool]

    def upsert(self, record: SliceRecord) -> SliceRecord | None:
        """Store ``record``; the record it replaced, if any."""
        with self._lock:
            return self._put_locked(record)

    def delete(self, name: str) -> SliceRecord | None:
        """Forget slice ``name``; the record it had, if any."""
        with self._lock:
            old = self._slices.pop(name, None)
            if old is not None:
                self._unindex_locked(old)
            return old

    def replace(self, records: Iterable[SliceRecord]) -> list[Change]:
        """Make the store hold exactly ``records`` (a relist); the changes that makes.

        Slices that vanished between two lists show up as deletes, so a watch gap never
        leaves a stale record behind. Records with an unchanged resourceVersion are no change.
        """
        with self._lock:
            changes: list[Change] = []
            seen: set[str] = set()
            for record in records:
                seen.add(record.name)
                old = self._slices.get(record.name)
                if old is not None and old.resource_version == record.resource_version:
                    continue
                self._put_locked(record)
                changes.append((old, record))
            for name in [n for n in self._slices if n not in seen]:
                old = self._slices.pop(name)
                self._unindex_locked(old)
                changes.append((old, None))
            return changes

    def get(self, name: str) -> SliceRecord | None:
        with self._lock:
            return self._slices.get(name)

    def by_pool(self, pool: str) -> list[SliceRecord]:
        """The pool's records, sorted by name."""
        with self._lock:
            return [self._slices[n] for n in sorted(self._names_by_pool.get(pool, ()))]

    def pool_names(self) -> set[str]:
        with self._lock:
            return set(self._names_by_pool)

    def __len__(self) -> int:
        with self._lock:
            return len(self._slices)
