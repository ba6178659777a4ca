"""Slow answers, stalled answers and connections lost after the server read the request,
made per request by :class:`resourceslice.testing.faultproxy.FaultProxy` in front of the
session's real apiserver. Leader election and sharding must keep one writer per pool
through them, and every request must end by the deadline it serves.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator

import kubernetes.client
import pytest

import resourceslice as rs
from resourceslice.leaderelection import LeaderElector, LeadershipLostError
from resourceslice.sharding import ShardedElector, shard_of
from resourceslice.testing import TestCluster, wait_until
from resourceslice.testing.counting import RequestCounter
from resourceslice.testing.faultproxy import Fault, FaultProxy
from support.controller_env import ControllerEnv, device, pools
from support.fakes import FakeClock

from .faults import FAULT_TABLE, FaultOutcome, Observer, problems

pytestmark = [pytest.mark.integration, pytest.mark.fault]

NAMESPACE = "default"
SHORT = {"lease_duration": 3.0, "renew_deadline": 2.0, "retry_period": 0.5}
TIMEOUT = 60.0


@pytest.fixture
def proxy(kube_cluster: TestCluster) -> Iterator[FaultProxy]:
    with FaultProxy(kube_cluster) as fault_proxy:
        yield fault_proxy


@pytest.fixture
def lease_name(request: pytest.FixtureRequest) -> str:
    return "cf-" + request.node.name.lower().replace("_", "-")[5:50].strip("-")


def through(env: ControllerEnv, proxy: FaultProxy) -> RequestCounter:
    """The env's next controller talks through ``proxy``, its requests counted."""
    client = proxy.api_client()
    env._clients.append(client)
    env.client = client
    env.counter = RequestCounter(client)
    return env.counter


def lease_holder(client: kubernetes.client.ApiClient, name: str) -> str:
    """Who holds Lease ``name``; "" if nobody, or if there is no such Lease."""
    api = kubernetes.client.CoordinationV1Api(client)
    try:
        data = api.read_namespaced_lease(name, NAMESPACE, _preload_content=False).data
    except kubernetes.client.ApiException as exc:
        if exc.status == 404:
            return ""
        raise
    return str(json.loads(data)["spec"].get("holderIdentity") or "")


def only(method: str, path_contains: str, fault: Fault) -> Callable[[str, str], Fault | None]:
    return lambda m, path: fault if m == method and path_contains in path else None


# -- 1: a write is sent once ---------------------------------------------------------------


def test_a_write_whose_connection_is_lost_is_sent_once(
    env: ControllerEnv, proxy: FaultProxy
) -> None:
    """The server applies each PUT, then the connection breaks: the server must see as many
    PUTs as the controller made, not urllib3's re-sends of each."""
    counter = through(env, proxy)
    resources = pools(p=rs.Pool(devices=[device(i) for i in range(3)]))
    ctrl = env.start_synced(resources, sync_delay=0.1)
    resets = [3]
    lock = threading.Lock()

    def reset_three_puts(method: str, path: str) -> Fault | None:
        with lock:
            if method != "PUT" or not resets[0]:
                return None
            resets[0] -= 1
            return Fault(reset=True)

    proxy.rule = reset_three_puts
    for revision in range(1, 4):
        resources.pools["p"].devices[0]["attributes"]["rev"] = {"int": revision}
        ctrl.update(resources)
        assert ctrl.wait_synced(TIMEOUT), env.errors
    sent = counter.writes("resourceslices").get("PUT", 0)
    assert resets == [0], (counter.requests(), proxy._forwarded)
    assert proxy.forwarded("PUT", "resourceslices") == sent
    assert env.slices()[0]["spec"]["devices"][0]["attributes"]["rev"] == {"int": 3}


# -- 3 and 4: a stopped elector, a hung Lease request ----------------------------------------


def test_an_elector_stopped_by_its_error_handler_never_takes_the_lease_again(
    kube_client: kubernetes.client.ApiClient, lease_name: str
) -> None:
    """stop() from the LeadershipLostError handler releases the Lease; the attempt that
    told the handler must not take it back."""
    clock = FakeClock()
    errors: list[BaseException] = []

    def on_error(exc: BaseException, _: str) -> None:
        errors.append(exc)
        if isinstance(exc, LeadershipLostError):
            elector.stop()

    elector = LeaderElector(
        kube_client,
        rs.LeaderElection(NAMESPACE, lease_name, identity="stopped", **SHORT),
        on_change=lambda leading: None,
        on_error=on_error,
        clock=clock,
    )
    assert elector.try_acquire_or_renew()
    clock.advance(SHORT["renew_deadline"])  # renewals failed until the deadline
    assert not elector.try_acquire_or_renew()
    assert [type(e) for e in errors] == [LeadershipLostError]
    assert lease_holder(kube_client, lease_name) == ""
    assert not elector.try_acquire_or_renew()
    assert lease_holder(kube_client, lease_name) == ""
    kubernetes.client.CoordinationV1Api(kube_client).delete_namespaced_lease(lease_name, NAMESPACE)


