"""Three replicas of `resourceslice publish --leader-elect`, as separate processes, through
the faults a Deployment's pods meet: the leader SIGKILLed, restarted, SIGSTOPped mid-sync and
resumed after another took over. The pool file is edited during each.

Who may write is checked on the server's own record: the apiserver's audit log holds every
successful write of the Lease and of the slices with the user who made it (each replica has
a user of its own) and the ``resourceVersion`` it produced, and resourceVersions of one etcd
are one sequence. At the revision of every slice write, the Lease's last write must have
made the writer its holder: a replica that was not the leader at that moment never wrote.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest
import yaml

import resourceslice
from resourceslice.sharding import shard_of
from resourceslice.testing import TestCluster, start_cluster, wait_until

from .faults import FAULT_TABLE, FaultOutcome, Observer, problems

pytestmark = [pytest.mark.integration, pytest.mark.fault]

DRIVER = "ha.example.com"
POOL = "fabric"
LEASE = "ha-publisher"
NAMESPACE = "default"
#: Short, so a takeover after a crash takes seconds: renewals every 0.4 s, a leader stops
#: writing 2 s after its last renewal, a standby takes over 3 s after the last one it saw.
LEASE_DURATION = 3
REPLICAS = ("replica-0", "replica-1", "replica-2")
#: The rollout's replicas, by the number of shards they run with.
ROLLOUT = {1: ("k1-a", "k1-b"), 4: ("k4-a", "k4-b"), 3: ("k3-a", "k3-b")}
TIMEOUT = 60.0

AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived", "ResponseStarted"],
    "rules": [
        {
            # The response holds the resourceVersion each write made (and the Lease's holder).
            "level": "RequestResponse",
            "verbs": ["create", "update", "patch", "delete", "deletecollection"],
            "resources": [
                {"group": "resource.k8s.io", "resources": ["resourceslices"]},
                {"group": "coordination.k8s.io", "resources": ["leases"]},
            ],
        },
        {"level": "None"},
    ],
}


@pytest.fixture(scope="module")
def audited_cluster() -> Iterator[TestCluster]:
    cluster = start_cluster(
        extra_users=[f"{name}=system:masters" for name in (*REPLICAS, *sum(ROLLOUT.values(), ()))],
        audit_policy=AUDIT_POLICY,
    )
    try:
        yield cluster
    finally:
        cluster.close()


#: 24 slices; every edit changes all of them: a sync of 24 writes, long enough to freeze
#: the leader in the middle of one.
DEVICES = 24 * 128


def devices(revision: int) -> list[dict[str, Any]]:
    return [
        {"name": f"port-{i}", "attributes": {"revision": {"int": revision}}} for i in range(DEVICES)
    ]


class Replica:
    """One `publish --leader-elect` process, authenticated as a user of its own."""

    def __init__(
        self,
        cluster: TestCluster,
        user: str,
        pools: Path,
        driver: str = DRIVER,
        lease: str = LEASE,
        shards: int = 1,
    ) -> None:
        self.user = user
        self.lines: list[str] = []
        self._cond = threading.Condition()
        env = dict(os.environ, PYTHONPATH=str(Path(resourceslice.__file__).parents[1]))
        self.process = subprocess.Popen(
            [sys.executable, "-m", "resourceslice.cli", "publish", str(pools), "--driver", driver,
             "--all-nodes", "--interval", "0.05", "--kubeconfig", str(cluster.kubeconfigs[user]),
             "--leader-elect", "--lease-namespace", NAMESPACE, "--lease-name", lease,
             "--lease-duration", str(LEASE_DURATION), "--shards", str(shards)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
        )  # fmt: skip
        threading.Thread(target=self._pump, daemon=True).start()
        self.identity = self.wait_for(f"lease {NAMESPACE}/{lease} as ").split(" as ")[1]
        self.identity = self.identity.split(";")[0]
        self.wait_for("watching")  # edits of FILE from here on are followed

    def _pump(self) -> None:
        assert self.process.stdout is not None
        with self.process.stdout:
            for line in self.process.stdout:
                with self._cond:
                    self.lines.append(line.rstrip("\n"))
                    self._cond.notify_all()

    def wait_for(self, text: str, after: int = 0) -> str:
        """The first output line from index ``after`` on containing ``text``."""

        def found() -> str | None:
            return next((line for line in self.lines[after:] if text in line), None)

        with self._cond:
            line = self._cond.wait_for(found, TIMEOUT)
        assert line, f"{self.user}: no line with {text!r} in {self.lines}"
        return line

    def signal(self, sig: signal.Signals) -> None:
        self.process.send_signal(sig)

    def stop(self) -> None:
        """SIGTERM, as a rolling update stops a pod: it releases what it may, and exits."""
        self.process.send_signal(signal.SIGTERM)
        assert self.process.wait(TIMEOUT) == 0, self.lines

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.kill()


@dataclass
class AuditWrite:
    user: str
    resource: str
    verb: str
    name: str
    version: int
    holder: str | None  # Leases: the holderIdentity the write left
    pool: str = ""  # ResourceSlices: the pool
    #: When the server received the request and when it had answered it.
    received: datetime | None = None
    completed: datetime | None = None


class AuditLog:
    """The successful writes of the audit log so far, read incrementally."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.writes: list[AuditWrite] = []
        self._offset = 0

    def read(self) -> list[AuditWrite]:
        with self.path.open("rb") as f:
            f.seek(self._offset)
            data = f.read()
        complete = data[: data.rfind(b"\n") + 1]
        self._offset += len(complete)
        for line in complete.splitlines():
            write = _write_of(json.loads(line))
            if write is not None:
                self.writes.append(write)
        return self.writes


