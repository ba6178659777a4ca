"""Server overload: the apiserver answers 429 with Retry-After, the controller waits and converges.

The server of this module admits one mutating request at a time (the classic max-in-flight
filter, priority and fairness off), and other clients keep it busy. The controller runs as
the unprivileged ``driver`` user bound to the chart's role (deploy/chart): ``system:masters``
would be exempt from the limit.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import kubernetes.client
import pytest
from kubernetes.client.exceptions import ApiException

import resourceslice as rs
from resourceslice._http import pool_manager
from resourceslice.testing import TestCluster, start_cluster, wait_until
from security.rbac_env import bound_role, shipped_role
from support.controller_env import device, pools

from .faults import Run

pytestmark = [pytest.mark.integration, pytest.mark.fault]

DEVICES = 2_000  # 16 slices


@pytest.fixture(scope="module")
def busy_cluster() -> Iterator[TestCluster]:
    cluster = start_cluster(
        extra_args=(
            "--enable-priority-and-fairness=false",
            "--max-requests-inflight=1",
            "--max-mutating-requests-inflight=1",
        )
    )
    try:
        yield cluster
    finally:
        cluster.close()


class Load:
    """Threads sending dry-run creates as ``driver``: they hold the one mutating seat."""

    def __init__(self, cluster: TestCluster, threads: int = 4) -> None:
        self._stopping = threading.Event()
        self._clients = [cluster.api_client("driver") for _ in range(threads)]
        self._threads = [
            threading.Thread(target=self._run, args=(c,), daemon=True) for c in self._clients
        ]
        for thread in self._threads:
            thread.start()

    def _run(self, client: kubernetes.client.ApiClient) -> None:
        api = kubernetes.client.ResourceV1Api(client)
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"generateName": "load-"},
            "spec": {
                "driver": "load.example.com",
                "pool": {"name": "load", "generation": 1, "resourceSliceCount": 1},
                "allNodes": True,
                "devices": [device(i) for i in range(64)],
            },
        }
        while not self._stopping.is_set():
            with contextlib.suppress(ApiException):  # 429s are the point of the exercise
                api.create_resource_slice(body, dry_run="All", _preload_content=False)

    def stop(self) -> None:
        self._stopping.set()
        for thread in self._threads:
            thread.join(30)
        for client in self._clients:
            client.close()


class Responses:
    """(time, method, status) of every request of a client's writes, wrapping its pool."""

    def __init__(self, client: kubernetes.client.ApiClient) -> None:
        self.seen: list[tuple[float, str, int]] = []
        pool = pool_manager(client)
        send = pool.request

        def request(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
            response = send(method, url, *args, **kwargs)
            if method in ("POST", "PUT", "DELETE"):
                self.seen.append((time.monotonic(), method, response.status))
            return response

        pool.request = request

    def too_many(self) -> int:
        return sum(1 for _, _, status in self.seen if status == 429)

    def gaps_after_429(self) -> list[float]:
        """Seconds from each 429 to the controller's next write."""
        return [later[0] - now[0] for now, later in zip(self.seen, self.seen[1:]) if now[2] == 429]


def test_overloaded_server_429_retry_after(busy_cluster: TestCluster) -> None:
    with bound_role(busy_cluster, shipped_role()):
        run = Run(busy_cluster, "6 overload: 429 + Retry-After", "overload.example.com", "driver")
        try:
            responses = Responses(run.env.client)
            load = Load(busy_cluster)
            try:
                wanted = {"p": [device(i) for i in range(DEVICES)]}
                ctrl = run.env.start(
                    pools(p=rs.Pool(devices=wanted["p"])), sync_delay=0.5, mutation_cache_ttl=2.0
                )
                since = time.monotonic()
                wait_until(lambda: responses.too_many() >= 3, timeout=120)
            finally:
                load.stop()
            outcome = run.finish(ctrl, wanted, since)
            # Every 429 carried "Retry-After: 1"; the next attempt came no sooner.
            assert responses.gaps_after_429()
            assert min(responses.gaps_after_429()) >= 0.95
            # Each of the 16 slices created once; a rejected request is all a 429 costs. A
            # POST whose response the overloaded server never sent in time may still have
            # created its slice: the retry gets 409 (the name is deterministic), not a twin.
            assert {status for _, _, status in responses.seen} <= {200, 201, 409, 429}
            created = sum(1 for _, m, st in responses.seen if (m, st) == ("POST", 201))
            assert created == 16 and "DELETE" not in outcome.writes
            assert sum(outcome.writes.values()) == len(responses.seen)
            assert all(
                isinstance(e, rs.SliceExistsError)
                or (isinstance(e, ApiException) and e.status == 429)
                for e, _ in run.env.errors
            )
        finally:
            run.close()
