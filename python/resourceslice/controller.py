"""The controller: keeps one driver's ResourceSlices equal to its desired pools.

It only wires the pieces together: the informer fills the store, a work queue of pool names
decides when each pool is synced, and the sync (resourceslice._sync) plans the writes of one
pool with the core, sends them through its writer and remembers their results in its
mutation cache. The controller holds the desired state and what of it is synced.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Optional, TypedDict

from resourceslice._observer import Observer, Snapshot
from resourceslice._plain import prepare, prepare_devices
from resourceslice._sync import PoolSync
from resourceslice.api import (
    DriverResources,
    Owner,
    ResourceSliceError,
    Stats,
    ValidationError,
)
from resourceslice.health import Health
from resourceslice.informer import SliceInformer, field_selector
from resourceslice.leaderelection import LeaderElection, LeaderElector, NotLeaderError
from resourceslice.sharding import ShardedElector
from resourceslice.store import SliceStore
from resourceslice.workqueue import Clock, MonotonicClock, WorkQueue

if TYPE_CHECKING:
    from types import TracebackType

    from resourceslice._core import Desired
    from resourceslice.connection import Client
    from resourceslice.types import Device, KubernetesModel

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


def _check_options(
    owner: Owner | None,
    workers: int,
    max_concurrent_writes: int,
    max_writes_per_second: float | None,
) -> None:
    """Raises for options no controller can run with, before anything starts."""
    if owner is not None and not isinstance(owner, Owner):
        raise TypeError(f"owner must be an Owner, not {type(owner).__name__}")
    if workers < 1:
        raise ValueError(f"workers must be at least 1, not {workers}")
    if isinstance(max_concurrent_writes, bool) or not isinstance(max_concurrent_writes, int):
        raise TypeError(
            f"max_concurrent_writes must be an int, not {type(max_concurrent_writes).__name__}"
        )
    if max_concurrent_writes < 1:
        raise ValueError(f"max_concurrent_writes must be at least 1, not {max_concurrent_writes}")
    if max_writes_per_second is not None and not max_writes_per_second > 0:
        raise ValueError(
            f"max_writes_per_second must be positive or None, not {max_writes_per_second}"
        )


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
        _check_options(owner, workers, max_concurrent_writes, max_writes_per_second)
        self._driver = driver
        self._only_pool = reconcile_pool_with_name or None
        self._max_slice_bytes = max_slice_bytes
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
        clock = clock or MonotonicClock()
        if leader_election is not None:
            elector = ShardedElector if leader_election.shards > 1 else LeaderElector
            self._elector = elector(
                api_client,
                leader_election,
                on_change=self._on_leadership,
                on_error=self._report,
                clock=clock,
            )
        self._store = SliceStore()
        self._queue: WorkQueue[str] = WorkQueue(clock)
        self._pool_sync = PoolSync(
            self,
            api_client,
            driver=driver,
            owner=owner,
            node_name=self._node_name,
            only_pool=self._only_pool,
            observer=self._observer,
            elector=self._elector,
            store=self._store,
            queue=self._queue,
            clock=clock,
            sync_delay=sync_delay,
            mutation_cache_ttl=mutation_cache_ttl,
            max_writes_per_second=max_writes_per_second,
            max_concurrent_writes=max_concurrent_writes,
        )
        self._informer = SliceInformer(
            api_client,
            driver=driver,
            selector=field_selector(
                driver,
                owner.name if owner is not None and owner.is_node else None,
                self._only_pool is not None,
            ),
            store=self._store,
            on_change=self._pool_sync.observed,
            on_error=self._report,
            only_pool=self._only_pool,
            api=self._pool_sync.slices,
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
            self._pool_sync.desired_changed(changed)

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
            if self._pool_sync.unconfirmed() == 0:
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
        # Idle: each worker waited for its helpers' writes before it ended.
        self._pool_sync.close(wait=current not in self._workers)
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
            try:
                self._pool_sync.sync(pool)
            finally:
                self._queue.done(pool)

    # -- what the sync asks (resourceslice._sync.SyncHost) --------------------------------

    def _desired_of(self, pool: str) -> tuple[Desired, int]:
        with self._lock:
            return self._desired, self._pool_versions.get(pool, 0)

    def _synced(self, pool: str, version: int, waiting: bool) -> None:
        with self._lock:
            self._counts["syncs"] += 1
            if waiting:
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

    def _answered(self) -> None:
        self._informer.retry_now()

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
                self._pool_sync.took_lease(covers)
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


#: Go's name, and the README's: constructing a :class:`Controller` starts it.
start_controller = Controller
