"""A rate-limited, delaying, de-duplicating work queue, after client-go's ``workqueue``.

Items are hashable keys (pool names). An item is in the queue at most once; an item being
processed that is added again is queued once more when its worker calls :meth:`done`, so
one pool is never synced by two workers at once and no change is lost.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections import deque
from collections.abc import Hashable
from typing import Generic, Protocol, TypeVar

T = TypeVar("T", bound=Hashable)

_MIN_PRUNE = 64


class Clock(Protocol):
    """Seconds on a monotonic scale; injectable so tests can move time by hand."""

    def now(self) -> float: ...


class MonotonicClock:
    def now(self) -> float:
        return time.monotonic()


class ExponentialBackoff(Generic[T]):
    """Per item: ``base * 2**failures``, capped at ``max_delay``; :meth:`forget` resets."""

    def __init__(self, base: float = 0.005, max_delay: float = 1000.0) -> None:
        self._base = base
        self._max = max_delay
        self._failures: dict[T, int] = {}

    def when(self, item: T) -> float:
        failures = self._failures.get(item, 0)
        self._failures[item] = failures + 1
        # Cap the exponent too: 2**failures grows without bound for a permanently failing item.
        if failures >= 64:
            return self._max
        return min(self._base * 2.0**failures, self._max)

    def forget(self, item: T) -> None:
        self._failures.pop(item, None)

    def failures(self, item: T) -> int:
        return self._failures.get(item, 0)


class TokenBucket:
    """Overall limit: ``qps`` tokens per second, at most ``burst`` saved up.

    :meth:`when` reserves a token and says how long to wait for it, so a storm of failures
    across many items is spread out instead of hammering the apiserver.
    """

    def __init__(self, clock: Clock, qps: float = 10.0, burst: int = 100) -> None:
        self._clock = clock
        self._qps = qps
        self._burst = float(burst)
        self._tokens = float(burst)
        self._last = clock.now()

    def when(self) -> float:
        now = self._clock.now()
        self._tokens = min(self._burst, self._tokens + (now - self._last) * self._qps)
        self._last = now
        self._tokens -= 1.0
        return 0.0 if self._tokens >= 0 else -self._tokens / self._qps


class WorkQueue(Generic[T]):
    """client-go's default controller queue: max(per-item exponential, token bucket)."""

    def __init__(
        self,
        clock: Clock | None = None,
        backoff: ExponentialBackoff[T] | None = None,
        bucket: TokenBucket | None = None,
    ) -> None:
        self._clock: Clock = clock or MonotonicClock()
        self._backoff: ExponentialBackoff[T] = backoff or ExponentialBackoff()
        self._bucket = bucket or TokenBucket(self._clock)
        self._cond = threading.Condition()
        self._ready: deque[T] = deque()
        self._dirty: set[T] = set()
        self._processing: set[T] = set()
        # Delayed items: a heap of (due, seq, item) plus each item's earliest due time;
        # heap entries that no longer match ``_due`` are stale and skipped.
        self._waiting: list[tuple[float, int, T]] = []
        self._due: dict[T, float] = {}
        # When add_spaced last let each item through (or will: a time in the future), and
        # until when that spaces the next add. Expired entries are pruned when the dict has
        # doubled since the last pruning, so churning names cost amortised O(1).
        self._spaced: dict[T, tuple[float, float]] = {}
        self._spaced_prune_at = _MIN_PRUNE
        self._seq = 0
        self._shutting_down = False

    # -- adding ---------------------------------------------------------------------------

    def add(self, item: T) -> None:
        with self._cond:
            self._add_locked(item)

    def _add_locked(self, item: T) -> None:
        if self._shutting_down or item in self._dirty:
            return
        self._dirty.add(item)
        if item not in self._processing:
            self._ready.append(item)
            self._cond.notify()

    def add_after(self, item: T, delay: float) -> None:
        """Add ``item`` once ``delay`` seconds have passed; an earlier pending time wins."""
        with self._cond:
            if self._shutting_down:
                return
            if delay <= 0:
                self._add_locked(item)
                return
            due = self._clock.now() + delay
            if item in self._due and self._due[item] <= due:
                return
            self._due[item] = due
            self._seq += 1
            heapq.heappush(self._waiting, (due, self._seq, item))
            # A worker may be sleeping until a later due time: let it recompute.
            self._cond.notify_all()

    def add_spaced(self, item: T, interval: float) -> None:
        """Add ``item`` at once, unless add_spaced let it through less than ``interval``
        seconds ago: then when that interval is over (one time for all such adds).

        Why: an item that keeps being changed (a burst of updates to one pool) is then
        processed once per interval with everything changed so far, while a change that
        comes alone is processed at once, whatever else (a watch event) queued it meanwhile.
        """
        with self._cond:
            now = self._clock.now()
            last = self._spaced.get(item)
            if last is None or now >= last[1]:
                due = now  # a change on its own
            elif last[0] > now:
                due = last[0]  # joins the time already set
            else:
                due = last[0] + interval
            self._spaced[item] = (due, due + interval)
            if len(self._spaced) >= self._spaced_prune_at:
                for key in [k for k, (_, until) in self._spaced.items() if until <= now]:
                    del self._spaced[key]
                self._spaced_prune_at = max(_MIN_PRUNE, 2 * len(self._spaced))
        self.add_after(item, due - now)

    def add_rate_limited(self, item: T, at_least: float = 0.0) -> None:
        """Retry ``item`` after its backoff (the longer of per-item and overall limits).

        ``at_least``: a delay the server asked for (``Retry-After``), which the backoff must
        not undercut.
        """
        with self._cond:
            delay = max(self._backoff.when(item), self._bucket.when(), at_least)
        self.add_after(item, delay)

    def forget(self, item: T) -> None:
        """``item`` succeeded: its next failure starts the backoff from the beginning."""
        with self._cond:
            self._backoff.forget(item)

    def num_requeues(self, item: T) -> int:
        with self._cond:
            return self._backoff.failures(item)

    # -- taking ---------------------------------------------------------------------------

    def _promote_due_locked(self) -> float | None:
        """Move due delayed items to the ready queue; seconds until the next one, if any."""
        now = self._clock.now()
        while self._waiting:
            due, _, item = self._waiting[0]
            if self._due.get(item) != due:
                heapq.heappop(self._waiting)
                continue
            if due > now:
                return due - now
            heapq.heappop(self._waiting)
            del self._due[item]
            self._add_locked(item)
        return None

    def get(self, timeout: float | None = None) -> T | None:
        """The next item to process, or None on shutdown or when ``timeout`` runs out.

        The caller must call :meth:`done` with the item when it has finished with it.
        """
        deadline = None if timeout is None else self._clock.now() + timeout
        with self._cond:
            while True:
                next_due = self._promote_due_locked()
                if self._shutting_down:
                    return None
                if self._ready:
                    item = self._ready.popleft()
                    self._processing.add(item)
                    self._dirty.discard(item)
                    # A delayed add of the item is served by processing it now: whatever it
                    # was for (a retry, a re-check, a resync), this run sees the state up to
                    # now, and what changes later adds the item again.
                    self._due.pop(item, None)
                    return item
                wait = next_due
                if deadline is not None:
                    left = deadline - self._clock.now()
                    if left <= 0:
                        return None
                    wait = left if wait is None else min(wait, left)
                self._cond.wait(wait)

    def done(self, item: T) -> None:
        with self._cond:
            self._processing.discard(item)
            if item in self._dirty:
                self._ready.append(item)
                self._cond.notify()
            elif self._idle_locked():
                self._cond.notify_all()  # wake wait_idle()

    # -- state ----------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Wake every waiting :meth:`get` (they return None); later adds are ignored."""
        with self._cond:
            self._shutting_down = True
            self._cond.notify_all()

    def _idle_locked(self) -> bool:
        return not (self._ready or self._due or self._processing)

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until no item is ready, delayed or being processed; False on timeout or
        shutdown. ``timeout`` is in real seconds, whatever the clock."""
        with self._cond:
            return (
                self._cond.wait_for(lambda: self._shutting_down or self._idle_locked(), timeout)
                and not self._shutting_down
            )

    @property
    def shutting_down(self) -> bool:
        with self._cond:
            return self._shutting_down

    def __len__(self) -> int:
        """Items ready to be taken (delayed ones not counted)."""
        with self._cond:
            return len(self._ready)

    def spaced(self) -> int:
        """How many items add_spaced remembers (bounded: expired ones are pruned)."""
        with self._cond:
            return len(self._spaced)

    def pending_after(self, item: T) -> float | None:
        """Seconds until delayed ``item`` becomes ready, or None when it is not waiting."""
        with self._cond:
            due = self._due.get(item)
            return None if due is None else max(0.0, due - self._clock.now())
