"""What a controller did, counted as it happens, for ``Controller.health()`` and metrics.

The controller tells its :class:`Observer` about each write, sync and error as they happen
(its ResourceSlice writes through :class:`ObservedSliceAPI`); :meth:`Controller.health`
(a :class:`~resourceslice.health.Health`) and :mod:`resourceslice.metrics` (a
:class:`Snapshot`) read it. It is plain counting, with no dependency: the Prometheus
collector is an optional extra that only reads it.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from resourceslice._apiversion import ResourceSliceAPI
from resourceslice._errortext import describe_error
from resourceslice.connection import ApiError
from resourceslice.health import Health

if TYPE_CHECKING:
    from resourceslice._core import Desired
    from resourceslice.connection import Client

#: Upper bounds of the sync duration histogram, in seconds: a small pool's sync is a few
#: milliseconds (no write) to a few round trips; a 10,000-device first publish is seconds.
SYNC_SECONDS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

#: A write's outcome by the apiserver's status: the few a driver operator acts on differently.
_OUTCOMES = {404: "not_found", 409: "conflict", 422: "invalid", 429: "throttled"}


def outcome_of(exc: BaseException | None) -> str:
    """``success``, a named status (``conflict``, ``throttled``…), ``rejected`` for other 4xx,
    ``error`` for 5xx and anything that got no answer (network, timeout)."""
    if exc is None:
        return "success"
    status = exc.status if isinstance(exc, ApiError) else None
    if status in _OUTCOMES:
        return _OUTCOMES[status]
    if isinstance(status, int) and 400 <= status < 500:
        return "rejected"
    return "error"


@dataclass(frozen=True)
class Snapshot:
    """A controller's figures for :mod:`resourceslice.metrics`, taken at once."""

    driver: str
    health: Health
    writes: Mapping[tuple[str, str], int]  # (verb, outcome) -> count
    syncs: Mapping[str, int]  # "success" / "error" -> count
    sync_seconds_buckets: tuple[int, ...]  # per bucket of SYNC_SECONDS_BUCKETS, then +Inf
    sync_seconds_sum: float
    errors: Mapping[str, int]  # exception class name -> count
    queue_depth: int
    pools: Mapping[str, int]  # "synced" / "pending" / "failing" -> count
    published_devices: int


class Observer:
    """Counts as the controller works; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._writes: Counter[tuple[str, str]] = Counter()  # (verb, outcome)
        self._syncs: Counter[str] = Counter()  # "success" / "error"
        self._buckets = [0] * (len(SYNC_SECONDS_BUCKETS) + 1)  # sync durations, then +Inf
        self._seconds = 0.0  # all sync durations added up
        self._errors: Counter[str] = Counter()  # exception class name
        self._failing: dict[str, str] = {}  # pool -> its last sync's error
        self._last_sync_time: float | None = None
        self._synced_once = False

    @contextmanager
    def writing(self, verb: str) -> Iterator[None]:
        """Counts the write made inside, by ``verb`` and the outcome it had."""
        try:
            yield
        except BaseException as exc:
            self._count_write(verb, outcome_of(exc))
            raise
        self._count_write(verb, "success")

    def _count_write(self, verb: str, outcome: str) -> None:
        with self._lock:
            self._writes[verb, outcome] += 1

    def sync_done(self, pool: str, seconds: float, exc: BaseException | None) -> None:
        """A sync of ``pool`` ended, failed with ``exc`` or not."""
        bucket = next(
            (i for i, bound in enumerate(SYNC_SECONDS_BUCKETS) if seconds <= bound),
            len(SYNC_SECONDS_BUCKETS),
        )
        with self._lock:
            self._buckets[bucket] += 1
            self._seconds += seconds
            if exc is None:
                self._syncs["success"] += 1
                self._failing.pop(pool, None)
                self._last_sync_time = time.time()
            else:
                self._syncs["error"] += 1
                # Served by /healthz to whoever connects: one line, no response headers.
                self._failing[pool] = describe_error(exc)

    def all_synced(self) -> None:
        """Every desired pool was published as desired: the controller is ready."""
        with self._lock:
            self._synced_once = True

    def error(self, exc: BaseException) -> None:
        """An error went to the error handler."""
        with self._lock:
            self._errors[type(exc).__name__] += 1

    def health(self, *, synced: bool, informer_connected: bool, alive: bool) -> Health:
        with self._lock:
            return Health(
                synced=synced,
                synced_once=self._synced_once or synced,
                failing=dict(self._failing),
                informer_connected=informer_connected,
                alive=alive,
                last_sync_time=self._last_sync_time,
            )

    def snapshot(
        self,
        health: Health,
        *,
        driver: str,
        desired: Desired,
        dirty: set[str],
        queue_depth: int,
    ) -> Snapshot:
        """The figures, with the controller's state: ``dirty`` pools are not synced yet."""
        desired_pools = set(desired.pool_names())
        failing = set(health.failing) & (desired_pools | dirty)
        synced = desired_pools - dirty - failing
        with self._lock:
            return Snapshot(
                driver=driver,
                health=health,
                writes=dict(self._writes),
                syncs=dict(self._syncs),
                sync_seconds_buckets=tuple(self._buckets),
                sync_seconds_sum=self._seconds,
                errors=dict(self._errors),
                queue_depth=queue_depth,
                pools={
                    "synced": len(synced),
                    "pending": len(dirty - failing),
                    "failing": len(failing),
                },
                published_devices=sum(desired.device_count(pool) for pool in synced),
            )


class ObservedSliceAPI(ResourceSliceAPI):
    """The controller's ResourceSlice requests, its writes counted by verb and outcome."""

    def __init__(
        self,
        api_client: Client,
        observer: Observer,
        write_budget: Callable[[], float | None] | None = None,
        write_ended: Callable[[bool], None] | None = None,
    ) -> None:
        super().__init__(api_client, write_budget, write_ended)
        self._observer = observer

    def create(self, body: bytes) -> bytes:
        with self._observer.writing("create"):
            return super().create(body)

    def update(self, name: str, body: bytes) -> bytes:
        with self._observer.writing("update"):
            return super().update(name, body)

    def delete(self, name: str, uid: str, resource_version: str) -> bytes:
        with self._observer.writing("delete"):
            return super().delete(name, uid, resource_version)
