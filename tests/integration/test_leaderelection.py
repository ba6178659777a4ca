"""Leader election on a real apiserver's Lease: the elector alone, then controllers.

The elector's attempts are made by hand with a clock of the test's own, so expiry is
decided by moving that clock, never by waiting.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import kubernetes.client
import pytest
from prometheus_client import CollectorRegistry

import resourceslice as rs
from resourceslice import metrics
from resourceslice.leaderelection import LeaderElector, NotLeaderError
from resourceslice.testing import TestCluster, wait_until
from resourceslice.testing.faultproxy import FaultProxy
from support.controller_env import ControllerEnv, device, library_twin, pools
from support.fakes import FakeClock

pytestmark = pytest.mark.integration

NAMESPACE = "default"
SHORT = {"lease_duration": 3.0, "renew_deadline": 2.0, "retry_period": 0.5}


class Candidate:
    """An elector with a clock of its own, and what it told its controller."""

    def __init__(self, client: kubernetes.client.ApiClient, lease: str, identity: str) -> None:
        self.clock = FakeClock()
        self.changes: list[bool] = []
        self.errors: list[BaseException] = []
        self.elector = LeaderElector(
            library_twin(client),
            rs.LeaderElection(NAMESPACE, lease, identity=identity, **SHORT),
            on_change=self.changes.append,
            on_error=lambda exc, _: self.errors.append(exc),
            clock=self.clock,
        )


@pytest.fixture
def coordination(kube_client: kubernetes.client.ApiClient) -> kubernetes.client.CoordinationV1Api:
    return kubernetes.client.CoordinationV1Api(kube_client)


def lease(api: kubernetes.client.CoordinationV1Api, name: str) -> dict[str, Any]:
    response = api.read_namespaced_lease(name, NAMESPACE, _preload_content=False)
    spec: dict[str, Any] = json.loads(response.data)["spec"]
    return spec


def test_the_apiserver_serves_leases(kube_client: kubernetes.client.ApiClient) -> None:
    groups = kubernetes.client.ApisApi(kube_client).get_api_versions()
    versions = {v.group_version for g in groups.groups for v in g.versions}
    assert "coordination.k8s.io/v1" in versions


def test_acquire_renew_expire_take_over_release(
    kube_client: kubernetes.client.ApiClient,
    coordination: kubernetes.client.CoordinationV1Api,
    lease_name: str,
) -> None:
    a = Candidate(kube_client, lease_name, "replica-a")
    b = Candidate(kube_client, lease_name, "replica-b")
    # The first candidate creates the Lease and holds it.
    assert a.elector.try_acquire_or_renew()
    assert a.changes == [True] and a.elector.is_leader()
    first = lease(coordination, lease_name)
    assert first["holderIdentity"] == "replica-a"
    assert first["leaseDurationSeconds"] == 3
    assert first["leaseTransitions"] == 0
    # Another candidate sees it held, and has just seen it: not expired.
    assert not b.elector.try_acquire_or_renew()
    assert not b.elector.is_leader() and b.changes == []
    with pytest.raises(NotLeaderError):
        b.elector.write_budget()
    # Renewing moves renewTime only, and restarts the others' countdown.
    a.clock.advance(1.0)
    b.clock.advance(2.9)
    assert a.elector.try_acquire_or_renew()
    renewed = lease(coordination, lease_name)
    assert renewed["acquireTime"] == first["acquireTime"]
    assert renewed["renewTime"] != first["renewTime"]
    assert renewed["leaseTransitions"] == 0
    assert not b.elector.try_acquire_or_renew()  # a new renewTime: counted from now
    b.clock.advance(2.9)
    assert not b.elector.try_acquire_or_renew()
    # The leader stops writing renew_deadline after its last renewal was sent...
    a.clock.advance(1.9)
    assert 0 < a.elector.write_budget() <= 0.1 + 1e-9
    a.clock.advance(0.2)
    assert not a.elector.is_leader()
    with pytest.raises(NotLeaderError):
        a.elector.write_budget()
    # ...which is before the others may take over: lease_duration after they saw it.
    b.clock.advance(0.1)
    assert b.elector.try_acquire_or_renew()
    assert b.changes == [True]
    taken = lease(coordination, lease_name)
    assert taken["holderIdentity"] == "replica-b"
    assert taken["leaseTransitions"] == 1
    # The old leader's next attempt finds the Lease taken (its update conflicts) and is
    # told so; it is a standby again.
    assert not a.elector.try_acquire_or_renew()
    assert a.changes == [True, False]
    [lost] = a.errors
    assert isinstance(lost, rs.LeadershipLostError)
    assert lost.identity == "replica-a" and lost.lease == f"{NAMESPACE}/{lease_name}"
    # Stopping the leader gives the Lease back: the standby takes it without waiting.
    b.elector.stop()
    released = lease(coordination, lease_name)
    assert released["holderIdentity"] in ("", None)
    assert released["leaseTransitions"] == 1
    assert a.elector.try_acquire_or_renew()
    assert lease(coordination, lease_name)["leaseTransitions"] == 2
    # A standby's stop leaves the holder's Lease alone.
    b2 = Candidate(kube_client, lease_name, "replica-b")
    assert not b2.elector.try_acquire_or_renew()
    b2.elector.stop()
    assert lease(coordination, lease_name)["holderIdentity"] == "replica-a"
    coordination.delete_namespaced_lease(lease_name, NAMESPACE)


def test_a_leader_that_lost_the_lease_is_told_at_once(
    kube_client: kubernetes.client.ApiClient,
    coordination: kubernetes.client.CoordinationV1Api,
    lease_name: str,
) -> None:
    """Someone else wrote the Lease while we still counted ourselves the leader (a clock
    that ran slow): the renewal conflicts, and leadership ends there, not at the deadline."""
    a = Candidate(kube_client, lease_name, "replica-a")
    assert a.elector.try_acquire_or_renew()
    body = coordination.read_namespaced_lease(lease_name, NAMESPACE)
    body.spec.holder_identity = "intruder"
    coordination.replace_namespaced_lease(lease_name, NAMESPACE, body)
    assert a.elector.is_leader()
    assert not a.elector.try_acquire_or_renew()
    assert not a.elector.is_leader()
    assert a.changes == [True, False]
    assert isinstance(a.errors[0], rs.LeadershipLostError)
    assert "intruder" in str(a.errors[0])
    coordination.delete_namespaced_lease(lease_name, NAMESPACE)


def test_lease_errors_reach_the_error_handler_once(
    kube_cluster: TestCluster, lease_name: str
) -> None:
    """No RBAC for Leases (the `driver` user has no rights): reported, once per kind."""
    client = kube_cluster.api_client("driver")
    try:
        a = Candidate(client, lease_name, "replica-a")
        assert not a.elector.try_acquire_or_renew()
        assert not a.elector.try_acquire_or_renew()
        [denied] = a.errors
        assert isinstance(denied, kubernetes.client.ApiException) and denied.status == 403
    finally:
        client.close()


def test_controllers_standby_writes_nothing_and_takes_over_on_stop(
    env: ControllerEnv, lease_name: str
) -> None:
    coordination = kubernetes.client.CoordinationV1Api(env.admin)  # the env's cluster
    election = rs.LeaderElection(NAMESPACE, lease_name, **SHORT)
    one = pools(p=rs.Pool(devices=[device(i) for i in range(3)]))
    two = pools(p=rs.Pool(devices=[device(i) for i in range(5)]))
    first_counter = env.counter
    first = env.start_synced(one, leader_election=election, sync_delay=0.2)
    assert first.is_leader()
    second_counter = env.new_counter()
    second = env.start(two, leader_election=election, sync_delay=0.2)
    # The standby's informer is warm, and it writes nothing, whatever it wants.
    wait_until(lambda: second._informer.wait_synced(0))
    assert not second.is_leader()
    registries = [CollectorRegistry(), CollectorRegistry()]
    for ctrl, registry in zip((first, second), registries):
        metrics.register(ctrl, registry=registry)

    def leader_gauges() -> list[float | None]:
        labels = {"driver": env.driver}
        return [r.get_sample_value("resourceslice_leader", labels) for r in registries]

    assert leader_gauges() == [1, 0]
    assert not second.wait_synced(0.5)
    assert second_counter.writes("resourceslices") == {}
    assert len(env.slices()) == 1 and len(env.slices()[0]["spec"]["devices"]) == 3
    # stop() hands the Lease over: the standby publishes its own state at once.
    first.stop()
    assert second.wait_synced(10), env.errors
    assert second.is_leader()
    assert leader_gauges() == [0, 1]
    assert len(env.slices()[0]["spec"]["devices"]) == 5
    assert sum(second_counter.writes("resourceslices").values()) == 1
    assert first_counter.writes("resourceslices") == {"POST": 1}
    second.stop()
    coordination.delete_namespaced_lease(lease_name, NAMESPACE)


# -- faults a review reproduced: each test failed before its fix --------------------------


class HeldRequests:
    """A rule for a FaultProxy that holds each chosen request before it reaches the server
    until the test lets it go (:meth:`release`); the others pass."""

    def __init__(self, method: str, path_contains: str, count: int = 1) -> None:
        self.method = method
        self.path_contains = path_contains
        self.count = count
        self._cond = threading.Condition()
        self._held = 0
        self._released = 0

    def __call__(self, method: str, path: str) -> None:
        if method != self.method or self.path_contains not in path:
            return None
        with self._cond:
            if self._held == self.count:
                return None
            self._held += 1
            mine = self._held
            self._cond.notify_all()
            self._cond.wait_for(lambda: self._released >= mine, 30)
        return None

    def arrived(self, n: int = 1) -> bool:
        """Whether the ``n``th chosen request arrived (waits for it, 30 s at most)."""
        with self._cond:
            return self._cond.wait_for(lambda: self._held >= n, 30)

    def release(self) -> None:
        """Let the oldest request still held go on."""
        with self._cond:
            self._released += 1
            self._cond.notify_all()


def test_a_lease_given_up_during_its_renewal_is_not_held_again(
    kube_cluster: TestCluster,
    coordination: kubernetes.client.CoordinationV1Api,
    lease_name: str,
) -> None:
    """give_up() (a sharding round) while the renewal's PUT is on its way: the PUT
    succeeds, but the renewal began before the give-up and must not start a new term, or
    the round's release would hand the Lease on while this replica still writes."""
    with FaultProxy(kube_cluster) as proxy, proxy.api_client() as client:
        a = Candidate(client, lease_name, "replica-a")
        assert a.elector.try_acquire_or_renew()
        held = HeldRequests("PUT", lease_name)
        proxy.rule = held
        a.clock.advance(0.5)
        renewal = threading.Thread(target=a.elector.try_acquire_or_renew)
        renewal.start()
        assert held.arrived()
        a.elector.give_up()
        assert not a.elector.is_leader()
        held.release()
        renewal.join(30)
        assert lease(coordination, lease_name)["holderIdentity"] == "replica-a"
        # The renewal landed, and changed nothing here: not leading, and told once.
        assert not a.elector.is_leader()
        assert a.changes == [True, False]
        with pytest.raises(NotLeaderError):
            a.elector.write_budget()
        # The round hands the Lease back; the replica never counted itself the holder since.
        a.elector.release_if_due()
        assert lease(coordination, lease_name)["holderIdentity"] in ("", None)
        assert not a.elector.is_leader()
    coordination.delete_namespaced_lease(lease_name, NAMESPACE)


