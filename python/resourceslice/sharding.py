"""Pools sharded across replicas: one Lease per shard, held by the replicas in fair shares.

For an inventory too large for one process, ``LeaderElection(..., shards=K)`` splits the
driver's pools into K shards by a stable hash of the pool name. Shard ``i`` is the Lease
``<name>-shard-<i>``, taken and renewed exactly as the single Lease of plain leader election
(:class:`~resourceslice.leaderelection.LeaderElector`), so one pool is never written by two
replicas at once. Each replica also renews a Lease of its own, ``<name>-member-<digest>``:
that is how the replicas see each other, including one that holds no shard yet.

Each held Lease (membership, shards) is renewed by a thread of its own, as client-go renews
each Lease in a loop of its own: one slow request then delays only its own Lease, not the
renewals queued behind it nor behind the list, and a shard whose renewals fail lapses
alone, told to the controller (``on_change(False)``, ``LeadershipLostError``), and is taken
back once a renewal succeeds while the Lease still names us. Every ``retry_period`` a
replica lists the Leases of the group and compares its share with the others'
(:func:`share_change`): over ``ceil(K / replicas)`` it
gives shards back; when another replica is starved the most loaded one gives one back; the
least loaded take free shards (never created, released, or expired: a dead replica's shards
expire ``lease_duration`` after its last renewal, as its membership does). Shares end
within one of each other.

Replicas with different K (a rollout that changes it) would map one pool to shards held by
two of them. So K is recorded where every replica reads it on every attempt: the holder of
the group's Lease ``<name>``, the Lease of plain leader election. A plain leader (K = 1)
holds it under its own identity; the replicas of a sharded group hold it together under
``resourceslice.io/shards=K`` (:data:`~resourceslice.leaderelection.SHARDS_HOLDER`), each
renewing it with a write of its own. A replica writes a pool only while it holds both that
Lease and the pool's shard, so the write deadline of either ends its writes; it takes
shards only while it holds the group's Lease, and gives them back when it loses it.
Replicas with another K therefore write nothing until the Lease is theirs: taken once it
was released (a plain leader that stopped) or went unrenewed for ``lease_duration``, the
same rule and the same proof as plain leader election, with the holder standing for a
number of shards instead of a replica. The Lease's ``leaseDurationSeconds`` is part of that
holding too: it is the last renewer's, and standbys wait that long, so replicas with another
``lease_duration`` are another holder (a shorter one would end the wait while a replica with a
longer renew deadline still writes). A sharded group never releases it: a replica that
stops cannot know that none of the others still writes under it.
"""

from __future__ import annotations

import hashlib
import logging
import random
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from resourceslice._lease import list_leases
from resourceslice.leaderelection import (
    JITTER_FACTOR,
    SHARDS_HOLDER,
    LeaderElection,
    LeaderElector,
    NotLeaderError,
    default_identity,
)
from resourceslice.workqueue import Clock, MonotonicClock

if TYPE_CHECKING:
    from resourceslice.connection import Client

log = logging.getLogger("resourceslice")

#: On every Lease of a sharded group, so that one list finds them all.
GROUP_LABEL = "resourceslice.io/lease-group"
#: On the membership and shard Leases: the number of shards of the replica that wrote them.
SHARDS_LABEL = "resourceslice.io/shards"


