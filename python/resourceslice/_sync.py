"""A pool's sync: plans its writes with the core, sends them, and keeps what they left.

The controller decides what is desired and when a pool is synced; this does the syncing. It
owns what a sync reads and writes of the cluster: the writer, the mutation cache over the
informer's store, the client-side write limit, the helpers that send one pool's updates at
once, the quiet time a 429 asked for. What it needs of the controller goes through
:class:`SyncHost`, one object.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol

from resourceslice._http import node_uid, retry_after
from resourceslice._observer import ObservedSliceAPI, Observer
from resourceslice._plain import owner_ref
from resourceslice.api import Owner, SliceExistsError
from resourceslice.leaderelection import LeaderElector, NotLeaderError
from resourceslice.mutation_cache import MutationCache
from resourceslice.sharding import ShardedElector
from resourceslice.store import SliceStore
from resourceslice.workqueue import Clock, TokenBucket, WorkQueue
from resourceslice.writer import SliceWriter, independent_updates, rewrites_only

if TYPE_CHECKING:
    from resourceslice import _core as core
    from resourceslice._core import Desired, OwnerRef, Plan, SliceRecord
    from resourceslice.connection import Client
else:
    from resourceslice._backend import core

# The sync's lines are the controller's: docs/operations.md names them so, and a driver that
# configures "resourceslice.controller" expects to see them there.
log = logging.getLogger("resourceslice.controller")

#: Bytes of request bodies one sync renders at a time (docs/core.md §5, window). A
#: 100,000-device pool's first publish is 12 MB of bodies: held all at once, next to the
#: records of what was sent, they were a third of the controller's peak memory.
_BODY_BYTES_PER_WINDOW = 1 << 20
#: Time for the watch to deliver slices another writer created (see SliceExistsError):
#: replanning before would write against an incomplete view of the pool.
_EXISTING_SLICE_RETRY = 1.0


class SyncHost(Protocol):
    """What a sync asks of the controller that runs it: ``resourceslice.controller.Controller``
    is one, through its package-private side (as it is for :mod:`resourceslice.binding`):
    the names are the controller's own.

    ``_lock`` is held while the desired state changes (a Condition over an RLock: the
    methods below take it again); ``_stopped`` and ``_stopping`` say that ``stop()`` was
    called, the event for the waits it cuts short.
    """

    _lock: threading.Condition
    _stopped: bool
    _stopping: threading.Event

    def _may_sync(self, pool: str) -> bool:
        """Whether this replica may write ``pool`` now: not stopped, its Lease held."""
        ...

    def _desired_of(self, pool: str) -> tuple[Desired, int]:
        """The desired state, and the number of the last update that changed ``pool``."""
        ...

    def _publishes(self, pool: str) -> bool:
        """Whether ``pool`` is one of the desired state's pools."""
        ...

    def _synced(self, pool: str, version: int, waiting: bool) -> None:
        """A sync of ``pool`` for ``version`` wrote its plan (``waiting``: but for slices it
        may only create once those being deleted are gone)."""
        ...

    def _count(self, kind: str) -> None:
        """A write made: ``kind`` is "creates", "updates" or "deletes"."""
        ...

    def _report(self, exc: BaseException, message: str) -> None:
        """An error, for the error handler."""
        ...

    def _answered(self) -> None:
        """The apiserver answered a write: it is up (an informer waiting to relist need not)."""
        ...