def test_a_deleted_lease_is_not_taken_while_its_holder_may_write(
    kube_client: kubernetes.client.ApiClient,
    coordination: kubernetes.client.CoordinationV1Api,
    lease_name: str,
) -> None:
    """Someone deletes the Lease (a cleanup script, a namespace being emptied). A candidate
    that saw a live holder counts the disappearance as a change: it waits lease_duration
    from it, while the holder, whose renewal met 404, creates the Lease again at once."""
    a = Candidate(kube_client, lease_name, "replica-a")
    b = Candidate(kube_client, lease_name, "replica-b")
    assert a.elector.try_acquire_or_renew()
    assert not b.elector.try_acquire_or_renew()
    coordination.delete_namespaced_lease(lease_name, NAMESPACE)
    # The candidate first: it does not create the Lease while a may still be writing.
    b.clock.advance(1.0)
    assert not b.elector.try_acquire_or_renew()
    assert b.changes == []
    b.clock.advance(2.9)  # 3.9 s since a's renewal, 2.9 s since the Lease vanished
    assert not b.elector.try_acquire_or_renew()
    # The holder's renewal meets 404, takes the slow path and creates the Lease again.
    a.clock.advance(1.0)
    assert a.elector.try_acquire_or_renew()
    assert a.changes == [True] and a.errors == []
    assert lease(coordination, lease_name)["holderIdentity"] == "replica-a"
    assert not b.elector.try_acquire_or_renew()
    # Without its holder, a deleted Lease is taken lease_duration after it vanished.
    coordination.delete_namespaced_lease(lease_name, NAMESPACE)
    assert not b.elector.try_acquire_or_renew()
    b.clock.advance(3.0)
    assert b.elector.try_acquire_or_renew()
    assert lease(coordination, lease_name)["holderIdentity"] == "replica-b"
    coordination.delete_namespaced_lease(lease_name, NAMESPACE)