def shard_of(pool: str, shards: int) -> int:
    """The shard of ``pool``: the same in every replica, process and release."""
    digest = hashlib.sha256(pool.encode()).digest()
    return int.from_bytes(digest[:8], "big") % shards


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def share_change(me: str, held: Mapping[str, int], shards: int) -> int:
    """How many shards ``me`` should take (> 0) or give back (< 0) this round.

    ``held``: shards held by every live replica, ``me`` included (0 for one holding none).
    """
    replicas = len(held)
    most, least = -(-shards // replicas), shards // replicas
    mine = held[me]
    if mine > most:
        return most - mine
    lowest = min(held.values())
    if lowest < least and mine > least:
        # Someone is starved and no shard is free for it: the most loaded replica (the
        # greatest identity among equals, so that only one does) gives one back.
        top = max(held.items(), key=lambda item: (item[1], item[0]))[0]
        return -1 if top == me else 0
    if mine < most and mine <= lowest:
        return most - mine  # the least loaded take free shards first
    return 0


class ShardedElector:
    """This replica's shards of one group, in a thread of its own.

    ``on_change(leading, covers)``: this replica took (or lost) the shard whose pools
    ``covers`` selects. The interface the controller uses is :class:`LeaderElector`'s, by
    pool: :meth:`holds`, :meth:`write_budget`.
    """

    def __init__(
        self,
        api_client: Client,
        config: LeaderElection,
        *,
        on_change: Callable[[bool, Callable[[str], bool]], None],
        on_error: Callable[[BaseException, str], None],
        clock: Clock | None = None,
    ) -> None:
        self.config = config
        self._client = api_client
        self._clock = clock or MonotonicClock()
        self._on_error = on_error
        self._group = _digest(f"{config.namespace}/{config.name}")
        labels = {GROUP_LABEL: self._group, SHARDS_LABEL: str(config.shards)}
        self.identity = config.identity or default_identity()
        # The group's Lease, held with every replica of the same K: see the module's doc.
        self.in_force = LeaderElector(
            api_client,
            _election(config, config.name),
            on_change=self._in_force_changed,
            on_error=on_error,
            clock=self._clock,
            labels={GROUP_LABEL: self._group},
            acquires=False,
            shared=True,
            holder=f"{SHARDS_HOLDER}{config.shards}",
        )
        self.member = LeaderElector(
            api_client,
            _election(config, f"{config.name}-member-{_digest(self.identity)}", self.identity),
            on_change=lambda leading: None,
            on_error=on_error,
            clock=self._clock,
            labels=labels,
        )
        self._shards = [
            LeaderElector(
                api_client,
                _election(config, f"{config.name}-shard-{i}", self.identity),
                on_change=self._changed(i, on_change),
                on_error=on_error,
                clock=self._clock,
                labels=labels,
                acquires=False,
            )
            for i in range(config.shards)
        ]
        # Member Lease name -> (its spec, when we first saw that spec).
        self._members: dict[str, tuple[dict[str, Any], float]] = {}
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def _in_force_changed(self, leading: bool) -> None:
        if not leading:  # another K may take over: our shards are not ours to write
            for shard in self._shards:
                shard.give_up()

    def _changed(
        self, shard: int, on_change: Callable[[bool, Callable[[str], bool]], None]
    ) -> Callable[[bool], None]:
        def changed(leading: bool) -> None:
            on_change(leading, lambda pool: shard_of(pool, self.config.shards) == shard)

        return changed

    # -- what the controller asks ---------------------------------------------------------

    def holds(self, pool: str) -> bool:
        shard = self._shards[shard_of(pool, self.config.shards)]
        return self.in_force.is_leader() and shard.is_leader()

    def is_leader(self) -> bool:
        """Whether this replica holds at least one shard (and its K is in force)."""
        return self.in_force.is_leader() and any(shard.is_leader() for shard in self._shards)

    def held(self) -> list[int]:
        return [i for i, shard in enumerate(self._shards) if shard.is_leader()]

    def write_budget(self, pool: str | None = None) -> float:
        if pool is None:
            raise NotLeaderError("a write of a sharded controller outside a pool's sync")
        # Both terms must last until the write's answer: the shard's and the group's.
        in_force = self.in_force.remaining()
        if in_force <= 0:
            raise NotLeaderError(f"{self.identity}: shards={self.config.shards} not in force")
        return min(in_force, self._shards[shard_of(pool, self.config.shards)].write_budget())

    def write_ended(self, pool: str | None, answered: bool) -> None:
        if pool is not None:
            self._shards[shard_of(pool, self.config.shards)].write_ended(pool, answered)

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        for elector in (self.in_force, self.member, *self._shards):
            elector.start()
        self._thread = threading.Thread(target=self._run, name="resourceslice-shards", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Give every shard back (successors take them at once), then the membership;
        stop renewing the group's Lease (never released: see the module's doc).

        The shards are stopped together, each release bounded by the renew deadline, so
        that stopping takes one deadline at most, not one per shard.
        """
        self._stopping.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        # An elector's own thread (stop() called from its handler) stops it itself: a
        # helper thread would wait for it to end.
        electors = [*self._shards, self.in_force]
        own = [elector for elector in electors if elector.on_own_thread()]
        stopping = [
            threading.Thread(target=elector.stop, name="resourceslice-shard-stop", daemon=True)
            for elector in electors
            if elector not in own
        ]
        for stopper in stopping:
            stopper.start()
        for elector in own:
            elector.stop()
        for stopper in stopping:
            stopper.join()
        self.member.stop()

    def _run(self) -> None:
        retry = self.config.retry_period
        while not self._stopping.is_set():
            try:
                self.round()
            except Exception as exc:  # the thread must not end; held shards lapse on time
                self._on_error(exc, f"sharding: leases {self.config.name}-shard-*")
            self._stopping.wait(retry * (1 + random.random() * JITTER_FACTOR / 2))

    # -- one round ------------------------------------------------------------------------

    def round(self) -> None:
        """Take or give back shards toward a fair share (renewals run on their own), once
        this replica holds the group's Lease: K in force."""
        for shard in self._shards:
            shard.release_if_due()
        holders = self._observe(self._list())
        if self._stopping.is_set():
            return
        if not (self.in_force.is_leader() or self.in_force.try_acquire_or_renew()):
            return  # a plain leader, or replicas with another K, hold the group's Lease
        held = {identity: 0 for identity in self._live_members()}
        held[self.identity] = 0
        for holder in holders:
            if holder in held:
                held[holder] += 1
        mine = self.held()
        held[self.identity] = len(mine)
        change = share_change(self.identity, held, self.config.shards)
        if change < 0:
            for i in sorted(mine, reverse=True)[:-change]:
                self._shards[i].give_up()
        elif change > 0:
            free = [i for i, shard in enumerate(self._shards) if shard.is_free()]
            random.shuffle(free)  # replicas taking at once mostly try different shards
            for i in free:
                if change == 0 or self._stopping.is_set():
                    break
                if self._shards[i].try_acquire_or_renew():
                    change -= 1

    def _list(self) -> list[dict[str, Any]]:
        # Bounded like a Lease attempt: a hung list delays the next round, not renewals.
        return list_leases(
            self._client,
            self.config.namespace,
            f"{GROUP_LABEL}={self._group}",
            self.config.renew_deadline,
        )

    def _observe(self, leases: list[dict[str, Any]]) -> list[str]:
        """Note every Lease of the group as seen now; the live holders of shards."""
        by_name = {lease["metadata"]["name"]: lease for lease in leases}
        now = self._clock.now()
        members: dict[str, tuple[dict[str, Any], float]] = {}
        prefix = f"{self.config.name}-member-"
        shards = str(self.config.shards)
        for name, lease in by_name.items():
            # Replicas with another K do not share our shards (nor write while we do).
            labels = lease["metadata"].get("labels") or {}
            if name.startswith(prefix) and labels.get(SHARDS_LABEL, shards) == shards:
                spec = lease.get("spec") or {}
                seen = self._members.get(name)
                members[name] = (spec, seen[1] if seen and seen[0] == spec else now)
        self._members = members
        holders = []
        for i, shard in enumerate(self._shards):
            listed = by_name.get(f"{self.config.name}-shard-{i}")
            if listed is not None:
                shard.observe(listed)
            holder = shard.live_holder()
            if holder:
                holders.append(holder)
        return holders

    def _live_members(self) -> list[str]:
        now = self._clock.now()
        return [
            str(spec["holderIdentity"])
            for spec, seen in self._members.values()
            if spec.get("holderIdentity")
            and now < seen + float(spec.get("leaseDurationSeconds") or 0)
        ]


def _election(config: LeaderElection, name: str, identity: str | None = None) -> LeaderElection:
    """The settings of the Lease ``name`` of ``config``'s group."""
    return LeaderElection(
        config.namespace,
        name,
        identity=identity or config.identity,
        lease_duration=config.lease_duration,
        renew_deadline=config.renew_deadline,
        retry_period=config.retry_period,
    )
