"""What the fault tests share: an outside observer of the slices, exactness checks, the table.

The observer watches the driver's slices with a client of its own, as the scheduler would,
and remembers the worst moment it saw: devices offered twice within the newest generation
of a pool. That is the "duplicates seen" figure of the fault table, not just the end state.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import kubernetes.client

import resourceslice as rs
from resourceslice.testing import TestCluster, wait_until
from resourceslice.testing.counting import RequestCounter
from support.controller_env import ControllerEnv


@dataclass(frozen=True)
class FaultOutcome:
    """One row of the fault table."""

    fault: str
    converged: bool
    seconds: float
    writes: Mapping[str, int]
    duplicates: int
    #: Leader election: seconds from the fault until another replica held the Lease.
    takeover: float | None = None

    def row(self) -> str:
        writes = ", ".join(f"{m} {n}" for m, n in sorted(self.writes.items())) or "none"
        takeover = "" if self.takeover is None else f" | {self.takeover:.2f} s"
        return (
            f"{self.fault:<48} | {'yes' if self.converged else 'NO':<9} | "
            f"{self.seconds:7.2f} s | {writes:<26} | {self.duplicates:<15}{takeover}"
        ).rstrip()


#: Filled by the tests, printed by conftest.py at the end of the session.
FAULT_TABLE: list[FaultOutcome] = []


def duplicates_in(slices: Sequence[Mapping[str, Any]]) -> int:
    """Device occurrences beyond the first, within the newest generation of each pool.

    Slices of an older generation are ignored, as consumers ignore them; a device offered by
    two slices of the same generation is what would let two pods get the same device.
    """
    newest: dict[str, int] = {}
    for s in slices:
        pool = s["spec"]["pool"]
        newest[pool["name"]] = max(newest.get(pool["name"], 0), pool["generation"])
    names: Counter[tuple[str, str]] = Counter()
    for s in slices:
        pool = s["spec"]["pool"]
        if pool["generation"] == newest[pool["name"]]:
            for d in s["spec"].get("devices", []):
                names[(pool["name"], d["name"])] += 1
    return sum(n - 1 for n in names.values())


def problems(
    slices: Sequence[Mapping[str, Any]], wanted: Mapping[str, Sequence[Mapping[str, Any]]]
) -> list[str]:
    """Why the published ``slices`` are not exactly the ``wanted`` devices by pool ([] if they are).

    Exact: every wanted device published once with its content, nothing else, one generation
    per pool, ``resourceSliceCount`` equal to the slices present, no two slices of one index.
    """
    found: list[str] = []
    by_pool: dict[str, list[Mapping[str, Any]]] = {}
    for s in slices:
        by_pool.setdefault(s["spec"]["pool"]["name"], []).append(s)
    if set(by_pool) != set(wanted):
        found.append(f"pools {sorted(by_pool)} != wanted {sorted(wanted)}")
    for pool, devices in wanted.items():
        published = by_pool.get(pool, [])
        generations = {s["spec"]["pool"]["generation"] for s in published}
        counts = {s["spec"]["pool"]["resourceSliceCount"] for s in published}
        if len(generations) > 1:
            found.append(f"{pool}: several generations {sorted(generations)}")
        if counts != {len(published)}:
            found.append(f"{pool}: resourceSliceCount {sorted(counts)}, {len(published)} slices")
        indexes = Counter(s["metadata"]["name"].split("-", 1)[0] for s in published)
        found += [f"{pool}: {n} slices of index {i}" for i, n in indexes.items() if n > 1]
        got = [d for s in published for d in s["spec"].get("devices", [])]
        if len(got) != len({d["name"] for d in got}):
            found.append(f"{pool}: {len(got) - len({d['name'] for d in got})} duplicate devices")
        if sorted(got, key=_name) != sorted(devices, key=_name):
            got_names, wanted_names = {d["name"] for d in got}, {d["name"] for d in devices}
            found.append(
                f"{pool}: devices differ (missing {len(wanted_names - got_names)}, "
                f"extra {len(got_names - wanted_names)}, or changed content)"
            )
    return found


def _name(device: Mapping[str, Any]) -> str:
    return str(device["name"])


class Observer:
    """Watches one driver's slices from outside and records the worst duplication seen.

    Reconnects (list, then watch) whenever the stream ends or fails, so it follows the
    cluster through crashes and freezes of the apiserver.
    """

    def __init__(self, cluster: TestCluster, driver: str) -> None:
        self._client = cluster.api_client("admin")
        self._api = kubernetes.client.ResourceV1Api(self._client)
        self._selector = f"spec.driver={driver}"
        self._slices: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self.max_duplicates = 0
        self._thread = threading.Thread(target=self._run, name="observer", daemon=True)
        self._thread.start()

    def _see(self) -> None:
        with self._lock:
            self.max_duplicates = max(
                self.max_duplicates, duplicates_in(list(self._slices.values()))
            )

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                response = self._api.list_resource_slice(
                    field_selector=self._selector, _preload_content=False, _request_timeout=5
                )
                listed = json.loads(response.data)
                with self._lock:
                    self._slices = {s["metadata"]["name"]: s for s in listed["items"]}
                self._see()
                self._follow(listed["metadata"]["resourceVersion"])
            except Exception:
                self._stopping.wait(0.2)  # the apiserver is down or frozen: try again soon

    def _follow(self, version: str) -> None:
        response: Any = self._api.list_resource_slice(
            field_selector=self._selector,
            watch=True,
            resource_version=version,
            timeout_seconds=30,
            _preload_content=False,
            _request_timeout=(5, 10),  # a frozen server: give up and relist
        )
        for line in response:
            if self._stopping.is_set():
                return
            event = json.loads(line)
            obj = event["object"]
            if event["type"] == "ERROR":
                return
            with self._lock:
                if event["type"] == "DELETED":
                    self._slices.pop(obj["metadata"]["name"], None)
                else:
                    self._slices[obj["metadata"]["name"]] = obj
            self._see()

    def close(self) -> None:
        self._stopping.set()
        self._thread.join(15)
        self._client.close()


class Run:
    """A driver on the test's own cluster, watched by an observer, with its fault row."""

    def __init__(self, cluster: TestCluster, fault: str, driver: str, user: str = "admin") -> None:
        self.cluster = cluster
        self.fault = fault
        self.env = ControllerEnv(cluster, driver, user)
        self.observer = Observer(cluster, driver)

    def finish(
        self,
        ctrl: rs.Controller,
        wanted: dict[str, Any],
        since: float,
        *others: rs.Controller,
        counters: Sequence[RequestCounter] = (),
        path: str = "",
    ) -> FaultOutcome:
        """Wait for convergence (of ``others`` too), record the row and check it.

        Writes: of ``counters``, or else of the environment's current counter, to paths
        containing ``path``. Exact, and no duplicates seen, ever.
        """
        for each in (ctrl, *others):
            settle(each, self.env, wanted)
        outcome = FaultOutcome(
            self.fault,
            converged=not problems(self.env.slices(), wanted),
            seconds=time.monotonic() - since,
            writes=sum(
                (Counter(c.writes(path)) for c in counters or [self.env.counter]), Counter()
            ),
            duplicates=self.observer.max_duplicates,
        )
        FAULT_TABLE.append(outcome)
        print(outcome.row())
        assert outcome.converged
        assert outcome.duplicates == 0
        return outcome

    def close(self) -> None:
        self.cluster.resume()  # a test that failed while the server was frozen
        self.observer.close()
        self.env.close()


def settle(
    ctrl: rs.Controller,
    env: Any,
    wanted: Mapping[str, Sequence[Mapping[str, Any]]],
    timeout: float = 120.0,
) -> float:
    """Wait until the cluster holds exactly ``wanted`` and ``ctrl`` has nothing left to do.

    Returns the seconds it took; fails with the remaining problems on timeout.
    """
    started = time.monotonic()
    deadline = started + timeout
    last: list[str] = ["not checked yet"]

    def exact() -> bool:
        nonlocal last
        if not ctrl.wait_idle(max(0.0, deadline - time.monotonic())):
            return False
        last = problems(env.slices(), wanted)
        return not last

    def report() -> str:
        errors = [f"{message}: {exc!s:.300}" for exc, message in env.errors[-3:]]
        return f"{last}; last errors: {errors}"

    wait_until(exact, timeout, describe=report)
    return time.monotonic() - started