def test_a_hung_lease_request_ends_by_the_renew_deadline(
    env: ControllerEnv, proxy: FaultProxy, lease_name: str
) -> None:
    """Every Lease request of the leader hangs on the way: it stops leading by its renew
    deadline, a standby takes over, and stop() returns within one renew deadline per
    request it still makes (not urllib3's four timeouts each).

    Lost on the way, not answers held back: a renewal the server applies keeps the Lease
    alive for the old holder (a one-way partition is a Lease's blind spot, client-go's too).
    """
    election = rs.LeaderElection(NAMESPACE, lease_name, **SHORT)
    resources = pools(p=rs.Pool(devices=[device(i) for i in range(3)]))
    through(env, proxy)
    leader = env.start_synced(resources, leader_election=election, sync_delay=0.1)
    assert leader.is_leader()
    env.new_counter()
    standby = env.start(resources, leader_election=election, sync_delay=0.1)
    proxy.rule = only("PUT", "/leases/", Fault(delay=float("inf")))
    wait_until(lambda: not leader.is_leader(), timeout=TIMEOUT)
    wait_until(standby.is_leader, timeout=TIMEOUT)
    proxy.rule = lambda method, path: Fault(delay=float("inf")) if "/leases/" in path else None
    started = time.monotonic()
    leader.stop()
    took = time.monotonic() - started
    # The elector's attempt under way and the release's GET: one renew deadline each.
    assert took < 2 * SHORT["renew_deadline"] + 1.0, took
    assert standby.is_leader()


# -- 2: releasing while a write's outcome is unknown ---------------------------------------


def test_a_lease_is_not_released_while_a_write_may_still_commit(
    env: ControllerEnv, proxy: FaultProxy, lease_name: str
) -> None:
    """The leader's PUT reaches the server only after its write budget ended (a slow
    network): its outcome is unknown when stop() runs, so the Lease is left to expire
    rather than handed to a successor that would write while ours can still land."""
    election = rs.LeaderElection(NAMESPACE, lease_name, **SHORT)
    resources = pools(p=rs.Pool(devices=[device(i) for i in range(3)]))
    observer = Observer(env.cluster, env.driver)
    started = time.monotonic()
    through(env, proxy)
    leader = env.start_synced(resources, leader_election=election, sync_delay=0.1)
    identity = lease_holder(env.admin, lease_name)
    late = SHORT["renew_deadline"] + 1.0
    proxy.rule = only("PUT", "resourceslices", Fault(delay=late))
    resources.pools["p"].devices[0]["attributes"]["rev"] = {"int": 1}
    leader.update(resources)
    wait_until(lambda: proxy.forwarded("PUT", "resourceslices") >= 1, timeout=TIMEOUT)
    leader.stop()
    assert lease_holder(env.admin, lease_name) == identity
    # A successor takes over once the Lease expired, and publishes.
    env.new_counter()
    proxy.rule = lambda method, path: None
    resources.pools["p"].devices[0]["attributes"]["rev"] = {"int": 2}
    successor = env.start(resources, leader_election=election, sync_delay=0.1)
    assert successor.wait_synced(TIMEOUT), env.errors
    found = problems(env.slices(), {"p": resources.pools["p"].devices})
    observer.close()
    FAULT_TABLE.append(
        FaultOutcome(
            "a slice write delayed past its deadline, then stop",
            converged=not found,
            seconds=time.monotonic() - started,
            writes=env.counter.writes("resourceslices"),
            duplicates=observer.max_duplicates,
        )
    )
    assert found == []
    assert observer.max_duplicates == 0
    successor.stop()
    assert lease_holder(env.admin, lease_name) == ""


# -- 6 and 7: shards under latency, a lapsed shard, stop() during a round ---------------------


class Shards:
    """A sharded elector through the proxy, and what it told its controller."""

    def __init__(
        self,
        client: kubernetes.client.ApiClient,
        lease: str,
        shards: int,
        timings: dict[str, float] = SHORT,
    ) -> None:
        self.changes: list[tuple[bool, int]] = []
        self.errors: list[BaseException] = []
        self._shards = shards
        self.elector = ShardedElector(
            client,
            rs.LeaderElection(NAMESPACE, lease, identity="sharded", shards=shards, **timings),
            on_change=self._changed,
            on_error=lambda exc, _: self.errors.append(exc),
        )

    def _changed(self, leading: bool, covers: Callable[[str], bool]) -> None:
        shard = next(i for i in range(self._shards) if covers(pool_of_shard(i, self._shards)))
        self.changes.append((leading, shard))

    def lost(self) -> list[LeadershipLostError]:
        return [e for e in self.errors if isinstance(e, LeadershipLostError)]


def pool_of_shard(shard: int, shards: int) -> str:
    return next(f"pool-{i}" for i in range(1000) if shard_of(f"pool-{i}", shards) == shard)