def _write_of(event: dict[str, Any]) -> AuditWrite | None:
    code = (event.get("responseStatus") or {}).get("code", 0)
    response = event.get("responseObject") or {}
    meta = response.get("metadata") or {}
    if not 200 <= code < 300 or "resourceVersion" not in meta or response.get("kind") == "Status":
        return None
    resource = event["objectRef"]["resource"]
    return AuditWrite(
        user=event["user"]["username"],
        resource=resource,
        verb=event["verb"],
        name=event["objectRef"].get("name") or meta.get("name", ""),
        # A delete answers with the object as it was before: no position of its own.
        version=-1 if event["verb"] == "delete" else int(meta["resourceVersion"]),
        holder=(response.get("spec") or {}).get("holderIdentity") if resource == "leases" else None,
        pool=((response.get("spec") or {}).get("pool") or {}).get("name", ""),
        received=_timestamp(event["requestReceivedTimestamp"]),
        completed=_timestamp(event["stageTimestamp"]),
    )


def _timestamp(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def writes_by_non_holders(
    writes: list[AuditWrite],
    identities: dict[str, str],
    lease_of: Callable[[str], str | None] = lambda pool: LEASE if pool == POOL else None,
) -> list[str]:
    """Slice writes made while the last write of the Lease covering their pool
    (``lease_of``; None: a pool not checked) did not name the writer its holder."""
    holders: dict[str, str | None] = {}
    wrong = []
    for write in sorted(writes, key=lambda w: w.version):
        lease = lease_of(write.pool) if write.resource == "resourceslices" else None
        if write.resource == "leases":
            holders[write.name] = identities.get(write.holder or "")
        elif lease is not None and (write.version < 0 or write.user != holders.get(lease)):
            wrong.append(f"{write.verb} {write.name} at {write.version} by {write.user} "
                         f"while {lease} named {holders.get(lease)}")  # fmt: skip
    return wrong


class Scenario:
    def __init__(self, cluster: TestCluster, pools: Path, log: Path) -> None:
        self.cluster = cluster
        self.pools = pools
        self.audit = AuditLog(log)
        self.observer = Observer(cluster, DRIVER)
        self.revision = 0
        self.admin = cluster.api_client("admin")
        self.leases = kubernetes.client.CoordinationV1Api(self.admin)
        self.slices_api = kubernetes.client.ResourceV1Api(self.admin)
        self.replicas: dict[str, Replica] = {}
        self.identities: dict[str, str] = {}  # Lease holderIdentity -> user

    def edit(self) -> None:
        self.revision += 1
        self.pools.write_text(
            yaml.safe_dump({"pools": {POOL: {"devices": devices(self.revision)}}})
        )

    def start(self, user: str) -> Replica:
        replica = self.replicas[user] = Replica(self.cluster, user, self.pools)
        self.identities[replica.identity] = user
        return replica

    def holder(self) -> str | None:
        """The user whose replica the Lease names, if it is held."""
        try:
            spec = self.leases.read_namespaced_lease(LEASE, NAMESPACE).spec
        except kubernetes.client.ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return self.identities.get(spec.holder_identity or "")

    def slices(self) -> list[dict[str, Any]]:
        response = self.slices_api.list_resource_slice(
            field_selector=f"spec.driver={DRIVER}", _preload_content=False
        )
        items: list[dict[str, Any]] = json.loads(response.data)["items"]
        return items

    def problems(self) -> list[str]:
        return problems(self.slices(), {POOL: devices(self.revision)})

    def exact(self) -> bool:
        return not self.problems()

    def leader(self) -> Replica:
        user = wait_until(self.holder, TIMEOUT)
        return self.replicas[user]

    def written(self) -> int:
        return len(self.audit.read())

    def slice_writes(self, mark: int, user: str | None = None) -> list[AuditWrite]:
        return [
            w
            for w in self.audit.read()[mark:]
            if w.resource == "resourceslices" and user in (None, w.user)
        ]

    def settle(self, name: str, since: float, mark: int, old: str | None = None) -> None:
        """Wait (for another holder than ``old``, then) for the current revision exactly;
        the fault's row, with the slice writes made since audit entry ``mark``."""
        takeover = None
        if old is not None:
            wait_until(lambda: self.holder() not in (None, old), TIMEOUT)
            takeover = time.monotonic() - since
        wait_until(self.exact, TIMEOUT, describe=lambda: str(self.problems()))
        seconds = time.monotonic() - since
        made = self.slice_writes(mark)
        outcome = FaultOutcome(
            name,
            converged=True,
            seconds=seconds,
            writes=Counter(f"{w.verb} {w.user}" for w in made),
            duplicates=self.observer.max_duplicates,
            takeover=takeover,
        )
        FAULT_TABLE.append(outcome)
        print(outcome.row())

    def close(self) -> None:
        for replica in self.replicas.values():
            replica.close()
        self.observer.close()
        self.admin.close()


def test_three_replicas_through_kill_restart_and_pause(
    audited_cluster: TestCluster, tmp_path: Path
) -> None:
    log = audited_cluster.audit_log
    scenario = Scenario(audited_cluster, tmp_path / "pools.yaml", log)
    try:
        scenario.edit()
        for user in REPLICAS:
            scenario.start(user)
        first = scenario.leader()
        wait_until(scenario.exact, TIMEOUT)
        first.wait_for("took the lease")

        # The leader dies: a standby takes over once the Lease expires, with the edit.
        since, mark = time.monotonic(), scenario.written()
        first.kill()
        scenario.edit()
        scenario.settle("13a 3 replicas: leader SIGKILLed, pool edited", since, mark, first.user)
        second = scenario.leader()

        # It comes back as a standby; the edit meanwhile is the leader's to publish.
        since, mark = time.monotonic(), scenario.written()
        restarted = scenario.start(first.user)
        scenario.edit()
        restarted.wait_for("standby until it holds the lease")
        scenario.settle("13b the killed replica restarted, pool edited", since, mark)

        # The leader freezes mid-sync (SIGSTOP once the first write of an edit is on the
        # server); another edit while it is frozen; a standby takes over and publishes it.
        # Resumed, the old leader finds the Lease gone and writes nothing more.
        second = scenario.leader()
        mark = scenario.written()
        scenario.edit()
        wait_until(lambda: scenario.slice_writes(mark, second.user), TIMEOUT, interval=0.002)
        second.signal(signal.SIGSTOP)
        before_pause = len(scenario.slice_writes(mark, second.user))
        since, mark = time.monotonic(), scenario.written()
        scenario.edit()
        scenario.settle(
            f"13c leader SIGSTOPped after {before_pause}/24 writes, edited",
            since,
            mark,
            second.user,
        )
        lines = len(second.lines)
        second.signal(signal.SIGCONT)
        second.wait_for("lost the lease", after=lines)
        since, mark = time.monotonic(), scenario.written()
        scenario.edit()
        scenario.settle("13d the SIGSTOPped leader resumed, pool edited", since, mark)

        # The server's record: every slice write was made by the Lease's holder of the time.
        writes = scenario.audit.read()
        assert writes_by_non_holders(writes, scenario.identities) == []
        by_replica = Counter(w.user for w in writes if w.resource == "resourceslices")
        print(f"slice writes by replica: {dict(by_replica)}")
        assert scenario.observer.max_duplicates == 0
    finally:
        scenario.close()


def test_the_check_finds_a_write_by_a_replica_that_lost_the_lease() -> None:
    """The audit check itself, on a made-up history: B writes after A took the Lease."""
    identities = {"id-a": "replica-0", "id-b": "replica-1"}

    def lease(version: int, holder: str, user: str) -> AuditWrite:
        return AuditWrite(user, "leases", "update", LEASE, version, holder)

    def slice_write(version: int, user: str, verb: str = "update") -> AuditWrite:
        return AuditWrite(user, "resourceslices", verb, "s", version, None, POOL)

    history = [lease(10, "id-b", "replica-1"), slice_write(11, "replica-1")]
    history += [lease(12, "id-a", "replica-0"), slice_write(13, "replica-0")]
    assert writes_by_non_holders(history, identities) == []
    late = slice_write(14, "replica-1")
    assert writes_by_non_holders([late, *history], identities) == [
        f"update s at 14 by replica-1 while {LEASE} named replica-0"
    ]
    released = lease(15, "", "replica-0")
    assert (
        len(writes_by_non_holders([*history, released, slice_write(16, "replica-0")], identities))
        == 1
    )
    # A delete has no revision of its own in the log: not allowed in the scenario.
    assert (
        len(writes_by_non_holders([*history, slice_write(-1, "replica-0", "delete")], identities))
        == 1
    )


SHARDED_DRIVER = "shards.example.com"
SHARDED_LEASE = "ha-sharded"
SHARDS = 12


def sharded_pools(revision: int) -> dict[str, list[dict[str, Any]]]:
    return {
        f"sp-{i:03d}": [
            {"name": f"dev-{j}", "attributes": {"revision": {"int": revision}}} for j in range(2)
        ]
        for i in range(120)
    }


def test_three_replicas_twelve_shards_one_killed(
    audited_cluster: TestCluster, tmp_path: Path
) -> None:
    log = audited_cluster.audit_log
    audit = AuditLog(log)
    path = tmp_path / "pools.yaml"
    revision = 1

    def write_pools() -> None:
        pools = {name: {"devices": d} for name, d in sharded_pools(revision).items()}
        path.write_text(yaml.safe_dump({"pools": pools}))

    admin = audited_cluster.api_client("admin")
    leases = kubernetes.client.CoordinationV1Api(admin)
    slices_api = kubernetes.client.ResourceV1Api(admin)
    observer = Observer(audited_cluster, SHARDED_DRIVER)
    replicas: dict[str, Replica] = {}

    def holders() -> Counter[str]:
        """Live replicas (users) by the shards they hold, as the Leases say."""
        listed = leases.list_namespaced_lease(NAMESPACE).items
        names = {f"{SHARDED_LEASE}-shard-{i}" for i in range(SHARDS)}
        by_identity = {r.identity: user for user, r in replicas.items()}
        return Counter(
            by_identity.get(lease.spec.holder_identity or "", "-")
            for lease in listed
            if lease.metadata.name in names
        )

    def problems_now() -> list[str]:
        response = slices_api.list_resource_slice(
            field_selector=f"spec.driver={SHARDED_DRIVER}", _preload_content=False
        )
        return problems(json.loads(response.data)["items"], sharded_pools(revision))

    def balanced(users: set[str]) -> bool:
        held = holders()
        counts = [held.get(user, 0) for user in users]
        return set(held) == users and sum(counts) == SHARDS and max(counts) - min(counts) <= 1

    try:
        write_pools()
        for user in REPLICAS:
            replicas[user] = Replica(
                audited_cluster, user, path, SHARDED_DRIVER, SHARDED_LEASE, SHARDS
            )
        wait_until(lambda: balanced(set(REPLICAS)), TIMEOUT, describe=lambda: str(holders()))
        wait_until(lambda: not problems_now(), TIMEOUT, describe=lambda: str(problems_now()))
        assert sorted(holders().values()) == [4, 4, 4]

        victim = replicas[REPLICAS[0]]
        survivors = set(REPLICAS[1:])
        mark = len(audit.read())
        since = time.monotonic()
        victim.kill()
        revision += 1
        write_pools()
        wait_until(lambda: balanced(survivors), TIMEOUT, describe=lambda: str(holders()))
        takeover = time.monotonic() - since
        wait_until(lambda: not problems_now(), TIMEOUT, describe=lambda: str(problems_now()))
        outcome = FaultOutcome(
            "13e 3 replicas, 12 shards, 120 pools: one killed",
            converged=True,
            seconds=time.monotonic() - since,
            writes=Counter(
                f"{w.verb} {w.user}"
                for w in audit.read()[mark:]
                if w.resource == "resourceslices" and w.pool.startswith("sp-")
            ),
            duplicates=observer.max_duplicates,
            takeover=takeover,
        )
        FAULT_TABLE.append(outcome)
        print(outcome.row())
        assert sorted(holders().values()) == [6, 6]
        identities = {r.identity: user for user, r in replicas.items()}
        wrong = writes_by_non_holders(
            audit.read(),
            identities,
            lambda pool: (
                f"{SHARDED_LEASE}-shard-{shard_of(pool, SHARDS)}"
                if pool.startswith("sp-")
                else None
            ),
        )
        assert wrong == []
        assert observer.max_duplicates == 0
    finally:
        for replica in replicas.values():
            replica.close()
        observer.close()
        admin.close()


def overlapping_writers(writes: list[AuditWrite]) -> list[str]:
    """Pools written by two replicas at once, as the server saw it.

    A replica writes a pool from the moment the server received its first write of it to
    the moment the server answered its last: its span over the pool. At most one writer per
    pool at every moment means the spans of distinct replicas over one pool are disjoint:
    once another replica wrote the pool, an earlier writer never writes it again.
    """
    spans: dict[str, dict[str, tuple[datetime, datetime]]] = {}
    for write in writes:
        if write.resource != "resourceslices":
            continue
        assert write.received is not None and write.completed is not None
        by_user = spans.setdefault(write.pool, {})
        start, end = by_user.get(write.user, (write.received, write.completed))
        by_user[write.user] = (min(start, write.received), max(end, write.completed))
    found = []
    for pool, by_user in sorted(spans.items()):
        ordered = sorted(by_user.items(), key=lambda item: item[1])
        for (first, (_, end)), (second, (start, _)) in zip(ordered, ordered[1:]):
            if start <= end:
                found.append(f"{pool}: {second} wrote from {start} while {first} did until {end}")
    return found


def test_the_overlap_check_finds_two_writers_of_one_pool() -> None:
    def at(user: str, pool: str, second: int) -> AuditWrite:
        moment = datetime(2026, 1, 1, 0, 0, second)
        return AuditWrite(user, "resourceslices", "update", "s", 1, None, pool, moment, moment)

    handed_over = [at("a", "p", 1), at("a", "p", 2), at("b", "p", 3), at("a", "q", 4)]
    assert overlapping_writers(handed_over) == []
    back_again = [*handed_over, at("a", "p", 5)]
    assert overlapping_writers(back_again) == [
        "p: b wrote from 2026-01-01 00:00:03 while a did until 2026-01-01 00:00:05"
    ]


ROLLOUT_DRIVER = "rollout.example.com"
ROLLOUT_LEASE = "ha-rollout"


def rollout_pools(revision: int) -> dict[str, list[dict[str, Any]]]:
    return {
        f"rp-{i:02d}": [{"name": "dev-0", "attributes": {"revision": {"int": revision}}}]
        for i in range(24)
    }


def test_a_rolling_change_of_shards_one_to_four_to_three(
    audited_cluster: TestCluster, tmp_path: Path
) -> None:
    """A Deployment's rolling update that changes ``--shards``: the new replicas start while
    the old ones run, then the old ones stop (SIGTERM) one by one; the pool file is edited
    at every step. The audit log shows at most one writer per pool at every moment."""
    log = audited_cluster.audit_log
    audit = AuditLog(log)
    mark = len(audit.read())
    path = tmp_path / "pools.yaml"
    revision = 0
    admin = audited_cluster.api_client("admin")
    slices_api = kubernetes.client.ResourceV1Api(admin)
    observer = Observer(audited_cluster, ROLLOUT_DRIVER)
    replicas: dict[str, Replica] = {}

    def problems_now() -> list[str]:
        response = slices_api.list_resource_slice(
            field_selector=f"spec.driver={ROLLOUT_DRIVER}", _preload_content=False
        )
        return problems(json.loads(response.data)["items"], rollout_pools(revision))

    def edit() -> None:
        nonlocal revision
        revision += 1
        pools = {name: {"devices": d} for name, d in rollout_pools(revision).items()}
        path.write_text(yaml.safe_dump({"pools": pools}))

    def edit_and_converge() -> None:
        edit()
        wait_until(lambda: not problems_now(), TIMEOUT, describe=lambda: str(problems_now()))

    def start(shards: int) -> None:
        for user in ROLLOUT[shards]:
            replicas[user] = Replica(
                audited_cluster, user, path, ROLLOUT_DRIVER, ROLLOUT_LEASE, shards
            )

    def roll(old: int, new: int) -> None:
        """Start the new replicas; edit; stop the old ones one by one, editing after each."""
        written = len(rollout_writes())
        start(new)
        edit_and_converge()
        since = time.monotonic()
        for user in ROLLOUT[old]:
            replicas[user].stop()
            edit_and_converge()
        FAULT_TABLE.append(
            FaultOutcome(
                f"13f rolling change of shards {old}→{new}, edited",
                converged=True,
                seconds=time.monotonic() - since,
                writes=Counter(f"{w.verb} {w.user}" for w in rollout_writes()[written:]),
                duplicates=observer.max_duplicates,
            )
        )
        print(FAULT_TABLE[-1].row())
        assert overlapping_writers(rollout_writes()) == []

    def rollout_writes() -> list[AuditWrite]:
        return [
            w
            for w in audit.read()[mark:]
            if w.resource == "resourceslices" and w.pool.startswith("rp-")
        ]

    try:
        edit()
        start(1)
        wait_until(lambda: not problems_now(), TIMEOUT, describe=lambda: str(problems_now()))
        roll(1, 4)
        roll(4, 3)
        # The last K=4 replica wrote (alone, once the other stopped), and both K=3 ones.
        assert {w.user for w in rollout_writes()} >= {ROLLOUT[4][1], *ROLLOUT[3]}
        assert observer.max_duplicates == 0
    finally:
        for replica in replicas.values():
            replica.close()
        observer.close()
        admin.close()