def test_replicas_sharing_a_lease_with_other_durations_do_not_share_it(
    kube_client: kubernetes.client.ApiClient,
    coordination: kubernetes.client.CoordinationV1Api,
    lease_name: str,
) -> None:
    """A shared Lease (a sharded group's) says one leaseDurationSeconds: the last writer's.
    A replica whose own is shorter would shorten everyone's: the others could still be
    writing when a standby takes over. So it is one more way of being another holder."""
    holder = "resourceslice.io/shards=2"

    def sharer(identity: str, duration: int, deadline: float) -> Candidate:
        candidate = Candidate(kube_client, lease_name, identity)
        candidate.elector = LeaderElector(
            kube_client,
            rs.LeaderElection(
                NAMESPACE,
                lease_name,
                lease_duration=duration,
                renew_deadline=deadline,
                retry_period=0.5,
            ),
            on_change=candidate.changes.append,
            on_error=lambda exc, _: candidate.errors.append(exc),
            clock=candidate.clock,
            shared=True,
            holder=holder,
        )
        return candidate

    long = sharer("long", 30, 25.0)
    short = sharer("short", 3, 2.0)
    plain = Candidate(kube_client, lease_name, "plain")
    assert long.elector.try_acquire_or_renew()
    # The short one does not renew it with its 3 s: it waits as any other holder would.
    short.clock.advance(0.5)
    assert not short.elector.try_acquire_or_renew()
    assert lease(coordination, lease_name)["leaseDurationSeconds"] == 30
    assert not short.elector.is_leader() and short.changes == []
    # So a plain candidate waits out the long replica's 30 s, not 3 s.
    assert not plain.elector.try_acquire_or_renew()
    plain.clock.advance(3.5)
    long.clock.advance(3.5)
    assert long.elector.remaining() > 20
    assert not plain.elector.try_acquire_or_renew()
    # Once the long replica's term lapsed and nobody renewed, the short one takes over.
    short.clock.advance(30.0)
    assert short.elector.try_acquire_or_renew()
    assert lease(coordination, lease_name)["leaseDurationSeconds"] == 3
    coordination.delete_namespaced_lease(lease_name, NAMESPACE)


