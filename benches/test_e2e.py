"""End to end on the real apiserver: 10,000 devices in one flat pool.

Three figures: the first publish, a one-device change, and a restart with the same desired
state, each timed from the call until ``wait_synced`` returns. The HTTP writes of each run
are counted on the client and kept in the benchmark's ``extra_info``.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import kubernetes.client
import pytest

import resourceslice as rs
from benchsize import sized
from resourceslice.testing import TestCluster
from resourceslice.testing.counting import RequestCounter

pytestmark = pytest.mark.integration

DEVICES = sized(10_000, 1_000)
ROUNDS = sized(3, 1)
TIMEOUT = 120.0
_run = itertools.count()


def devices(changed: int | None = None) -> list[dict[str, Any]]:
    return [
        {
            "name": f"dev-{i}",
            "attributes": {"index": {"int": -1 if i == changed else i}, "model": {"string": "a"}},
            "capacity": {"memory": {"value": "80Gi"}},
        }
        for i in range(DEVICES)
    ]


class Bench:
    def __init__(self, cluster: TestCluster) -> None:
        self.cluster = cluster
        self.clients: list[kubernetes.client.ApiClient] = []
        self.controllers: list[rs.Controller] = []
        self.drivers: list[str] = []

    def new_driver(self) -> str:
        self.drivers.append(f"e2e-{next(_run)}.bench.example.com")
        return self.drivers[-1]

    def start(
        self, driver: str, resources: rs.DriverResources, **kwargs: Any
    ) -> tuple[rs.Controller, RequestCounter]:
        client = self.cluster.api_client("admin")
        self.clients.append(client)
        counter = RequestCounter(client)
        ctrl = rs.start_controller(client, driver=driver, resources=resources, **kwargs)
        self.controllers.append(ctrl)
        assert ctrl.wait_synced(TIMEOUT)
        return ctrl, counter

    def close(self) -> None:
        for ctrl in self.controllers:
            ctrl.stop()
        admin = self.cluster.api_client("admin")
        api = kubernetes.client.ResourceV1Api(admin)
        for driver in self.drivers:
            api.delete_collection_resource_slice(
                field_selector=f"spec.driver={driver}", _preload_content=False
            )
        for client in [*self.clients, admin]:
            client.close()


@pytest.fixture
def bench(kube_cluster: TestCluster) -> Iterator[Bench]:
    b = Bench(kube_cluster)
    try:
        yield b
    finally:
        b.close()


def pool(devs: list[dict[str, Any]]) -> rs.DriverResources:
    return rs.DriverResources(pools={"p": rs.Pool(devices=devs, all_nodes=True)})


def test_publish_10k(benchmark: Any, bench: Bench) -> None:
    desired = pool(devices())
    writes: list[dict[str, int]] = []

    def publish() -> None:
        _, counter = bench.start(bench.new_driver(), desired)
        writes.append(counter.writes())

    benchmark.pedantic(publish, rounds=ROUNDS, iterations=1)
    benchmark.extra_info["writes"] = writes[-1]
    assert all(w == {"POST": -(-DEVICES // 128)} for w in writes)  # 128 devices a slice


def test_change_one_device_of_10k(benchmark: Any, bench: Bench) -> None:
    # The rounds follow each other at once: with the default update_interval each would wait
    # for the previous one's interval (coalescing); this measures one change on its own.
    ctrl, counter = bench.start(bench.new_driver(), pool(devices()), update_interval=0.0)
    states = itertools.cycle([pool(devices(changed=DEVICES // 2)), pool(devices())])
    writes: list[dict[str, int]] = []

    def change() -> None:
        counter.reset()
        ctrl.update(next(states))
        assert ctrl.wait_synced(TIMEOUT)
        writes.append(counter.writes())

    benchmark.pedantic(change, rounds=ROUNDS, iterations=1)
    benchmark.extra_info["writes"] = writes[-1]
    assert all(w == {"PUT": 1} for w in writes)


def test_restart_unchanged_10k(benchmark: Any, bench: Bench) -> None:
    driver = bench.new_driver()
    desired = pool(devices())
    bench.start(driver, desired)[0].stop()
    restarted: list[tuple[rs.Controller, RequestCounter]] = []

    def restart() -> None:
        restarted.append(bench.start(driver, desired, sync_delay=1.0))

    benchmark.pedantic(restart, rounds=ROUNDS, iterations=1)
    # Counted once each controller is idle, after the resync its informer's first events
    # schedule (sync_delay later), not when wait_synced() returned: that resync could write.
    writes = []
    for ctrl, counter in restarted:
        assert ctrl.wait_idle(TIMEOUT)
        ctrl.stop()
        writes.append(counter.writes())
    benchmark.extra_info["writes"] = writes[-1]
    assert all(w == {} for w in writes)
