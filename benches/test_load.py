"""Load on the real apiserver: many pools, a burst of updates, one very large pool.

Each scenario runs a fresh driver per round (few rounds: they take seconds to minutes) and
keeps its figures in the benchmark's ``extra_info``: writes counted on the client, and the
increase of this process's peak RSS over its RSS just before the round. The peak is reset
for each round by writing ``5`` to ``/proc/self/clear_refs`` (``VmHWM`` is otherwise
monotonic over the whole process); the apiserver is a separate process and not counted.
"""

from __future__ import annotations

import ctypes
import gc
import itertools
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest

import resourceslice as rs
from resourceslice.testing import TestCluster
from resourceslice.testing.counting import RequestCounter

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

TIMEOUT = 600.0
DEVICES_PER_SLICE = 128
_run = itertools.count()


def device(i: int, index: int | None = None) -> dict[str, Any]:
    return {
        "name": f"dev-{i}",
        "attributes": {"index": {"int": i if index is None else index}, "model": {"string": "a"}},
        "capacity": {"memory": {"value": "80Gi"}},
    }


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise LookupError(field)


class PeakRss:
    """Peak RSS increase, in bytes, of this process from ``__enter__`` to ``__exit__``."""

    def __enter__(self) -> PeakRss:
        # Give freed heap back first: otherwise memory an earlier round freed stays resident
        # and hides this round's growth.
        gc.collect()
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        # Resets VmHWM to the current RSS, so the peak seen after is this block's own.
        Path("/proc/self/clear_refs").write_text("5")
        self.baseline = _status_kib("VmRSS")
        return self

    def __exit__(self, *exc: object) -> None:
        self.increase = (_status_kib("VmHWM") - self.baseline) * 1024


class Load:
    def __init__(self, cluster: TestCluster) -> None:
        self.cluster = cluster
        self.admin = cluster.api_client("admin")
        self.api = kubernetes.client.ResourceV1Api(self.admin)

    def new_driver(self, scenario: str) -> str:
        return f"{scenario}-{next(_run)}.load.example.com"

    def start(
        self, driver: str, resources: rs.DriverResources
    ) -> tuple[rs.Controller, RequestCounter, kubernetes.client.ApiClient]:
        client = self.cluster.api_client("admin")
        counter = RequestCounter(client)
        ctrl = rs.start_controller(client, driver=driver, resources=resources)
        return ctrl, counter, client

    def slices(self, driver: str) -> list[dict[str, Any]]:
        response = self.api.list_resource_slice(
            field_selector=f"spec.driver={driver}", _preload_content=False
        )
        items: list[dict[str, Any]] = json.loads(response.data)["items"]
        return items

    def cleanup(self, driver: str, ctrl: rs.Controller, client: Any) -> None:
        """Stop the controller and delete its slices, so the shared server stays light."""
        ctrl.stop()
        client.close()
        self.api.delete_collection_resource_slice(
            field_selector=f"spec.driver={driver}", _preload_content=False
        )


@pytest.fixture
def load(kube_cluster: TestCluster) -> Iterator[Load]:
    lo = Load(kube_cluster)
    try:
        yield lo
    finally:
        lo.admin.close()


def published_devices(slices: list[dict[str, Any]]) -> dict[str, dict[str, list[Any]]]:
    """Pool -> device name -> every published copy of that device (more than one: a duplicate)."""
    pools: dict[str, dict[str, list[Any]]] = {}
    for item in slices:
        pool = pools.setdefault(item["spec"]["pool"]["name"], {})
        for dev in item["spec"]["devices"]:
            pool.setdefault(dev["name"], []).append(dev)
    return pools


def assert_pool_is(slices: list[dict[str, Any]], pool: str, devices: list[dict[str, Any]]) -> None:
    mine = [s for s in slices if s["spec"]["pool"]["name"] == pool]
    counts = {s["spec"]["pool"]["resourceSliceCount"] for s in mine}
    generations = {s["spec"]["pool"]["generation"] for s in mine}
    assert counts == {len(mine)} and len(generations) == 1
    assert published_devices(mine)[pool] == {d["name"]: [d] for d in devices}


