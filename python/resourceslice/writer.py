"""The writes of a plan: sends them, and keeps what they left behind.

A plan says what to delete, update and create; sending it is where the cluster answers back:
a slice already gone, a name taken by another writer (409), a slice another client changed
since our last write, fields the apiserver did not store. This remembers our own last write
of each slice, to tell our writes from someone else's, and which pools lost fields, so that
a sync does not rewrite what the server will drop again.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from resourceslice.api import ConflictingWriterError, DroppedFieldsError, SliceExistsError
from resourceslice.connection import ApiError
from resourceslice.mutation_cache import MutationCache, not_older
from resourceslice.store import SliceStore

if TYPE_CHECKING:
    from resourceslice import _core as core
    from resourceslice._apiversion import ResourceSliceAPI
    from resourceslice._core import Plan, SliceRecord
else:
    from resourceslice._backend import core


#: An error for the error handler, and its message.
_Report = tuple[BaseException, str]


@dataclass
class _DroppedFields:
    """A pool whose writes lost fields, for one desired version.

    ``written``: slice name -> resourceVersion of our own last write. A plan that would only
    rewrite those very objects again is skipped: the server would drop the same fields again.
    """

    version: int
    written: dict[str, str] = field(default_factory=dict)


class WriteHost(Protocol):
    """What the writer asks of the sync it writes for (resourceslice._sync.PoolSync)."""

    def may_write(self, pool: str) -> bool:
        """Waits for a write token; whether to write at all (not once stopped, nor without
        the Lease)."""
        ...

    def count(self, kind: str) -> None:
        """A write made: ``kind`` is "creates", "updates" or "deletes"."""
        ...

    def report(self, exc: BaseException, message: str) -> None:
        """An error, for the error handler."""
        ...

    def answered(self) -> None:
        """The server answered a write."""
        ...

    def in_view(self, record: SliceRecord) -> bool:
        """Whether the informer would show ``record`` (one found by a failed create)."""
        ...

    def helpers(self) -> Executor:
        """The executor that sends one pool's updates beside the calling thread."""
        ...

    def as_pool(self, pool: str) -> None:
        """Called on a helper's thread before it writes for ``pool`` (the sync's per-thread
        state: the Lease budget of the pool's shard)."""
        ...