class PoolSync:
    """Syncs the pools the controller's workers take from ``queue``, one at a time each.

    ``sync_delay``, ``mutation_cache_ttl``, ``max_writes_per_second``,
    ``max_concurrent_writes``: the controller's options. ``elector``: the Lease (or shards)
    that bounds each write's time.
    """

    def __init__(
        self,
        host: SyncHost,
        client: Client,
        *,
        driver: str,
        owner: Owner | None,
        node_name: str | None,
        only_pool: str | None,
        observer: Observer,
        elector: LeaderElector | ShardedElector | None,
        store: SliceStore,
        queue: WorkQueue[str],
        clock: Clock,
        sync_delay: float,
        mutation_cache_ttl: float,
        max_writes_per_second: float | None,
        max_concurrent_writes: int,
    ) -> None:
        self._host = host
        self._client = client
        self._driver = driver
        self._owner = owner
        self._owner_lock = threading.Lock()
        self._node_name = node_name
        self._only_pool = only_pool
        self._observer = observer
        self._elector = elector
        self._store = store
        self._queue = queue
        self._clock = clock
        self._sync_delay = sync_delay
        # The pool each worker thread is syncing: a sharded controller's write budget is
        # that of the pool's shard.
        self._syncing = threading.local()
        # Until when the apiserver asked for quiet (Retry-After of a 429): it is the server
        # that is overloaded, so no pool writes before then, whatever queued it.
        self._quiet_until = 0.0
        #: In the newest resource.k8s.io version the cluster serves, shared with the informer.
        self.slices = ObservedSliceAPI(
            client,
            observer,
            None if elector is None else self._write_budget,
            None if elector is None else self._write_ended,
        )
        self._write_tokens = (
            None
            if max_writes_per_second is None
            else TokenBucket(clock, max_writes_per_second, max(1, round(2 * max_writes_per_second)))
        )
        self._write_tokens_lock = threading.Lock()
        self._mutations = MutationCache(mutation_cache_ttl, clock, store.get)
        # Threads that send a pool's independent updates beside its worker, started when
        # first needed: max_concurrent_writes - 1, shared by the workers, so that all of the
        # controller's writes in flight (workers + helpers) stay near the size of the
        # client's connection pool (five per CPU) when several pools sync at once.
        self._helper_count = max_concurrent_writes - 1
        self._helpers: ThreadPoolExecutor | None = None
        self._helpers_lock = threading.Lock()
        self._writer = SliceWriter(
            self.slices, store, self._mutations, self, concurrency=max_concurrent_writes
        )

    # -- what the controller and its informer tell ---------------------------------------

    def observed(self, old: SliceRecord | None, new: SliceRecord | None) -> None:
        """The informer's event: ``old`` became ``new`` (None: created, or deleted); their
        pools are synced ``sync_delay`` from now."""
        # Why delayed: right after a start or a burst of writes the informer delivers many
        # events; syncing on each would act on a half-updated cache (and, for a restarted
        # driver, before it has said what it wants). Waiting lets the cache settle, yet a
        # slice someone edited or deleted by hand is put right soon enough.
        if new is not None:
            self._mutations.observed(new)
            if old is not None:
                self._writer.adopt_foreign_edit(old, new)
        elif old is not None:
            self._mutations.observed(old, deleted=True)
            with self._host._lock:
                if not self._host._publishes(old.pool):
                    self._writer.forget_deleted(old)
        for record in (old, new):
            if record is not None:
                self._queue.add_after(record.pool, self._sync_delay)

    def desired_changed(self, pools: Iterable[str]) -> None:
        """``pools`` have a new desired state: what the server dropped before may now fit.
        Under the host's lock, with the change."""
        self._writer.forget_dropped(pools)

    def took_lease(self, covers: Callable[[str], bool] | None) -> None:
        """This replica took the Lease (of the pools ``covers`` selects): what the other
        leaders wrote meanwhile are not conflicts."""
        self._writer.forget_own_writes(covers)

    def unconfirmed(self) -> int:
        """Writes the informer has not shown yet (held in the mutation cache)."""
        return len(self._mutations)

    def close(self, wait: bool) -> None:
        """Ends the helpers (after the workers: each waited for its helpers' writes)."""
        with self._helpers_lock:
            helpers, self._helpers = self._helpers, None
        if helpers is not None:
            helpers.shutdown(wait=wait)

    # -- a sync ------------------------------------------------------------------------------

    def sync(self, pool: str) -> None:
        """Syncs ``pool``, which a worker took from the queue: a failure is reported and the
        pool retried with backoff; the 429's quiet time holds it back."""
        started = time.monotonic()
        try:
            if not self._host._may_sync(pool):
                return  # a standby: the pool stays dirty; taking the lease queues it
            quiet = self._quiet_until - self._clock.now()
            if quiet > 0:
                self._queue.add_after(pool, quiet)
                return
            self._syncing.pool = pool
            self._sync(pool)
        except (KeyboardInterrupt, SystemExit):
            raise
        except NotLeaderError:
            pass  # the lease ran out mid-sync; told by the elector, synced on taking it back
        except BaseException as exc:
            self._observer.sync_done(pool, time.monotonic() - started, exc)
            # BaseException: PyO3's PanicException (a bug in the Rust core) is one, and
            # must not end the worker silently; the pool is retried like any failure.
            self._host._report(exc, f"syncing ResourceSlices of pool {pool!r}")
            asked = retry_after(exc)
            if asked > 0:
                log.info("the apiserver asked for %.1fs of quiet (429): writes pause", asked)
            with self._host._lock:
                self._quiet_until = max(self._quiet_until, self._clock.now() + asked)
            if isinstance(exc, SliceExistsError):
                asked = max(asked, _EXISTING_SLICE_RETRY)
            self._queue.add_rate_limited(pool, at_least=asked)
        else:
            self._observer.sync_done(pool, time.monotonic() - started, None)
            self._queue.forget(pool)

    def _sync(self, pool: str) -> None:
        started = time.monotonic()
        owner = self._owner_ref()
        # Under the lock update() changes the desired state under, and so forgets what the
        # server dropped of the pool (desired_changed): what was dropped is of this version.
        with self._host._lock:
            desired, version = self._host._desired_of(pool)
            written = self._writer.dropped_at(pool, version)
        existing = self._mutations.merge(pool, self._store.by_pool(pool))

        def window(first_write: int) -> Plan:
            # The same inputs give the same plan: only which bodies are rendered differs.
            return core.plan_pool(
                desired, pool, existing, owner, self._node_name, first_write, _BODY_BYTES_PER_WINDOW
            )

        plan = window(0)
        redundant = written is not None and rewrites_only(plan, existing, written)
        concurrent = independent_updates(plan, existing)
        writes = _log_plan(pool, plan, existing, redundant)
        if not redundant:
            self._writer.report_overwrites(pool, plan, existing)
            # Deletes first: they free the names and the room; then updates, then creates
            # (the order of plan.writes), so a consumer never sees more slices of the new
            # generation than resourceSliceCount; in-place updates under the kept generation
            # land in any order, so they go concurrently. stop() ends a sync between two
            # writes: a large pool's publish must not go on after the caller was told it
            # stopped.
            self._writer.delete(pool, plan.deletes)
            self._writer.write(pool, plan, version, concurrent)
            while plan.next_write < len(plan.writes):
                if self._host._stopped:
                    return
                plan = window(plan.next_write)
                self._writer.write(pool, plan, version, concurrent)
        if not self._host._may_sync(pool):
            return  # a write was skipped (stopped, or the lease ran out): not synced
        if writes and not redundant:
            creates, updates, deletes = writes
            log.info(
                "pool %r: generation %d, %d creates, %d updates, %d deletes in %.3fs",
                pool, plan.generation, creates, updates, deletes, time.monotonic() - started,
            )  # fmt: skip
        if plan.waiting:
            log.info(
                "pool %r: waiting for ResourceSlices being deleted to go before creating them "
                "again: %s",
                pool,
                ", ".join(plan.waiting),
            )
        self._host._synced(pool, version, bool(plan.waiting))
        # Writes the informer has not confirmed yet: look again once they leave the cache.
        expires_in = self._mutations.expires_in(pool)
        if expires_in is not None:
            self._queue.add_after(pool, expires_in + 0.001)

    def _owner_ref(self) -> OwnerRef | None:
        owner = self._owner
        if owner is not None and owner.is_node and not owner.uid:
            # Looked up once (by one worker): a Node's uid changes only when the Node object
            # is recreated, and then the kubelet restarts the driver anyway.
            with self._owner_lock:
                owner = self._owner
                assert owner is not None
                if not owner.uid:
                    owner = self._owner = replace(owner, uid=node_uid(self._client, owner.name))
        return owner_ref(owner)

    # -- what the writer asks (resourceslice.writer.WriteHost) -------------------------------

    def may_write(self, pool: str) -> bool:
        """Wait for a write token; False when the controller stopped or may not write
        ``pool`` (not the leader): write nothing more."""
        if self._write_tokens is not None and not self._host._stopped:
            with self._write_tokens_lock:
                wait = self._write_tokens.when()
            if wait > 0:
                self._host._stopping.wait(wait)
        return self._host._may_sync(pool)

    def count(self, kind: str) -> None:
        self._host._count(kind)

    def report(self, exc: BaseException, message: str) -> None:
        self._host._report(exc, message)

    def answered(self) -> None:
        self._host._answered()

    def in_view(self, record: SliceRecord) -> bool:
        """Whether the informer would show ``record`` (see SliceWriter._read_taken)."""
        return record.driver == self._driver and (
            self._only_pool is not None or record.node_name == self._node_name
        )

    def helpers(self) -> ThreadPoolExecutor:
        with self._helpers_lock:
            if self._host._stopped:  # stop() shut them down: the sync ends here, as between writes
                raise NotLeaderError("the controller was stopped")
            if self._helpers is None:
                self._helpers = ThreadPoolExecutor(
                    max_workers=max(1, self._helper_count),
                    thread_name_prefix="resourceslice-writer",
                )
            return self._helpers

    def as_pool(self, pool: str) -> None:
        """A helper thread writes for ``pool`` now (its write budget is the pool's shard's)."""
        self._syncing.pool = pool

    # -- what the slices' API asks: each write's time under the Lease --------------------------

    def _write_budget(self) -> float:
        assert self._elector is not None
        return self._elector.write_budget(getattr(self._syncing, "pool", None))

    def _write_ended(self, answered: bool) -> None:
        assert self._elector is not None
        self._elector.write_ended(getattr(self._syncing, "pool", None), answered)


def _log_plan(
    pool: str, plan: Plan, existing: list[SliceRecord], redundant: bool
) -> tuple[int, int, int] | None:
    """The plan's creates, updates and deletes, or None for none; its decisions at DEBUG."""
    names = {record.name for record in existing}
    updates = sum(name in names for name in plan.writes)
    counts = (len(plan.writes) - updates, updates, len(plan.deletes))
    if log.isEnabledFor(logging.DEBUG):
        generations = sorted({record.generation for record in existing})
        log.debug(
            "pool %r: %d devices in %d slices, generation %d (in the cluster: %s); "
            "delete %s, update %s, create %s%s",
            pool, plan.device_count, plan.slice_count, plan.generation,
            ", ".join(map(str, generations)) or "none",
            [name for name, _, _ in plan.deletes] or "none",
            [name for name in plan.writes if name in names] or "none",
            [name for name in plan.writes if name not in names] or "none",
            "; skipped: it would rewrite what the apiserver stored without the dropped fields"
            if redundant else "",
        )  # fmt: skip
    return counts if any(counts) else None