def test_an_unanswered_write_survives_a_term_that_lapsed_on_our_clock_only(
    kube_client: kubernetes.client.ApiClient,
    coordination: kubernetes.client.CoordinationV1Api,
    lease_name: str,
) -> None:
    """A write ended without an answer; the term lapsed on this replica's clock (renewals
    too slow), and its next renewal finds the Lease still naming it: the same holding goes
    on, and the write may still commit, so stop() must not hand the Lease straight on."""
    a = Candidate(kube_client, lease_name, "replica-a")
    assert a.elector.try_acquire_or_renew()
    a.elector.write_budget()
    a.elector.write_ended(None, answered=False)
    a.clock.advance(2.5)  # past renew_deadline: leadership lapses here
    assert a.elector.try_acquire_or_renew()  # and the Lease, still ours, is renewed
    assert a.changes == [True, False, True]
    a.elector.stop()
    assert lease(coordination, lease_name)["holderIdentity"] == "replica-a"
    coordination.delete_namespaced_lease(lease_name, NAMESPACE)


def test_a_shared_lease_renewed_by_another_replica_meanwhile_is_read_again(
    kube_cluster: TestCluster,
    kube_client: kubernetes.client.ApiClient,
    coordination: kubernetes.client.CoordinationV1Api,
    lease_name: str,
) -> None:
    """The replicas of a sharded group all renew one Lease: another's renewal between our
    read and our write is a conflict, not a failed renewal (with 8 replicas, renewals that
    gave up there let a replica's term lapse about once a minute, and every shard with it)."""
    holder = "resourceslice.io/shards=2"

    def sharer(client: kubernetes.client.ApiClient, identity: str) -> Candidate:
        candidate = Candidate(client, lease_name, identity)
        candidate.elector = LeaderElector(
            client,
            rs.LeaderElection(NAMESPACE, lease_name, **SHORT),
            on_change=candidate.changes.append,
            on_error=lambda exc, _: candidate.errors.append(exc),
            clock=candidate.clock,
            shared=True,
            holder=holder,
        )
        return candidate

    with FaultProxy(kube_cluster) as proxy, proxy.api_client() as client:
        a, b = sharer(client, "a"), sharer(kube_client, "b")
        assert a.elector.try_acquire_or_renew() and b.elector.try_acquire_or_renew()
        writes = HeldRequests("PUT", lease_name, count=2)
        proxy.rule = writes
        a.clock.advance(1.9)  # the last renewal this term allows
        renewal = threading.Thread(target=a.elector.try_acquire_or_renew)
        renewal.start()
        for n in (1, 2):  # twice, b renews while a's write is on its way
            assert writes.arrived(n)
            b.clock.advance(0.5)
            assert b.elector.try_acquire_or_renew()
            writes.release()
        renewal.join(30)
        a.clock.advance(0.2)  # past the old term: only the renewal keeps a leading
        assert a.elector.is_leader()
        assert a.changes == [True] and a.errors == []
    coordination.delete_namespaced_lease(lease_name, NAMESPACE)