class SliceWriter:
    """Sends the writes of pool plans through ``slices``, and records their results; what
    it needs beyond them it asks ``host``.

    ``concurrency``: how many of one pool's writes may be in flight at once, for a plan whose
    writes are all in-place updates under the kept generation (:func:`independent_updates`),
    sent by the calling thread and ``host.helpers()``. Any other plan is written one write
    after another, in the plan's order.
    """

    def __init__(
        self,
        slices: ResourceSliceAPI,
        store: SliceStore,
        mutations: MutationCache,
        host: WriteHost,
        *,
        concurrency: int = 1,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, not {concurrency}")
        self._concurrency = concurrency
        self._host = host
        self._slices = slices
        self._store = store
        self._mutations = mutations
        self._lock = threading.Lock()
        self._dropped: dict[str, _DroppedFields] = {}
        # Slice name -> resourceVersion of this controller's last write of it: a slice
        # found at another version was changed by someone else (see ConflictingWriterError).
        # An entry goes when we delete the slice, or the watch shows it deleted while its
        # pool is no longer desired.
        self._own_versions: dict[str, str] = {}

    # -- what our writes left ---------------------------------------------------------------

    def dropped_at(self, pool: str, version: int) -> dict[str, str] | None:
        """Our last writes of ``pool`` (slice name -> resourceVersion) if the apiserver
        dropped fields of them for desired ``version``; else None."""
        with self._lock:
            dropped = self._dropped.get(pool)
        return dropped.written if dropped is not None and dropped.version == version else None

    def forget_dropped(self, pools: Iterable[str]) -> None:
        """``pools`` have a new desired state: what the server dropped before may now fit."""
        with self._lock:
            for pool in pools:
                self._dropped.pop(pool, None)

    def forget_deleted(self, record: SliceRecord) -> None:
        """The watch saw ``record`` deleted, of a pool no longer desired: we will not write it
        again (a desired pool's slice keeps its entry, so that another writer recreating it is
        still reported)."""
        with self._lock:
            own = self._own_versions.get(record.name)
            if own is not None and not_older(record.resource_version, own):
                del self._own_versions[record.name]

    def forget_own_writes(self, covers: Callable[[str], bool] | None) -> None:
        """This replica took the Lease (of the pools ``covers`` selects): what the other
        leaders wrote meanwhile are not conflicts."""
        with self._lock:
            for name in list(self._own_versions):
                record = self._store.get(name)
                if covers is None or record is None or covers(record.pool):
                    del self._own_versions[name]

    def adopt_foreign_edit(self, old: SliceRecord, new: SliceRecord) -> None:
        """Another client changed only what is not ours in a slice we wrote last (a label,
        an annotation, a finalizer, another ownerReference): the new version counts as our
        write. So our next write of it is not reported as a ConflictingWriterError, and a
        slice the server stored without some fields is still not rewritten (_DroppedFields)."""
        with self._lock:
            ours = self._own_versions.get(new.name) == old.resource_version
            dropped = self._dropped.get(new.pool)
            if dropped is not None and dropped.written.get(new.name) != old.resource_version:
                dropped = None
            if not (ours or dropped is not None) or not old.same_content(new):
                return
            if ours:
                self._own_versions[new.name] = new.resource_version
            if dropped is not None:
                dropped.written[new.name] = new.resource_version

    # -- the writes ---------------------------------------------------------------------------

    def report_overwrites(self, pool: str, plan: Plan, existing: list[SliceRecord]) -> None:
        versions = {record.name: record.resource_version for record in existing}
        with self._lock:
            overwritten = [
                name
                for name in plan.writes
                if name in versions
                and self._own_versions.get(name, versions[name]) != versions[name]
            ]
        for name in overwritten:
            self._host.report(
                ConflictingWriterError(pool, name), f"updating ResourceSlice {name!r} of {pool!r}"
            )

    def delete(self, pool: str, deletes: list[tuple[str, str, str]]) -> None:
        for name, uid, resource_version in deletes:
            if not self._host.may_write(pool):
                return
            left: SliceRecord | None = None
            try:
                response = self._slices.delete(name, uid, resource_version)
            except ApiError as exc:
                if exc.status != 404:  # already gone is what we wanted
                    raise
            else:
                self._host.count("deletes")
                left = _still_there(response)
            with self._lock:
                self._own_versions.pop(name, None)
            if left is not None:
                # A finalizer holds it: it stays, being deleted, until its holder lets go;
                # syncs see it so and leave it alone (nor delete it again).
                self._mutations.stored(left)
            else:
                self._mutations.deleted(pool, name, uid)

    def write(self, pool: str, plan: Plan, version: int, concurrent: bool = False) -> None:
        """The updates and creates of ``plan``'s window, for desired ``version`` of ``pool``.

        ``concurrent``: the plan's writes are independent in-place updates (see
        :func:`independent_updates`), sent up to ``concurrency`` at a time; else one after
        another, updates before creates.
        """
        if concurrent and self._concurrency > 1 and len(plan.updates) > 1 and not plan.creates:
            self._update_concurrently(pool, plan.updates, version)
            return
        for name, body in plan.updates:
            if not self._host.may_write(pool):
                return
            self._report_all([self._update(pool, name, body, version)])
        taken: list[str] = []
        for body in plan.creates:
            if not self._host.may_write(pool):
                return
            sent = core.decode_slice(body)
            try:
                response = self._slices.create(body)
            except ApiError as exc:
                # The name is ours, so it exists because another writer (or our own create,
                # whose response was lost) made it: compare with it once the watch has it.
                if exc.status != 409:
                    raise
                self._host.answered()
                taken.append(sent.name)
                self._read_taken(sent.name)
                continue
            self._host.count("creates")
            self._report_all([self._stored(pool, version, sent, core.decode_slice(response))])
        if taken:
            raise SliceExistsError(pool, taken)

    def _update(self, pool: str, name: str, body: bytes, version: int) -> _Report | None:
        response = self._slices.update(name, body)
        self._host.count("updates")
        return self._stored(pool, version, core.decode_slice(body), core.decode_slice(response))

    def _report_all(self, reports: Iterable[_Report | None]) -> None:
        for report in reports:
            if report is not None:
                self._host.report(*report)

    def _update_concurrently(
        self, pool: str, updates: list[tuple[str, bytes]], version: int
    ) -> None:
        """Sends ``updates`` with up to ``concurrency`` in flight: the calling thread and
        helpers each take the next one until none is left. Each waits for its write token
        (so the controller's write rate still bounds them all). On the first failure no
        further update starts; those in flight are waited for, then that failure is raised.
        Stopped (or the Lease lost) between two writes, the rest are not sent, as in order.
        What the server dropped is reported on this thread once all are over: the error
        handler may call stop(), which waits for the sync's thread, which waits for these.
        """
        lock = threading.Lock()
        pending: Iterator[tuple[str, bytes]] = iter(updates)
        failures: list[BaseException] = []
        reports: list[_Report | None] = []
        ended = threading.Event()  # stopped, the Lease lost, or a write failed

        def take() -> tuple[str, bytes] | None:
            with lock:
                return None if ended.is_set() else next(pending, None)

        def send(helper: bool) -> None:
            if helper:
                self._host.as_pool(pool)
            while (item := take()) is not None:
                try:
                    if not self._host.may_write(pool):
                        ended.set()
                        return
                    report = self._update(pool, item[0], item[1], version)
                    with lock:
                        reports.append(report)
                except BaseException as exc:
                    with lock:
                        failures.append(exc)
                    ended.set()
                    return

        helpers = self._host.helpers()
        futures: list[Future[None]] = [
            helpers.submit(send, True) for _ in range(min(self._concurrency, len(updates)) - 1)
        ]
        send(False)
        for future in futures:
            # One that has not started (the helpers busy with other pools' writes) is not
            # waited for: nothing is left for it to take.
            if not future.cancel():
                future.result()
        self._report_all(reports)
        if failures:
            raise failures[0]

    def _read_taken(self, name: str) -> None:
        """A create found ``name`` taken: read it, so that the next sync sees it.

        After a reconnect the informer can be seconds behind; until it catches up, every
        sync would create the slice again and get 409 again. Held like a write's response,
        if the informer would show it: a slice outside its view (another node's) is not ours
        to take over, and stays reported.
        """
        try:
            record = core.decode_slice(self._slices.get(name))
        except ApiError as exc:
            if exc.status != 404:  # deleted meanwhile: the next sync creates it
                raise
            return
        if self._host.in_view(record):
            self._mutations.stored(record)

    def _stored(
        self, pool: str, version: int, sent: SliceRecord, actual: SliceRecord
    ) -> _Report | None:
        """Takes in the server's answer to a write; what to report when it dropped fields
        (reported by the caller: on the sync's own thread, see _update_concurrently)."""
        self._host.answered()  # the server is up: an informer waiting to relist need not
        self._mutations.stored(actual)
        with self._lock:
            dropped = self._dropped.get(pool)
            if dropped is not None and dropped.version != version:
                dropped = None
            paths, features = sent.dropped_fields(actual)
            if paths and dropped is None:
                dropped = self._dropped[pool] = _DroppedFields(version)
            # The watch may have delivered a later edit of only what is not ours before this
            # answer came: adopt_foreign_edit did not know our version then, so adopt it here.
            # Under the lock: an event the store takes in after this look is adopted there.
            own = actual.resource_version
            current = self._store.get(actual.name)
            if (
                current is not None
                and current.uid == actual.uid
                and not_older(current.resource_version, own)
                and actual.same_content(current)
            ):
                own = current.resource_version
            if dropped is not None:
                dropped.written[actual.name] = own
            self._own_versions[actual.name] = own
        if not paths:
            return None
        return (
            DroppedFieldsError(pool, actual.name, _slice_index(actual.name), paths, features),
            f"publishing ResourceSlice {actual.name!r} of pool {pool!r}",
        )


def independent_updates(plan: Plan, existing: list[SliceRecord]) -> bool:
    """Whether ``plan``'s writes are in-place updates that keep the generation, which may
    land in any order (docs/core.md §5, "Why isolated updates keep the generation").

    That is: the plan keeps the highest generation stored, and every slice it writes is
    stored now under that generation (no create, no rewrite of an obsolete slice). The core
    keeps the generation with more than one such update only when they are isolated (no
    device moves, no header changes); with one, its order is moot. Deletes (of slices of
    older generations or other names, which no consumer reads beside the newest) go first,
    one after another, as in any plan.
    """
    if len(plan.writes) < 2 or not existing:
        return False
    if plan.generation != max(record.generation for record in existing):
        return False
    current = {
        record.name
        for record in existing
        if record.generation == plan.generation and not record.deleting
    }
    return all(name in current for name in plan.writes)


def rewrites_only(plan: Plan, existing: list[SliceRecord], written: dict[str, str]) -> bool:
    """Whether ``plan`` would just rewrite slices exactly as our own last writes left them."""
    if plan.deletes or not plan.writes:
        return False
    versions = {record.name: record.resource_version for record in existing}
    return all(name in versions and written.get(name) == versions[name] for name in plan.writes)


def _still_there(response: bytes) -> SliceRecord | None:
    """The record of a DELETE's response if the object stays, being deleted (finalizers)."""
    try:
        record = core.decode_slice(response)
    except ValueError:  # a Status, not the object: it is gone
        return None
    return record if record.deleting else None


def _slice_index(name: str) -> int:
    """The index of one of our slices: its name starts with it in hex (docs/core.md §5)."""
    return int(name[: len(name) - len(name.lstrip("0123456789abcdef"))], 16)