def test_one_slow_server_does_not_lapse_held_shards(
    kube_cluster: TestCluster, proxy: FaultProxy, lease_name: str
) -> None:
    """Every Lease request takes 0.9 s more: the membership's and four shards' renewals one
    after another, then a list (5.4 s), would pass the 4 s renew deadline; renewed side by
    side (1.9 s apart), none lapses."""
    client = proxy.api_client()
    timings = {"lease_duration": 6.0, "renew_deadline": 4.0, "retry_period": 1.0}
    shards = Shards(client, lease_name, 4, timings)
    shards.elector.start()
    try:
        wait_until(lambda: len(shards.elector.held()) == 4, timeout=TIMEOUT)
        proxy.rule = lambda method, path: Fault(delay=0.9) if "/leases" in path else None
        renewals = proxy.forwarded("PUT", f"{lease_name}-shard-")
        # Five renewals of each shard under the latency.
        wait_until(
            lambda: proxy.forwarded("PUT", f"{lease_name}-shard-") >= renewals + 20,
            timeout=TIMEOUT,
        )
        assert shards.lost() == []
        assert [leading for leading, _ in shards.changes] == [True] * 4
        assert len(shards.elector.held()) == 4
    finally:
        proxy.rule = lambda method, path: None
        shards.elector.stop()
        client.close()


def test_a_lapsed_shard_is_reported_and_taken_back(
    kube_cluster: TestCluster, proxy: FaultProxy, lease_name: str
) -> None:
    """Renewals of shard 0 alone stall: it lapses, which the controller is told
    (on_change(False), LeadershipLostError), and it is taken back once they pass."""
    client = proxy.api_client()
    shards = Shards(client, lease_name, 2)
    shards.elector.start()
    try:
        wait_until(lambda: len(shards.elector.held()) == 2, timeout=TIMEOUT)
        proxy.rule = only("PUT", f"{lease_name}-shard-0", Fault(stall=float("inf")))
        wait_until(lambda: (False, 0) in shards.changes, timeout=TIMEOUT)
        assert [e.lease for e in shards.lost()] == [f"{NAMESPACE}/{lease_name}-shard-0"]
        assert shards.elector.held() == [1]
        proxy.rule = lambda method, path: None
        wait_until(lambda: shards.elector.held() == [0, 1], timeout=TIMEOUT)
        assert shards.changes[-1] == (True, 0)
        assert (False, 1) not in shards.changes
    finally:
        proxy.rule = lambda method, path: None
        shards.elector.stop()
        client.close()


def test_stop_during_a_sharding_round_takes_no_shard(
    kube_client: kubernetes.client.ApiClient, lease_name: str
) -> None:
    """The controller's change handler stops the elector when the round takes its first
    shard: the round must not go on to take the shards stop() just let go."""
    shards = 4
    taken: list[bool] = []

    def stop_on_first(leading: bool, covers: Callable[[str], bool]) -> None:
        taken.append(leading)
        if leading and len(taken) == 1:
            elector.stop()

    elector = ShardedElector(
        kube_client,
        rs.LeaderElection(NAMESPACE, lease_name, identity="stopping", shards=shards, **SHORT),
        on_change=stop_on_first,
        on_error=lambda exc, _: None,
    )
    elector.round()
    assert taken == [True]
    holders = [lease_holder(kube_client, f"{lease_name}-shard-{i}") for i in range(shards)]
    assert "stopping" not in holders, holders
    assert elector.held() == []


# -- the fault table: a slow server under leader election ------------------------------------


def test_a_slow_server_under_leader_election(
    env: ControllerEnv, proxy: FaultProxy, lease_name: str
) -> None:
    """Every request of both replicas takes 2 s more; default timings. Edits are published,
    the outside watcher never sees a device twice, and the leader never lapses."""
    observer = Observer(env.cluster, env.driver)
    election = rs.LeaderElection(NAMESPACE, lease_name)
    resources = pools(p=rs.Pool(devices=[device(i) for i in range(40)]))
    wanted = resources.pools["p"].devices
    proxy.rule = lambda method, path: Fault(delay=2.0) if "watch=true" not in path else None
    started = time.monotonic()
    try:
        counters = []
        replicas = []
        for _ in range(2):
            counters.append(through(env, proxy))
            replicas.append(env.start(resources, leader_election=election, sync_delay=0.1))
        wait_until(lambda: any(r.is_leader() for r in replicas), timeout=TIMEOUT)
        leader = next(r for r in replicas if r.is_leader())
        assert leader.wait_synced(TIMEOUT), env.errors
        for revision in range(1, 3):
            for d in wanted:
                d["attributes"]["rev"] = {"int": revision}
            for r in replicas:
                r.update(resources)
            assert leader.wait_synced(TIMEOUT), env.errors
        found = problems(env.slices(), {"p": wanted})
    finally:
        observer.close()
    lost = [e for e, _ in env.errors if isinstance(e, LeadershipLostError)]
    writes: dict[str, int] = {}
    for counter in counters:
        for method, n in counter.writes("resourceslices").items():
            writes[method] = writes.get(method, 0) + n
    FAULT_TABLE.append(
        FaultOutcome(
            "apiserver 2 s slower per request, leader election",
            converged=not found and not lost,
            seconds=time.monotonic() - started,
            writes=writes,
            duplicates=observer.max_duplicates,
        )
    )
    assert found == []
    assert lost == []
    assert observer.max_duplicates == 0
