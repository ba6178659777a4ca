"""The controller: keeps one driver's ResourceSlices equal to its desired pools.

It only wires the pieces together: the informer fills the store, a work queue of pool names
decides when each pool is synced, the core plans the writes of one pool, and the writer
sends them and remembers their results in the mutation cache.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import TYPE_CHECKING, Optional, TypedDict

from resourceslice._http import node_uid, retry_after
from resourceslice._observer import ObservedSliceAPI, Observer, Snapshot
from resourceslice._plain import owner_ref, prepare, prepare_devices
from resourceslice.api import (
    DriverResources,
    Owner,
    ResourceSliceError,
    SliceExistsError,
    Stats,
    ValidationError,
)
from resourceslice.health import Health
from resourceslice.informer import SliceInformer, field_selector
from resourceslice.leaderelection import LeaderElection, LeaderElector, NotLeaderError
from resourceslice.mutation_cache import MutationCache
from resourceslice.sharding import ShardedElector
from resourceslice.store import SliceStore
from resourceslice.workqueue import Clock, MonotonicClock, TokenBucket, WorkQueue
from resourceslice.writer import SliceWriter, independent_updates, rewrites_only

if TYPE_CHECKING:
    from types import TracebackType

    from resourceslice import _core as core
    from resourceslice._core import Desired, OwnerRef, Plan, SliceRecord
    from resourceslice.connection import Client
    from resourceslice.types import Device, KubernetesModel
else:
    from resourceslice._backend import core

log = logging.getLogger(__name__)

ErrorHandler = Callable[[BaseException, str], None]
#: ``listener(leading, covers)``: see Controller._add_leadership_listener.
LeadershipListener = Callable[[bool, Optional[Callable[[str], bool]]], None]

DEFAULT_SYNC_DELAY = 30.0
DEFAULT_MUTATION_CACHE_TTL = 60.0
DEFAULT_UPDATE_INTERVAL = 1.0
DEFAULT_MAX_SLICE_BYTES = 1 << 20
#: Pools synced at once. A node-local driver has a pool or two and never uses more than
#: that; a central publisher of many small pools overlaps up to four writes' round trips,
#: which is where such a sync spends its time (BENCHMARKS.md, many pools).
DEFAULT_WORKERS = 4
#: Client-side limit on writes (creates, updates, deletes) over all pools, with a burst of
#: two seconds' worth: kube-controller-manager's own client defaults (50 per second, burst
#: 100). A first publish of hundreds of slices then paces itself instead of relying on the
#: server's 429s, and a handful of writes is never delayed.
DEFAULT_MAX_WRITES_PER_SECOND = 50.0
#: One pool's in-place updates in flight at once, when they keep the generation and so may
#: land in any order (docs/core.md §5). A pool's writes one after another were about 50 a
#: second on a 2-core machine, less than a pool of 100,000 devices under health churn needs
#: (BENCHMARKS.md, health churn); 8 overlap the round trips without outgrowing the client's
#: connection pool (five connections per CPU).
DEFAULT_MAX_CONCURRENT_WRITES = 8
#: Bytes of request bodies one sync renders at a time (docs/core.md §5, window). A
#: 100,000-device pool's first publish is 12 MB of bodies: held all at once, next to the
#: records of what was sent, they were a third of the controller's peak memory.
_BODY_BYTES_PER_WINDOW = 1 << 20
#: Time for the watch to deliver slices another writer created (see SliceExistsError):
#: replanning before would write against an incomplete view of the pool.
_EXISTING_SLICE_RETRY = 1.0


class _RequiredOptions(TypedDict):
    driver: str


class _CommonOptions(_RequiredOptions, total=False):
    """The keywords of :class:`Controller` but ``error_handler``, typed once for both entry
    points: :class:`ControllerOptions` here, ``AsyncControllerOptions`` in
    :mod:`resourceslice.aio` (whose handler may be a coroutine function). mypy checks that
    ``aio.start_controller`` hands them on to :class:`Controller` unchanged, and
    ``tests/controller/test_options.py`` that they are exactly the constructor's."""

    owner: Owner | None
    resources: DriverResources | None
    sync_delay: float
    mutation_cache_ttl: float
    reconcile_pool_with_name: str | None
    max_slice_bytes: int
    update_interval: float
    workers: int
    max_writes_per_second: float | None
    max_concurrent_writes: int
    clock: Clock | None
    leader_election: LeaderElection | None


