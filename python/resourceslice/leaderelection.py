"""Leader election on a ``coordination.k8s.io/v1`` Lease, as client-go's ``leaderelection``.

Several replicas of a central publisher run one controller each; the replica that holds the
Lease writes, the others keep their informers warm and write nothing. The Lease is the only
shared state, and every change of it is an optimistic-concurrency update (the
``resourceVersion`` of the Lease read or written last), so two candidates can never both
believe they took it.

Time is judged as client-go judges it: a candidate never compares the Lease's timestamps
with its own clock (clocks of two machines disagree); it notes *when it saw* the Lease
change, on its own monotonic clock, and takes the Lease only once it has stayed unchanged
for ``leaseDurationSeconds`` since. The holder, for its part, counts from the moment it
*sent* its last successful renewal, which is before anyone could have seen it: it writes
until ``renew_deadline`` after that, no later, and every write it sends must be answered by
then (the request's own timeout). ``lease_duration - renew_deadline`` is the margin for a
write the server is still processing and for clocks that run at slightly different rates.
A Lease that disappears is a change like any other: a candidate that saw it held waits
``lease_duration`` from the moment it found it gone, while the holder creates it again.

Every Lease request is bounded as client-go's renew loop bounds it: a renewal (with the
attempts that follow a failed one) must be over by the renew deadline, when the leader stops
writing anyway; an attempt to take the Lease, and the release, get ``renew_deadline`` each.
No Lease request is retried by the transport (see :func:`resourceslice._http.request`): a
hung request must not keep a standby from trying again, nor :meth:`LeaderElector.stop` from
returning within a pod's grace period. The requests themselves are
:class:`resourceslice._lease.LeaseLock`'s, as client-go's elector sends its through a
``resourcelock``.
"""

from __future__ import annotations

import logging
import random
import socket
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any

from resourceslice._lease import LeaseLock, lease_spec, micro_time
from resourceslice.api import ResourceSliceError
from resourceslice.connection import ApiError
from resourceslice.workqueue import Clock, MonotonicClock

if TYPE_CHECKING:
    from resourceslice.connection import Client

log = logging.getLogger("resourceslice")

#: client-go's: a candidate waits ``retry_period`` times 1 to 2.2 between attempts, so
#: candidates started together do not keep colliding.
JITTER_FACTOR = 1.2

#: The holderIdentity of the Lease ``<name>`` while replicas with ``shards=K`` > 1 hold it
#: together, K appended. A plain leader (K = 1) holds it under its own identity.
SHARDS_HOLDER = "resourceslice.io/shards="

#: Reads of a shared Lease per attempt, when another replica renews it between ours.
_SHARED_TRIES = 3

#: A key no Lease spec has: set on the last spec seen when the Lease was found deleted.
_GONE = "(deleted)"


class _Outcome(Enum):
    """What one attempt did with the Lease."""

    NOT_TAKEN = 0
    #: The Lease named us (or, deleted, was last seen naming us): the same holding goes on.
    KEPT = 1
    #: The Lease named someone else, nobody, or was new: a term of its own begins.
    TAKEN = 2


@dataclass(frozen=True)
class LeaderElection:
    """Leader election for :func:`resourceslice.start_controller` (client-go's defaults).

    ``namespace``/``name``: the Lease, created if missing. ``identity``: this replica's name
    in the Lease (``holderIdentity``); unique per replica, by default the host name (a Pod's
    name) and a random suffix. ``lease_duration``: whole seconds a standby waits after the
    last renewal it saw before taking over. ``renew_deadline``: seconds after the last
    successful renewal the leader stops writing if it could not renew since; less than
    ``lease_duration``, so it stops before anyone may take over. ``retry_period``: seconds
    between renewals, and (with jitter) between a standby's attempts. ``shards``: more than
    one splits the pools into that many shards, each a Lease of its own
    (``<name>-shard-<i>``), spread over the replicas (see :mod:`resourceslice.sharding`).
    Replicas with different ``shards`` may overlap (a rollout that changes it): the Lease
    ``<name>`` says which number is in force, and only the replicas using it write.
    """

    namespace: str
    name: str
    identity: str | None = None
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    shards: int = 1

    def __post_init__(self) -> None:
        problems = [
            f"{field} must not be empty"
            for field in ("namespace", "name")
            if not getattr(self, field)
        ]
        if self.identity is not None and not self.identity:
            problems.append("identity must not be empty (None picks one)")
        if self.identity is not None and self.identity.startswith(SHARDS_HOLDER):
            problems.append(
                f"identity must not start with {SHARDS_HOLDER!r}: sharded replicas hold "
                f"their group's Lease under that name"
            )
        if not (self.lease_duration >= 1 and float(self.lease_duration).is_integer()):
            problems.append(
                f"lease_duration must be whole seconds, at least 1 (the Lease holds whole "
                f"seconds), not {self.lease_duration}"
            )
        if not 0 < self.renew_deadline < self.lease_duration:
            problems.append(
                f"renew_deadline ({self.renew_deadline}) must be positive and less than "
                f"lease_duration ({self.lease_duration})"
            )
        if not 0 < self.retry_period * JITTER_FACTOR < self.renew_deadline:
            problems.append(
                f"retry_period ({self.retry_period}) must be positive and less than "
                f"renew_deadline / {JITTER_FACTOR} ({self.renew_deadline / JITTER_FACTOR:g})"
            )
        if isinstance(self.shards, bool) or not isinstance(self.shards, int) or self.shards < 1:
            problems.append(f"shards must be a whole number, at least 1, not {self.shards!r}")
        if problems:
            raise ValueError("LeaderElection: " + "; ".join(problems))