def test_200_pools_of_1k(benchmark: Any, load: Load) -> None:
    pools, per_pool = 200, 1_000
    devices = [device(i) for i in range(per_pool)]
    desired = rs.DriverResources(
        pools={f"pool-{p}": rs.Pool(devices=devices, all_nodes=True) for p in range(pools)}
    )
    figures: list[dict[str, Any]] = []

    def converge() -> None:
        driver = load.new_driver("pools")
        with PeakRss() as rss:
            ctrl, counter, client = load.start(driver, desired)
            assert ctrl.wait_synced(TIMEOUT)
        figures.append({"writes": counter.writes(), "peak_rss_increase": rss.increase})
        slices = load.slices(driver)
        per_pool_slices = math.ceil(per_pool / DEVICES_PER_SLICE)
        assert len(slices) == pools * per_pool_slices
        for name in ("pool-0", f"pool-{pools - 1}"):
            assert_pool_is(slices, name, devices)
        load.cleanup(driver, ctrl, client)

    benchmark.pedantic(converge, rounds=1, iterations=1)
    benchmark.extra_info.update(figures[-1])
    print(f"\n200 pools x 1k: {figures}")
    assert figures[-1]["writes"] == {"POST": pools * math.ceil(per_pool / DEVICES_PER_SLICE)}


@pytest.mark.parametrize("size", [1_000, 10_000])
def test_burst_of_1000_updates(benchmark: Any, load: Load, size: int) -> None:
    burst = 1_000
    figures: list[dict[str, Any]] = []

    def storm() -> None:
        driver = load.new_driver(f"burst{size}")
        devices = [device(i) for i in range(size)]
        ctrl, counter, client = load.start(
            driver, rs.DriverResources(pools={"p": rs.Pool(devices, all_nodes=True)})
        )
        assert ctrl.wait_synced(TIMEOUT)
        counter.reset()
        # Update k changes device k (cumulatively); update() copies its argument, so the one
        # list can be edited in place between calls.
        for k in range(burst):
            devices[k] = device(k, index=-k)
            ctrl.update(rs.DriverResources(pools={"p": rs.Pool(devices, all_nodes=True)}))
        assert ctrl.wait_synced(TIMEOUT)
        figures.append({"writes": counter.writes(), "stats": ctrl.stats().__dict__})
        assert_pool_is(load.slices(driver), "p", devices)
        load.cleanup(driver, ctrl, client)

    benchmark.pedantic(storm, rounds=1, iterations=1)
    writes = figures[-1]["writes"]
    benchmark.extra_info.update(figures[-1])
    print(f"\nburst of {burst} updates, pool of {size}: {figures}")
    # No exact figure: how many updates one sync absorbs depends on how long update() takes
    # against a sync (see BENCHMARKS.md); never more writes than updates.
    assert set(writes) <= {"PUT"} and sum(writes.values()) <= burst


def test_100k_devices_one_pool(benchmark: Any, load: Load) -> None:
    size = 100_000
    devices = [device(i) for i in range(size)]
    desired = rs.DriverResources(pools={"p": rs.Pool(devices=devices, all_nodes=True)})
    figures: list[dict[str, Any]] = []

    def publish() -> None:
        driver = load.new_driver("flat")
        with PeakRss() as rss:
            ctrl, counter, client = load.start(driver, desired)
            assert ctrl.wait_synced(TIMEOUT)
        slices = load.slices(driver)
        assert len(slices) == math.ceil(size / DEVICES_PER_SLICE) == 782
        assert_pool_is(slices, "p", devices)
        for item in slices:
            del item["metadata"]["managedFields"]
        json_bytes = sum(len(json.dumps(s, separators=(",", ":"))) for s in slices)
        figures.append(
            {
                "writes": counter.writes(),
                "peak_rss_increase": rss.increase,
                "slices_json_bytes": json_bytes,
                "rss_over_json": round(rss.increase / json_bytes, 2),
            }
        )
        load.cleanup(driver, ctrl, client)

    benchmark.pedantic(publish, rounds=2, iterations=1)
    benchmark.extra_info.update(figures[-1])
    print(f"\n100k flat pool: {figures}")
    assert all(f["writes"] == {"POST": 782} for f in figures)
