"""The controller's own recent writes, overlaid on the informer's records.

Why: the watch delivers a created or updated slice some time after the write returns. A
sync in between that trusted only the informer would see the slice missing (and create it
again) or stale (and hit a conflict). So for ``ttl`` seconds the response of each write
stands in for the informer's record, until the informer shows that version or a newer one.
Deletes likewise hide the deleted object. After the TTL the informer is trusted again (an
entry can outlive its object when someone else deleted it), which is why the controller
re-checks a pool once its entries expire.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from resourceslice.workqueue import Clock, MonotonicClock

if TYPE_CHECKING:
    from resourceslice._core import SliceRecord


def not_older(candidate: str, than: str) -> bool:
    """Whether resourceVersion ``candidate`` is at least as new as ``than``.

    resourceVersions are opaque by contract but etcd revisions (integers) in practice, and
    that is what client-go's mutation cache relies on too. Unparsable ones: trust the informer.
    """
    try:
        return int(candidate) >= int(than)
    except ValueError:
        return True


@dataclass(frozen=True)
class _Written:
    record: SliceRecord
    expires: float


@dataclass(frozen=True)
class _Deleted:
    pool: str
    uid: str
    expires: float


@dataclass(frozen=True)
class _Gone:
    """A delete the informer delivered: the object ``uid`` ended at ``resource_version``."""

    uid: str
    resource_version: str
    expires: float


class MutationCache:
    """``informer_record``: the informer's current record of a slice, by name."""

    def __init__(
        self,
        ttl: float,
        clock: Clock | None = None,
        informer_record: Callable[[str], SliceRecord | None] = lambda _: None,
    ) -> None:
        self._ttl = ttl
        self._clock: Clock = clock or MonotonicClock()
        self._informer_record = informer_record
        self._lock = threading.Lock()
        self._written: dict[str, _Written] = {}
        self._deleted: dict[str, _Deleted] = {}
        # Deletes the informer delivered, kept for ``ttl``: the response of a write can
        # arrive after the watch showed the object deleted (an update, then at once a delete
        # by someone else); caching it then would hide the delete until the entry expired
        # (upstream kubernetes#140011).
        self._gone: dict[str, _Gone] = {}

    @property
    def ttl(self) -> float:
        return self._ttl

    def stored(self, record: SliceRecord) -> None:
        """``record`` is what the apiserver returned for a create or update."""
        with self._lock:
            self._deleted.pop(record.name, None)
            # The watch can deliver a write before its response arrives; the informer then
            # already has it, and an entry would only hold a second copy until it expires.
            # Checked under the lock: an event delivered after this check is observed after it.
            seen = self._informer_record(record.name)
            if seen is not None and not_older(seen.resource_version, record.resource_version):
                self._written.pop(record.name, None)
                return
            gone = self._gone.get(record.name)
            if (
                seen is None
                and gone is not None
                and gone.uid == record.uid
                and not_older(gone.resource_version, record.resource_version)
            ):
                self._written.pop(record.name, None)
                return
            self._written[record.name] = _Written(record, self._clock.now() + self._ttl)

    def deleted(self, pool: str, name: str, uid: str) -> None:
        """Slice ``name`` (object ``uid``) of ``pool`` was deleted: hide it until it expires."""
        with self._lock:
            self._written.pop(name, None)
            self._deleted[name] = _Deleted(pool, uid, self._clock.now() + self._ttl)

    def observed(self, record: SliceRecord, *, deleted: bool = False) -> None:
        """The informer delivered ``record`` (or its deletion).

        An entry that version supersedes goes at once, not at the next merge: if the object
        is deleted before then, the store forgets it and the entry alone would still claim
        it exists, so a deleted slice would not be recreated until the TTL ran out.
        """
        with self._lock:
            written = self._written.get(record.name)
            if written is not None and not_older(
                record.resource_version, written.record.resource_version
            ):
                del self._written[record.name]
            tomb = self._deleted.get(record.name)
            if deleted and tomb is not None and tomb.uid == record.uid:
                del self._deleted[record.name]
            if deleted:
                self._gone[record.name] = _Gone(
                    record.uid, record.resource_version, self._clock.now() + self._ttl
                )
            else:
                self._gone.pop(record.name, None)

    def merge(self, pool: str, informer_records: Iterable[SliceRecord]) -> list[SliceRecord]:
        """The records of ``pool`` as the next sync must see them, sorted by name."""
        with self._lock:
            self._expire_locked()
            result: dict[str, SliceRecord] = {}
            hidden: set[str] = set()
            for record in informer_records:
                tomb = self._deleted.get(record.name)
                if tomb is not None and tomb.uid == record.uid:
                    hidden.add(record.name)
                    continue
                written = self._written.get(record.name)
                if written is not None:
                    if not_older(record.resource_version, written.record.resource_version):
                        del self._written[record.name]
                    else:
                        record = written.record
                result[record.name] = record
            # Deletes the informer has caught up with need no hiding any more.
            for name in [n for n, d in self._deleted.items() if d.pool == pool]:
                if name not in hidden:
                    del self._deleted[name]
            # Created slices the informer has not delivered yet.
            for name, written in self._written.items():
                if written.record.pool == pool and name not in result:
                    result[name] = written.record
            return [result[n] for n in sorted(result)]

    def expires_in(self, pool: str) -> float | None:
        """Seconds until the first of ``pool``'s entries expires; None when it has none.

        The informer has not confirmed those writes yet; when an entry expires, the pool must
        be synced again against what the informer says.
        """
        with self._lock:
            expiries = [w.expires for w in self._written.values() if w.record.pool == pool]
            expiries += [d.expires for d in self._deleted.values() if d.pool == pool]
            if not expiries:
                return None
            return max(0.0, min(expiries) - self._clock.now())

    def _expire_locked(self) -> None:
        now = self._clock.now()
        for name in [n for n, w in self._written.items() if w.expires <= now]:
            del self._written[name]
        for name in [n for n, d in self._deleted.items() if d.expires <= now]:
            del self._deleted[name]
        for name in [n for n, g in self._gone.items() if g.expires <= now]:
            del self._gone[name]

    def __len__(self) -> int:
        with self._lock:
            self._expire_locked()
            return len(self._written) + len(self._deleted)