class ControllerOptions(_CommonOptions, total=False):
    """Every keyword of :class:`Controller` (``**options`` of a wrapper that passes them on)."""

    error_handler: ErrorHandler | None


class ControllerStoppedError(RuntimeError, ResourceSliceError):
    """The controller was stopped: it takes no more updates."""


def _log_error(exc: BaseException, message: str) -> None:
    # One line per error; where it came from only for who asked (DEBUG): a pool retried
    # every few seconds would fill the log with the same traceback.
    log.error("%s: %s", message, exc, exc_info=exc if log.isEnabledFor(logging.DEBUG) else None)


class Controller:
    """Publishes ``resources`` of ``driver`` as ResourceSlices, in the background, from its
    construction (``start_controller(...)``, the name the README uses) until :meth:`stop`.

    ``api_client`` None gives an inactive controller: it validates updates, publishes
    nothing. Raises ValidationError for invalid ``resources``. Cluster errors go to
    ``error_handler(exc, message)`` (default: logged to ``logging.getLogger("resourceslice")``)
    and the pool is retried with backoff.

    ``update_interval``: a pool changed by ``update()`` is synced at once, unless an earlier
    ``update()`` of it was synced less than that many seconds ago; then when the interval is
    over, with every change made meanwhile. A burst of updates so costs a few writes, not
    one each, and a lone change is not delayed.

    ``workers``: how many pools are synced at once (one pool never by two at a time).
    ``max_writes_per_second``: all writes of this controller together, with a burst of two
    seconds' worth; None for no client-side limit (the apiserver's 429s still apply).
    ``max_concurrent_writes``: how many of one pool's writes may be in flight at once when
    they are in-place updates under the pool's kept generation, which may land in any order
    (docs/core.md §5); any other sync (a new generation, creates) writes one slice after
    another. 1 writes every sync one slice after another. The helpers that send them are
    shared by all pools: ``workers + max_concurrent_writes - 1`` writes in flight at most.

    ``leader_election``: one of several replicas publishes, the one holding the
    :class:`LeaderElection`'s Lease; the others keep their view of the slices current and
    write nothing until they take the Lease, then sync every pool at once. ``is_leader()``
    says which this one is, and the error handler is told when it loses the Lease.
    ``wait_synced``/``wait_idle`` of a standby wait until it leads and has synced. With
    ``shards`` > 1 each replica publishes the pools of the shards it holds (``is_leader()``:
    at least one), and waits for those.
    """

    def __init__(
        self,
        api_client: Client | None,
        *,
        driver: str,
        owner: Owner | None = None,
        resources: DriverResources | None = None,
        sync_delay: float = DEFAULT_SYNC_DELAY,
        mutation_cache_ttl: float = DEFAULT_MUTATION_CACHE_TTL,
        error_handler: ErrorHandler | None = None,
        reconcile_pool_with_name: str | None = None,
        max_slice_bytes: int = DEFAULT_MAX_SLICE_BYTES,
        update_interval: float = DEFAULT_UPDATE_INTERVAL,
        workers: int = DEFAULT_WORKERS,
        max_writes_per_second: float | None = DEFAULT_MAX_WRITES_PER_SECOND,
        max_concurrent_writes: int = DEFAULT_MAX_CONCURRENT_WRITES,
        clock: Clock | None = None,
        leader_election: LeaderElection | None = None,
    ) -> None:
        if owner is not None and not isinstance(owner, Owner):
            raise TypeError(f"owner must be an Owner, not {type(owner).__name__}")
        if workers < 1:
            raise ValueError(f"workers must be at least 1, not {workers}")
        if isinstance(max_concurrent_writes, bool) or not isinstance(max_concurrent_writes, int):
            raise TypeError(
                f"max_concurrent_writes must be an int, not {type(max_concurrent_writes).__name__}"
            )
        if max_concurrent_writes < 1:
            raise ValueError(
                f"max_concurrent_writes must be at least 1, not {max_concurrent_writes}"
            )
        if max_writes_per_second is not None and not max_writes_per_second > 0:
            raise ValueError(
                f"max_writes_per_second must be positive or None, not {max_writes_per_second}"
            )
        self._driver = driver
        self._owner = owner
        self._only_pool = reconcile_pool_with_name or None
        self._max_slice_bytes = max_slice_bytes
        self._sync_delay = sync_delay
        self._update_interval = update_interval
        self._error_handler: ErrorHandler = error_handler or _log_error
        # The Node's name goes into spec.nodeName, unless one pool is reconciled by name:
        # such a pool is visible cluster-wide through its node selector.
        self._node_name = owner.name if owner is not None and owner.is_node else None
        if self._only_pool is not None:
            self._node_name = None

        self._lock = threading.Condition()
        self._desired: Desired = self._prepare(resources or DriverResources())
        self._desired_pools = frozenset(self._desired.pool_names())
        # Each update() numbers the desired state; a pool's entry is the number of the last
        # one that changed it. A sync clears the pool's dirty mark only if no update changed
        # the pool while it ran. Entries of pools no longer desired go once synced.
        self._version = 0
        self._pool_versions: dict[str, int] = {}
        self._dirty: set[str] = set(self._desired_pools)
        self._counts = {"creates": 0, "updates": 0, "deletes": 0, "syncs": 0}
        self._ready = False
        self._stopped = False
        # Set with _stopped: waits (for a write token) end at once when it is.
        self._stopping = threading.Event()
        # What health() and the metrics report: each write, sync and error as it happens.
        self._observer = Observer()

        self._client = api_client
        self._elector: LeaderElector | ShardedElector | None = None
        self._leader_election = leader_election
        # Told of each change of leadership after the controller (resourceslice.binding).
        self._leadership_listeners: list[LeadershipListener] = []
        if api_client is None:
            return
        clock = self._clock = clock or MonotonicClock()
        if leader_election is not None:
            elector = ShardedElector if leader_election.shards > 1 else LeaderElector
            self._elector = elector(
                api_client,
                leader_election,
                on_change=self._on_leadership,
                on_error=self._report,
                clock=clock,
            )
        # The pool each worker thread is syncing: a sharded controller's write budget is
        # that of the pool's shard.
        self._syncing = threading.local()
        # Until when the apiserver asked for quiet (Retry-After of a 429): it is the server
        # that is overloaded, so no pool writes before then, whatever queued it.
        self._quiet_until = 0.0
        # In the newest resource.k8s.io version the cluster serves, shared with the informer.
        self._slices = ObservedSliceAPI(
            api_client,
            self._observer,
            None if self._elector is None else self._write_budget,
            None if self._elector is None else self._write_ended,
        )
        self._write_tokens = (
            None
            if max_writes_per_second is None
            else TokenBucket(clock, max_writes_per_second, max(1, round(2 * max_writes_per_second)))
        )
        self._write_tokens_lock = threading.Lock()
        self._owner_lock = threading.Lock()
        self._store = SliceStore()
        self._mutations = MutationCache(mutation_cache_ttl, clock, self._store.get)
        self._queue: WorkQueue[str] = WorkQueue(clock)
        self._informer = SliceInformer(
            api_client,
            driver=driver,
            selector=field_selector(
                driver,
                owner.name if owner is not None and owner.is_node else None,
                self._only_pool is not None,
            ),
            store=self._store,
            on_change=self._on_slice_change,
            on_error=self._report,
            only_pool=self._only_pool,
            api=self._slices,
        )
        # Threads that send a pool's independent updates beside its worker, started when
        # first needed: max_concurrent_writes - 1, shared by the workers, so that all of the
        # controller's writes in flight (workers + helpers) stay near the size of the
        # client's connection pool (five per CPU) when several pools sync at once.
        self._helper_count = max_concurrent_writes - 1
        self._helpers: ThreadPoolExecutor | None = None
        self._helpers_lock = threading.Lock()
        self._writer = SliceWriter(
            self._slices,
            self._store,
            self._mutations,
            may_write=self._may_write,
            count=self._count,
            report=self._report,
            answered=self._informer.retry_now,
            in_view=self._in_view,
            concurrency=max_concurrent_writes,
            helpers=self._writer_helpers,
            as_pool=self._as_pool,
        )
        for pool in sorted(self._dirty):
            self._queue.add(pool)
        self._workers = [
            threading.Thread(target=self._work, name=f"resourceslice-worker-{i}", daemon=True)
            for i in range(workers)
        ]
        self._informer.start()
        for worker in self._workers:
            worker.start()
        if self._elector is not None:
            self._elector.start()

    # -- public ---------------------------------------------------------------------------

    def update(self, resources: DriverResources) -> None:
        """Replace the desired state; raises ValidationError and keeps the old one if invalid.

        Returns at once: the pools are synced in the background. ``resources`` is copied,
        the caller may change it afterwards. Only the pools whose content changed are
        synced again. Raises ControllerStoppedError after :meth:`stop`.
        """
        self._check_running()
        desired = self._prepare(resources)
        with self._lock:
            self._check_running()
            changed = self._desired.changed_pools(desired)
            self._replace(desired, changed)
        self._schedule(changed)

    def update_devices(
        self,
        pool: str,
        upsert: Sequence[Device | KubernetesModel] = (),
        remove: Iterable[str] = (),
    ) -> None:
        """Change some devices of ``pool`` by name, without handing over the whole desired state.

        ``upsert``: each replaces the device of its name, where it is, or is added after the
        others; ``remove``: names taken out (one not there is no error). The pool must be
        desired and given as ``devices``, not ``slices``. Only these devices are validated
        (an error's path, ``pools["<pool>"].devices[i]``, counts in ``upsert``); raises
        ValidationError and keeps the desired state if anything is wrong.

        Each call changes the desired state the previous call left, whether update() or
        update_devices(); update() replaces all of it, earlier device changes included.
        Calls within ``update_interval`` are coalesced into one sync of the pool, with the
        same writes as an update() to the same devices (docs/core.md §8).
        """
        self._check_running()
        removed = list(remove)
        batch, errors = prepare_devices(
            self._driver, pool, upsert, removed, self._node_name, self._max_slice_bytes
        )
        if batch is None:
            raise ValidationError(errors)
        with self._lock:
            self._check_running()
            desired, errors = self._desired.with_devices(pool, batch, removed)
            if desired is None:
                raise ValidationError(errors)
            self._replace(desired, [pool])
        self._schedule([pool])

    def _replace(self, desired: Desired, changed: list[str]) -> None:
        """Makes ``desired`` the desired state, ``changed`` the pools it changed; under the lock."""
        self._desired = desired
        self._desired_pools = frozenset(desired.pool_names())
        self._version += 1
        for pool in changed:
            self._pool_versions[pool] = self._version
        self._dirty.update(changed)
        if self._client is not None:
            self._writer.forget_dropped(changed)

    def _schedule(self, changed: list[str]) -> None:
        """Syncs the ``changed`` pools, at most once per ``update_interval`` each."""
        if self._client is not None:
            for pool in changed:
                self._queue.add_spaced(pool, self._update_interval)

    def _check_running(self) -> None:
        if self._stopped:
            raise ControllerStoppedError("the controller was stopped; start a new one")

    def wait_synced(self, timeout: float | None = None) -> bool:
        """Wait until every pool of the current desired state is published as desired.

        False when ``timeout`` ran out first (a pool may be failing: see the error handler),
        and at once for an inactive controller (no API client), which never publishes.
        Slices of pools that are not desired but found in the cluster at start are removed
        ``sync_delay`` after the informer delivered them, and are not waited for.
        """
        if self._client is None:
            return False
        with self._lock:
            return (
                self._lock.wait_for(
                    lambda: self._stopped or (self._ready and self._synced_locked()), timeout
                )
                and not self._stopped
            )

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until the controller has nothing left to do; False on timeout or stop.

        Idle: synced (see :meth:`wait_synced`), and no pool queued, waiting or being synced
        (the resync ``sync_delay`` after watch events, a retry, the re-check of writes the
        watch has not confirmed), and no write unconfirmed. Right after :meth:`wait_synced`
        the resync that the informer's first events scheduled has not run yet; a check that
        must see its outcome (a restart made no writes) waits for this instead.
        """
        if self._client is None:
            return False
        deadline = None if timeout is None else time.monotonic() + timeout

        def left() -> float | None:
            return None if deadline is None else max(0.0, deadline - time.monotonic())

        while self.wait_synced(left()) and self._queue.wait_idle(left()):
            if len(self._mutations) == 0:
                return True
            # Not expected: a sync that leaves unconfirmed writes queues their re-check. Look
            # again shortly rather than call it idle.
            remaining = left()
            if remaining == 0 or self._stopping.wait(min(0.01, remaining or 0.01)):
                return False
        return False

    @property
    def running(self) -> bool:
        """Whether a background thread (the informer, a worker) still runs; False once
        :meth:`stop` has returned, unless it was called from one of those threads."""
        if self._client is None:
            return False
        return self._informer.alive or any(w.is_alive() for w in self._workers)

    @property
    def driver(self) -> str:
        return self._driver

    @property
    def leader_election(self) -> LeaderElection | None:
        """How this controller elects a leader; None when it does not (it always writes)."""
        return self._leader_election

    def is_leader(self) -> bool:
        """Whether this controller may write now: it holds its Lease (see
        :class:`LeaderElection`; sharded: at least one shard's), or runs without leader
        election. False when inactive or stopped."""
        if self._client is None or self._stopped:
            return False
        return self._elector is None or self._elector.is_leader()

    def _may_sync(self, pool: str) -> bool:
        if self._stopped:
            return False
        return self._elector is None or self._elector.holds(pool)

    def _synced_locked(self) -> bool:
        """No pool this controller publishes is dirty (a standby publishes none; a sharded
        controller those of the shards it holds)."""
        if self._elector is None:
            return not self._dirty
        return self._elector.is_leader() and not any(map(self._elector.holds, self._dirty))

    def _write_budget(self) -> float:
        assert self._elector is not None
        return self._elector.write_budget(getattr(self._syncing, "pool", None))

    def _write_ended(self, answered: bool) -> None:
        assert self._elector is not None
        self._elector.write_ended(getattr(self._syncing, "pool", None), answered)

    def stats(self) -> Stats:
        with self._lock:
            return Stats(**self._counts)

    def health(self) -> Health:
        """How the controller is doing: synced, failing pools, informer connected, alive."""
        with self._lock:
            synced = (
                self._client is not None and self._ready and not self._dirty and not self._stopped
            )
        return self._observer.health(
            synced=synced,
            informer_connected=self._client is not None and self._informer.connected,
            alive=self.running,
        )

    def _snapshot(self) -> Snapshot:
        """The figures of :mod:`resourceslice.metrics`."""
        health = self.health()
        with self._lock:
            desired, dirty = self._desired, set(self._dirty)
        return self._observer.snapshot(
            health,
            driver=self._driver,
            desired=desired,
            dirty=dirty,
            queue_depth=len(self._queue) if self._client is not None else 0,
        )

    def stop(self) -> None:
        """Stop watching and syncing. Slices stay as they are: nothing is deleted.

        Returns once no request of this controller is in flight and none will start: a write
        under way is waited for (at most the request timeout, 60 s). Only its response says
        whether it landed; closing the connection would not undo a write the server has
        received, and a driver that stops and then deletes its slices would get some back.
        A sync stops between two writes. Safe to call from the error handler, on any thread:
        the calling thread itself then ends when the handler returns, without another write.
        """
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            self._lock.notify_all()
        self._stopping.set()
        if self._client is None:
            return
        self._queue.shutdown()
        self._informer.stop()
        current = threading.current_thread()
        for worker in self._workers:
            if worker is not current:
                worker.join()
        with self._helpers_lock:
            helpers, self._helpers = self._helpers, None
        if helpers is not None:
            # Idle: each worker waited for its helpers' writes before it ended.
            helpers.shutdown(wait=current not in self._workers)
        if self._elector is not None:
            self._elector.stop()  # after the last write: a successor may take over at once

    def __enter__(self) -> Controller:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- validation -----------------------------------------------------------------------

    def _prepare(self, resources: DriverResources) -> Desired:
        desired, errors = prepare(
            self._driver, resources, self._node_name, self._max_slice_bytes, self._only_pool
        )
        if desired is None:
            raise ValidationError(errors)
        return desired

    # -- background -----------------------------------------------------------------------

    def _report(self, exc: BaseException, message: str) -> None:
        self._observer.error(exc)
        try:
            self._error_handler(exc, message)
        except Exception:
            log.exception("the error handler failed")

    def _on_slice_change(self, old: SliceRecord | None, new: SliceRecord | None) -> None:
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
            with self._lock:
                if old.pool not in self._desired_pools:
                    self._writer.forget_deleted(old)
        for record in (old, new):
            if record is not None:
                self._queue.add_after(record.pool, self._sync_delay)

    def _work(self) -> None:
        while not self._informer.wait_synced(0.5):
            if self._queue.shutting_down:
                return
        with self._lock:
            self._ready = True
            if not self._dirty:
                self._observer.all_synced()
            self._lock.notify_all()
        while True:
            pool = self._queue.get()
            if pool is None:
                return
            started = time.monotonic()
            try:
                if not self._may_sync(pool):
                    continue  # a standby: the pool stays dirty; taking the lease queues it
                quiet = self._quiet_until - self._clock.now()
                if quiet > 0:
                    self._queue.add_after(pool, quiet)
                    continue
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
                self._report(exc, f"syncing ResourceSlices of pool {pool!r}")
                asked = retry_after(exc)
                if asked > 0:
                    log.info("the apiserver asked for %.1fs of quiet (429): writes pause", asked)
                with self._lock:
                    self._quiet_until = max(self._quiet_until, self._clock.now() + asked)
                if isinstance(exc, SliceExistsError):
                    asked = max(asked, _EXISTING_SLICE_RETRY)
                self._queue.add_rate_limited(pool, at_least=asked)
            else:
                self._observer.sync_done(pool, time.monotonic() - started, None)
                self._queue.forget(pool)
            finally:
                self._queue.done(pool)

    def _writer_helpers(self) -> ThreadPoolExecutor:
        with self._helpers_lock:
            if self._stopped:  # stop() shut them down: the sync ends here, as between writes
                raise NotLeaderError("the controller was stopped")
            if self._helpers is None:
                self._helpers = ThreadPoolExecutor(
                    max_workers=max(1, self._helper_count),
                    thread_name_prefix="resourceslice-writer",
                )
            return self._helpers

    def _as_pool(self, pool: str) -> None:
        """A helper thread writes for ``pool`` now (its write budget is the pool's shard's)."""
        self._syncing.pool = pool

    def _owner_ref(self) -> OwnerRef | None:
        owner = self._owner
        if owner is not None and owner.is_node and not owner.uid:
            # Looked up once (by one worker): a Node's uid changes only when the Node object
            # is recreated, and then the kubelet restarts the driver anyway.
            with self._owner_lock:
                owner = self._owner
                assert owner is not None and self._client is not None
                if not owner.uid:
                    owner = self._owner = replace(owner, uid=node_uid(self._client, owner.name))
        return owner_ref(owner)

    def _in_view(self, record: SliceRecord) -> bool:
        """Whether the informer would show ``record`` (see SliceWriter._read_taken)."""
        return record.driver == self._driver and (
            self._only_pool is not None or record.node_name == self._node_name
        )

    def _sync(self, pool: str) -> None:
        started = time.monotonic()
        owner = self._owner_ref()
        with self._lock:
            desired, version = self._desired, self._pool_versions.get(pool, 0)
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
                if self._stopped:
                    return
                plan = window(plan.next_write)
                self._writer.write(pool, plan, version, concurrent)
        if not self._may_sync(pool):
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
        with self._lock:
            self._counts["syncs"] += 1
            if plan.waiting:
                # Not synced until they are created; their deletion's watch event (the
                # finalizers removed) syncs the pool again.
                self._dirty.add(pool)
            elif self._pool_versions.get(pool, 0) == version:
                self._dirty.discard(pool)
                if pool not in self._desired_pools:
                    self._pool_versions.pop(pool, None)
                if not self._dirty:
                    self._observer.all_synced()
                self._lock.notify_all()
        # Writes the informer has not confirmed yet: look again once they leave the cache.
        expires_in = self._mutations.expires_in(pool)
        if expires_in is not None:
            self._queue.add_after(pool, expires_in + 0.001)

    def _may_write(self, pool: str) -> bool:
        """Wait for a write token; False when the controller stopped or may not write
        ``pool`` (not the leader): write nothing more."""
        if self._write_tokens is not None and not self._stopped:
            with self._write_tokens_lock:
                wait = self._write_tokens.when()
            if wait > 0:
                self._stopping.wait(wait)
        return self._may_sync(pool)

    def _on_leadership(self, leading: bool, covers: Callable[[str], bool] | None = None) -> None:
        """Taking the lease (or a shard's: the pools ``covers`` selects) is like an update()
        of its pools: other replicas wrote while this one waited, and it syncs them at once.
        Losing it leaves them unsynced as far as this replica knows (a sync cut short must
        not count)."""
        with self._lock:
            self._version += 1
            pools = {p for p in self._desired_pools if covers is None or covers(p)}
            for pool in pools:
                self._pool_versions[pool] = self._version
            self._dirty.update(pools)
            if leading:
                self._writer.forget_own_writes(covers)
            self._lock.notify_all()
        if leading:
            stored = self._store.pool_names()
            for pool in sorted(p for p in self._desired_pools | stored if not covers or covers(p)):
                self._queue.add(pool)
        for listener in list(self._leadership_listeners):
            try:
                listener(leading, covers)
            except Exception:
                log.exception("a leadership listener failed")

    # -- what resourceslice.binding asks: its writes are made under this controller's Lease

    def _add_leadership_listener(self, listener: LeadershipListener) -> None:
        """``listener(leading, covers)`` after each change of leadership (``covers``: the
        pools of the shard that changed, None for all), on the elector's thread."""
        self._leadership_listeners.append(listener)

    def _remove_leadership_listener(self, listener: LeadershipListener) -> None:
        if listener in self._leadership_listeners:
            self._leadership_listeners.remove(listener)

    def _publishes(self, pool: str) -> bool:
        """Whether ``pool`` is one of the desired state's pools."""
        with self._lock:
            return pool in self._desired_pools

    def _holds(self, pool: str) -> bool:
        """Whether this replica may write for ``pool`` now (running, and its Lease held)."""
        return self._client is not None and self._may_sync(pool)

    def _lease_budget(self, pool: str) -> float | None:
        """Seconds a write for ``pool`` about to be sent may take (None: no Lease bounds
        it); NotLeaderError when it may not be sent. Pair with :meth:`_lease_write_ended`."""
        if self._stopped:
            raise NotLeaderError("the controller was stopped")
        return None if self._elector is None else self._elector.write_budget(pool)

    def _lease_write_ended(self, pool: str, answered: bool) -> None:
        if self._elector is not None:
            self._elector.write_ended(pool, answered)

    def _count(self, kind: str) -> None:
        with self._lock:
            self._counts[kind] += 1


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


#: Go's name, and the README's: constructing a :class:`Controller` starts it.
start_controller = Controller