class LeadershipLostError(RuntimeError, ResourceSliceError):
    """Told to the error handler: this replica held the Lease and no longer does.

    It stopped writing at once; it stays a standby and takes the Lease again when it can.
    """

    def __init__(self, lease: str, identity: str, why: str) -> None:
        super().__init__(f"lease {lease}: {identity} is no longer the leader: {why}")
        self.lease = lease
        self.identity = identity


class NotLeaderError(RuntimeError, ResourceSliceError):
    """A write was about to be sent by a replica that does not hold the Lease (any more)."""


def default_identity() -> str:
    """The host name (in a Pod, the Pod's name) and a random suffix, as client-go users do."""
    return f"{socket.gethostname()}_{uuid.uuid4()}"


class LeaderElector:
    """Takes and holds one Lease for this replica, in a thread of its own.

    ``on_change(leading)`` is called (on the elector's thread) when this replica becomes the
    leader or stops being it; ``on_error`` is told of failed Lease requests (once per
    distinct failure until one succeeds) and of lost leadership (:class:`LeadershipLostError`).
    :meth:`remaining` is what a write checks just before it is sent.

    ``shared``: the replicas that hold the Lease under the same ``holder`` (instead of
    their own identity) hold it together, each renewing it with a write of its own (its term
    counts from that write, so the standard argument holds for each of them), and none ever
    releases it.
    """

    def __init__(
        self,
        api_client: Client,
        config: LeaderElection,
        *,
        on_change: Callable[[bool], None],
        on_error: Callable[[BaseException, str], None],
        clock: Clock | None = None,
        labels: dict[str, str] | None = None,
        acquires: bool = True,
        shared: bool = False,
        holder: str | None = None,
    ) -> None:
        self.config = config
        self.identity = holder or config.identity or default_identity()
        self._clock = clock or MonotonicClock()
        # The Lease's requests (get, create, update), bounded by deadlines of our clock.
        self._api = LeaseLock(
            api_client, config.namespace, config.name, clock=self._clock, labels=labels
        )
        self.lease = self._api.describe
        self._on_change = on_change
        self._on_error = on_error
        # Whether the thread tries to take the Lease, or only renews it while held (a
        # shard's Lease: the sharding round decides which to take).
        self._acquires = acquires
        # Whether other replicas hold the Lease under the same holderIdentity (a sharded
        # group's Lease, see resourceslice.sharding): then it is never released, since a
        # release would end their terms as well as ours while they may still be writing.
        self._shared = shared
        self._lock = threading.Lock()
        # One attempt at a time: the thread's renewals and a sharding round's take.
        self._attempt_lock = threading.Lock()
        # The Lease as last read or written (its resourceVersion is the precondition of the
        # next update), its spec, and when (our clock) that spec was first seen.
        self._lease: dict[str, Any] | None = None
        self._observed: dict[str, Any] | None = None
        self._observed_at = 0.0
        # Until when this replica may write (our clock); None when it is not the leader.
        self._leading_until: float | None = None
        # Writes sent under the Lease and not yet ended, and whether one ended without an
        # answer since the Lease was taken: its outcome is unknown, it may still commit.
        self._writes_in_flight = 0
        self._unanswered = False
        self._release_pending = False
        # Bumped by give_up(): an attempt that began before never extends the term (its
        # request may succeed after the round decided to hand the Lease back).
        self._epoch = 0
        self._last_problem: str | None = None
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    # -- what the controller asks ---------------------------------------------------------

    def is_leader(self) -> bool:
        return self.remaining() > 0

    def holds(self, pool: str) -> bool:
        """Whether this replica may write ``pool`` (any pool: the Lease covers them all)."""
        return self.is_leader()

    def remaining(self) -> float:
        """Seconds this replica may still write (0 when it is not the leader)."""
        with self._lock:
            until = self._leading_until
        return 0.0 if until is None else max(0.0, until - self._clock.now())

    def write_budget(self, pool: str | None = None) -> float:
        """The whole time a write (of ``pool``) about to be sent may take; NotLeaderError if
        this replica may not send it."""
        with self._lock:
            now = self._clock.now()
            until = self._leading_until
            if until is None or until <= now:
                raise NotLeaderError(f"{self.identity} does not hold lease {self.lease}")
            self._writes_in_flight += 1
            return until - now

    def write_ended(self, pool: str | None, answered: bool) -> None:
        """A write given a :meth:`write_budget` is over; ``answered``: the server said how
        it went (a status), else its outcome is unknown (connection lost, timed out)."""
        with self._lock:
            self._writes_in_flight -= 1
            self._unanswered = self._unanswered or not answered

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._run, name="resourceslice-leader-election", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop trying, and give the Lease up if this replica holds it, so that a standby
        takes over at once instead of after ``lease_duration``. Call it once this replica's
        writes are over. Never takes the Lease again, even when called from the error or
        change handler in the middle of an attempt."""
        self._stopping.set()
        if self._thread is not None and not self.on_own_thread():
            self._thread.join()
        with self._lock:
            self._leading_until = None
        self._release_when_safe()

    def _release_when_safe(self) -> None:
        """Release the Lease unless a write of ours may still commit.

        Of the two ways to keep a successor from writing while a write of ours can still
        land, waiting for a margin or for the outcome, this takes the outcome: a write that
        got an answer is over, and when they all did (the usual case) the successor takes
        over at once. A write that ended without an answer (its connection lost, or it
        timed out) may still be applied by the server at any moment; no margin we could
        pick bounds that, so the Lease is then left to expire: standbys wait
        ``lease_duration`` from the last renewal they saw, ``lease_duration -
        renew_deadline`` after the last moment we could have sent anything. A shared
        Lease is never released: it lapses once the last replica sharing it stops renewing.
        """
        if self._shared:
            return
        with self._lock:
            unsafe = self._writes_in_flight > 0 or self._unanswered
        if unsafe:
            log.warning(
                "leader election: %s leaves lease %s to expire: a write's outcome is unknown",
                self.identity,
                self.lease,
            )
            return
        try:
            self._release(self._clock.now() + self.config.renew_deadline)
        except Exception as exc:  # a bad answer too: stopping must not fail on it
            self._on_error(exc, f"leader election: releasing lease {self.lease}")

    def on_own_thread(self) -> bool:
        """Whether the caller is this elector's thread (in one of its handlers)."""
        return self._thread is threading.current_thread()

    def give_up(self) -> None:
        """Stop leading now (a share rebalanced); the Lease is handed back by
        :meth:`release_if_due` once no write of ours can still be in flight."""
        with self._lock:
            self._epoch += 1
            if self._leading_until is None:
                return
            self._leading_until = None
            self._release_pending = True
        log.info("leader election: %s gives lease %s back", self.identity, self.lease)
        self._on_change(False)

    def release_if_due(self) -> None:
        """Hand a given-up Lease back once no write under it is in flight (see
        :meth:`_release_when_safe`)."""
        with self._lock:
            due = self._release_pending and self._writes_in_flight == 0
            self._release_pending = self._release_pending and not due
        if due and not self._stopping.is_set():
            self._release_when_safe()

    def observe(self, lease: dict[str, Any]) -> None:
        """``lease`` as listed by someone else: noted as a read of our own would be."""
        self._store(lease)

    def live_holder(self) -> str:
        """Who holds the Lease, as last seen, unless it expired since; "" if nobody."""
        return "" if self._expired() else self._holder()

    def is_free(self) -> bool:
        """Whether an attempt to take the Lease could succeed (as far as we have seen)."""
        with self._lock:
            if self._release_pending:
                return False
        return not self.live_holder()

    def _run(self) -> None:
        log.info("leader election: %s is a candidate for lease %s", self.identity, self.lease)
        retry = self.config.retry_period
        while not self._stopping.is_set():
            with self._lock:
                held = self._leading_until is not None
            if not (self._acquires or held):
                delay = retry  # a shard not held: the sharding round may take it
            elif self.try_acquire_or_renew():
                delay = retry
            else:
                delay = retry * (1 + random.random() * JITTER_FACTOR)
            with self._lock:
                until = self._leading_until
            if until is not None:
                # A leader whose renewals fail notices the deadline when it passes.
                delay = min(delay, max(0.0, until - self._clock.now()))
            self._stopping.wait(delay)

    # -- one attempt ----------------------------------------------------------------------

    def try_acquire_or_renew(self) -> bool:
        """One attempt to take or renew the Lease; whether this replica now holds it.

        Never after :meth:`stop` (nor once the handlers it calls have called it).
        """
        with self._attempt_lock:
            if self._stopping.is_set():
                return False
            return self._try_acquire_or_renew()

    def _try_acquire_or_renew(self) -> bool:
        sent = self._clock.now()
        with self._lock:
            if self._release_pending:
                return False  # given back: not ours to take until the release is done
            epoch = self._epoch
            lapsed = self._leading_until is not None and sent >= self._leading_until
            # The whole attempt ends by the renew deadline: a leader's at the moment it
            # stops writing (client-go's renew loop), a candidate's renew_deadline from now.
            deadline = None if lapsed else self._leading_until
        if lapsed:
            self._lose("could not renew the lease within renew_deadline")
            if self._stopping.is_set():  # the error handler stopped us
                return False
        try:
            outcome = self._attempt(
                sent + self.config.renew_deadline if deadline is None else deadline, epoch
            )
        except Exception as exc:  # any failure (a bad answer too) must not end the thread
            outcome = _Outcome.NOT_TAKEN
            # Its kind, not its text (which names the request): a Lease that cannot be read
            # every retry_period is one report, not one each time.
            problem = f"{type(exc).__name__} {getattr(exc, 'status', '')}"
            if problem != self._last_problem:
                self._last_problem = problem
                self._on_error(exc, f"leader election: lease {self.lease}")
        else:
            self._last_problem = None
        acquired = outcome is not _Outcome.NOT_TAKEN
        if acquired and self._stopping.is_set():
            # stop() ran during the attempt (from a handler, on this thread) and released
            # what it saw: this acquisition is not kept, and not told.
            acquired = False
        elif acquired:
            with self._lock:
                if self._epoch != epoch:
                    # give_up() ran while the request was on its way: the Lease names us,
                    # but the round has stopped our writes; hand it back when due.
                    self._release_pending = True
                    return False
                was_leading = self._leading_until is not None
                self._leading_until = sent + self.config.renew_deadline
                if not was_leading and outcome is _Outcome.TAKEN:
                    # A term of its own: someone else held the Lease (or nobody) since our
                    # writes. Taken back while it still named us, it is the same holding,
                    # and a write of it that went unanswered may still commit.
                    self._unanswered = False
            if not was_leading:
                log.info("leader election: %s took lease %s", self.identity, self.lease)
                self._on_change(True)
        elif self._held_by_other():
            self._lose(f"lease held by {self._holder()}{self._other_duration()}")
        return acquired

    def _attempt(self, deadline: float, epoch: int) -> _Outcome:
        now = micro_time()
        if self.is_leader() and self._lease is not None:
            # The fast path: our own last write is the Lease's newest version, unless
            # someone else changed it since (then the slow path below looks). One request,
            # not two, which matters when each is slow; a shared Lease's other replicas
            # often make it fail, and then it costs one more.
            kept = self._lease.get("spec") or {}
            try:
                self._store(self._api.update(self._lease, self._spec(now, kept, 0), deadline))
                return _Outcome.KEPT
            except Exception:
                # Any failure, as client-go: a 409 (someone wrote it), a 404 (someone
                # deleted it: we create it again below, before a standby may), a timeout.
                pass
        # A shared Lease is renewed by every replica of the group, so a renewal may meet a
        # conflict between its read and its write; each replica's term counts from its own
        # renewal, so it reads again rather than count it a failure (measured with 8
        # replicas renewing every 0.4 s: a renewal deadline missed about once a minute).
        for _ in range(_SHARED_TRIES if self._shared else 1):
            outcome = self._read_and_take(now, deadline, epoch)
            if outcome is not None:
                return outcome
        return _Outcome.NOT_TAKEN

    def _read_and_take(self, now: str, deadline: float, epoch: int) -> _Outcome | None:
        """The slow path: read the Lease, take or renew it if we may; None if someone
        wrote it between our read and our write."""
        lease = self._api.get(deadline)
        if self._epoch != epoch:
            return _Outcome.NOT_TAKEN  # given up meanwhile: write nothing more
        if lease is None:
            if self._held_by_other():
                # Deleted under a live holder: a change like any other, the countdown
                # starts again (the holder writes until its term ends, unaware).
                self._note_gone()
                return _Outcome.NOT_TAKEN
            ours = self._holder() == self.identity
            try:
                self._store(self._api.create(self._spec(now, {}, 0), deadline))
            except ApiError as exc:
                if exc.status == 409:  # another candidate created it first
                    return None
                raise
            return _Outcome.KEPT if ours else _Outcome.TAKEN
        self._store(lease)
        spec = lease.get("spec") or {}
        if self._held_by_other():
            return _Outcome.NOT_TAKEN
        ours = self._names_us(spec)
        mine = (
            self._spec(now, spec, 0)
            if ours
            else self._spec(now, {}, 1 + (spec.get("leaseTransitions") or 0))
        )
        try:
            self._store(self._api.update(lease, mine, deadline))
        except ApiError as exc:
            if exc.status == 409:  # another candidate was faster
                return None
            raise
        return _Outcome.KEPT if ours else _Outcome.TAKEN

    def _spec(self, now: str, kept: dict[str, Any], transitions: int) -> dict[str, Any]:
        """Our Lease spec as of ``now``: ``kept``'s acquire time and transitions if we
        hold on to it, else a new acquisition after ``transitions``."""
        return lease_spec(
            self.identity,
            int(self.config.lease_duration),
            kept.get("acquireTime", now),
            now,
            kept.get("leaseTransitions", transitions),
        )

    def _store(self, lease: dict[str, Any]) -> None:
        """Remember ``lease``; a spec not seen before restarts its expiry countdown."""
        spec = lease.get("spec") or {}
        with self._lock:
            self._lease = lease
            if spec != self._observed:
                self._observed = spec
                self._observed_at = self._clock.now()

    def _expired(self) -> bool:
        with self._lock:
            duration = (self._observed or {}).get("leaseDurationSeconds") or 0
            return self._clock.now() >= self._observed_at + duration

    def _holder(self) -> str:
        with self._lock:
            return str((self._observed or {}).get("holderIdentity") or "")

    def _other_duration(self) -> str:
        """For a shared Lease held under our name with another duration: what it says."""
        with self._lock:
            spec = self._observed or {}
        if not self._shared or spec.get("holderIdentity") != self.identity:
            return ""
        return (
            f" with leaseDurationSeconds {spec.get('leaseDurationSeconds')} "
            f"(ours: {int(self.config.lease_duration)})"
        )

    def _names_us(self, spec: dict[str, Any]) -> bool:
        """Whether ``spec`` is a holding of ours.

        A shared Lease must also say our ``lease_duration``: it holds the last writer's, and
        standbys wait that long after the last renewal. A replica with a shorter one would
        shorten it for replicas whose renew deadline is longer (still writing when a
        standby takes over); so another duration is another holder, as another K is.
        """
        if spec.get("holderIdentity") != self.identity:
            return False
        return not self._shared or spec.get("leaseDurationSeconds") == int(
            self.config.lease_duration
        )

    def _held_by_other(self) -> bool:
        with self._lock:
            spec = dict(self._observed or {})
        return bool(spec.get("holderIdentity")) and not self._names_us(spec) and not self._expired()

    def _note_gone(self) -> None:
        """The Lease was deleted: its disappearance is noted as a change, once."""
        with self._lock:
            if self._observed is not None and not self._observed.get(_GONE):
                self._observed = {**self._observed, _GONE: True}
                self._observed_at = self._clock.now()

    def _lose(self, why: str) -> None:
        with self._lock:
            if self._leading_until is None:
                return
            self._leading_until = None
        log.warning("leader election: %s lost lease %s: %s", self.identity, self.lease, why)
        self._on_change(False)
        self._on_error(
            LeadershipLostError(self.lease, self.identity, why),
            f"leader election: lease {self.lease}",
        )

    def _release(self, deadline: float) -> None:
        """Hand the Lease back (empty holder, as client-go does), if it still names us."""
        for _ in range(3):  # a conflict: someone wrote it meanwhile; look again
            lease = self._api.get(deadline)
            spec = (lease or {}).get("spec") or {}
            if lease is None or spec.get("holderIdentity") != self.identity:
                return
            now = micro_time()
            released = lease_spec("", 1, now, now, spec.get("leaseTransitions", 0))
            try:
                self._api.update(lease, released, deadline)
            except ApiError as exc:
                if exc.status != 409:
                    raise
                continue
            log.info("leader election: %s released lease %s", self.identity, self.lease)
            return
