"""Sharded controllers on a real apiserver: shares, a replica joining, one leaving."""

from __future__ import annotations

from collections import Counter

import kubernetes.client
import pytest

import resourceslice as rs
from resourceslice.leaderelection import LeaderElector
from resourceslice.sharding import GROUP_LABEL, ShardedElector
from resourceslice.testing import wait_until
from support.controller_env import ControllerEnv, device, library_twin, pools

pytestmark = pytest.mark.integration

NAMESPACE = "default"
SHARDS = 6


def test_replicas_share_the_shards_and_move_them_without_writes(env: ControllerEnv) -> None:
    name = env.driver.split(".")[0]
    election = rs.LeaderElection(
        NAMESPACE, name, lease_duration=3, renew_deadline=2, retry_period=0.4, shards=SHARDS
    )
    wanted = pools(**{f"pool-{i:02d}": rs.Pool(devices=[device(i)]) for i in range(24)})
    leases = kubernetes.client.CoordinationV1Api(env.admin)
    counters = []
    controllers: dict[str, rs.Controller] = {}

    def start(resources: rs.DriverResources = wanted) -> rs.Controller:
        counters.append(env.new_counter())
        ctrl = env.start(resources, leader_election=election, sync_delay=0.2)
        controllers[ctrl._elector.identity] = ctrl  # type: ignore[union-attr]
        return ctrl

    def shares() -> Counter[str]:
        listed = leases.list_namespaced_lease(NAMESPACE).items
        shard_leases = [
            lease
            for lease in listed
            if lease.metadata.name.startswith(f"{name}-shard-")
            and (lease.metadata.labels or {}).get(GROUP_LABEL)
        ]
        assert len(shard_leases) <= SHARDS
        return Counter(lease.spec.holder_identity or "" for lease in shard_leases)

    def balanced(replicas: int) -> bool:
        held = shares()
        live = [held.get(identity, 0) for identity in controllers]
        return len(live) == replicas and sum(live) == SHARDS and max(live) - min(live) <= 1

    def slice_writes() -> int:
        return sum(sum(c.writes("resourceslices").values()) for c in counters)

    # The pools come once both share the shards (the first to start could otherwise
    # publish them all before the second joins): each publishes its shards' pools,
    # together every pool, once.
    first, second = start(pools()), start(pools())
    wait_until(lambda: balanced(2), describe=lambda: str(shares()))
    first.update(wanted)
    second.update(wanted)
    assert first.wait_synced(30) and second.wait_synced(30), env.errors
    assert sorted(s["spec"]["pool"]["name"] for s in env.slices()) == sorted(wanted.pools)
    assert slice_writes() == len(wanted.pools)
    assert first.stats().creates > 0 and second.stats().creates > 0

    # A third replica: the others give shards back to it (after their writes' budgets),
    # and nothing is rewritten, the pools being as desired.
    third = start()
    wait_until(lambda: balanced(3), describe=lambda: str(shares()))
    assert third.wait_synced(30), env.errors
    assert third.is_leader()
    assert slice_writes() == len(wanted.pools)

    # One stops: its shards are released, and taken by the others at once.
    del controllers[first._elector.identity]  # type: ignore[union-attr]
    first.stop()
    wait_until(lambda: balanced(2), describe=lambda: str(shares()))
    assert second.wait_synced(30) and third.wait_synced(30)
    assert slice_writes() == len(wanted.pools)
    assert not [e for e, _ in env.errors if isinstance(e, rs.ConflictingWriterError)]
    for ctrl in (second, third):
        ctrl.stop()
    group = leases.read_namespaced_lease(f"{name}-shard-0", NAMESPACE).metadata.labels
    leases.delete_collection_namespaced_lease(
        NAMESPACE, label_selector=f"{GROUP_LABEL}={group[GROUP_LABEL]}"
    )


def test_only_one_number_of_shards_is_in_force(kube_client: kubernetes.client.ApiClient) -> None:
    """A sharded replica takes no shard (so writes no pool) while a plain leader holds the
    group's Lease, nor while replicas with another number of shards do, until it lapses."""
    name = "in-force"
    timings = {"lease_duration": 3.0, "renew_deadline": 2.0, "retry_period": 0.4}

    def sharded(identity: str, shards: int) -> ShardedElector:
        return ShardedElector(
            library_twin(kube_client),
            rs.LeaderElection(NAMESPACE, name, identity=identity, shards=shards, **timings),
            on_change=lambda leading, covers: None,
            on_error=lambda exc, _: None,
        )

    def plain(identity: str) -> LeaderElector:
        return LeaderElector(
            library_twin(kube_client),
            rs.LeaderElection(NAMESPACE, name, identity=identity, **timings),
            on_change=lambda leading: None,
            on_error=lambda exc, _: None,
        )

    def holder() -> str:
        lease = kubernetes.client.CoordinationV1Api(kube_client).read_namespaced_lease(
            name, NAMESPACE
        )
        return str(lease.spec.holder_identity or "")

    leader = plain("plain")
    assert leader.try_acquire_or_renew()
    four, three = sharded("four", 4), sharded("three", 3)
    four.round()
    assert four.held() == [] and not four.holds("pool-0")
    leader.stop()  # released: the next round takes it at once, and every shard
    four.round()
    assert holder() == "resourceslice.io/shards=4"
    assert four.held() == [0, 1, 2, 3] and four.holds("pool-0")
    three.round()
    assert three.held() == []
    assert not plain("another plain").try_acquire_or_renew()

    # The K=4 replica stops: its shards are released, the group's Lease only lapses.
    four.stop()
    three.round()
    assert three.held() == []

    def taken() -> bool:
        three.round()
        return three.held() == [0, 1, 2]

    wait_until(taken, timeout=10, interval=0.2)
    assert holder() == "resourceslice.io/shards=3"
    three.stop()
