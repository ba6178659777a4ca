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
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest

import resourceslice as rs
from benchsize import sized
from resourceslice._backend import core
from resourceslice.testing import TestCluster
from resourceslice.testing.counting import RequestCounter

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

TIMEOUT = 600.0
DEVICES_PER_SLICE = 128
#: The one flat pool of the 100k benches, and its slices.
FLAT_POOL = sized(100_000, 1_000)
FLAT_SLICES = math.ceil(FLAT_POOL / DEVICES_PER_SLICE)
_run = itertools.count()


def device(i: int, index: int | None = None) -> dict[str, Any]:
    return {
        "name": f"dev-{i}",
        "attributes": {"index": {"int": i if index is None else index}, "model": {"string": "a"}},
        "capacity": {"memory": {"value": "80Gi"}},
    }


def _status_kib(field: str, pid: int | str = "self") -> int:
    """A ``/proc/<pid>/status`` memory figure (``VmRSS``, ``VmHWM``) in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
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
        self, driver: str, resources: rs.DriverResources, **kwargs: Any
    ) -> tuple[rs.Controller, RequestCounter, kubernetes.client.ApiClient]:
        client = self.cluster.api_client("admin")
        counter = RequestCounter(client)
        ctrl = rs.start_controller(client, driver=driver, resources=resources, **kwargs)
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
    pools, per_pool = sized(200, 5), 1_000
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


@pytest.mark.parametrize("size", sized([1_000, 10_000], [1_000]))
def test_burst_of_1000_updates(benchmark: Any, load: Load, size: int) -> None:
    burst = sized(1_000, 50)
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
    size = FLAT_POOL
    devices = [device(i) for i in range(size)]
    desired = rs.DriverResources(pools={"p": rs.Pool(devices=devices, all_nodes=True)})
    figures: list[dict[str, Any]] = []

    def publish() -> None:
        driver = load.new_driver("flat")
        with PeakRss() as rss:
            ctrl, counter, client = load.start(driver, desired)
            assert ctrl.wait_synced(TIMEOUT)
        slices = load.slices(driver)
        assert len(slices) == math.ceil(size / DEVICES_PER_SLICE)
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
    assert all(f["writes"] == {"POST": FLAT_SLICES} for f in figures)


@pytest.mark.parametrize(
    ("workers", "max_writes_per_second"),
    [(1, 50.0), (4, 50.0), (1, None), (4, None)],
    ids=["1-worker", "4-workers", "1-worker-unlimited", "4-workers-unlimited"],
)
def test_2000_pools_of_50(
    benchmark: Any, load: Load, workers: int, max_writes_per_second: float | None
) -> None:
    """Many small pools (a central publisher): start → synced (the benchmark's time), then,
    once the controller is idle, one pool changed at a time while the 1,999 others stay as
    they are (timed here, in ``extra_info``)."""
    pools, per_pool, changes = sized(2_000, 20), 50, sized(10, 2)
    devices = [device(i) for i in range(per_pool)]
    names = [f"pool-{p}" for p in range(pools)]
    desired = {name: rs.Pool(devices=devices, all_nodes=True) for name in names}
    edited = rs.Pool(devices=[*devices[:7], device(7, index=-1), *devices[8:]], all_nodes=True)
    started: list[tuple[str, rs.Controller, RequestCounter, Any]] = []
    figure: dict[str, Any] = {}

    def publish() -> None:
        driver = load.new_driver(f"many{workers}")
        with PeakRss() as rss:
            ctrl, counter, client = load.start(
                driver,
                rs.DriverResources(pools=desired),
                workers=workers,
                max_writes_per_second=max_writes_per_second,
                sync_delay=sized(30.0, 1.0),
            )
            assert ctrl.wait_synced(TIMEOUT)
        figure.update(writes=counter.writes(), peak_rss_increase=rss.increase)
        started.append((driver, ctrl, counter, client))

    benchmark.pedantic(publish, rounds=1, iterations=1)
    [(driver, ctrl, counter, client)] = started
    # The resync that the informer's events schedule (sync_delay: 30 s by default, 1 s at
    # the small size) is over: each change meets an idle controller.
    assert ctrl.wait_idle(TIMEOUT)
    counter.reset()
    calls, latencies = [], []
    for k in range(changes):
        pool = names[(k * 197) % pools]  # another pool each time: no update_interval wait
        began = time.perf_counter()
        ctrl.update(rs.DriverResources(pools={**desired, pool: edited}))
        calls.append(time.perf_counter() - began)
        assert ctrl.wait_synced(TIMEOUT)
        latencies.append(time.perf_counter() - began)
        ctrl.update(rs.DriverResources(pools=desired))  # back, untimed
        assert ctrl.wait_synced(TIMEOUT)
    figure.update(
        update_writes=counter.writes(),
        update_call_median_s=round(statistics.median(calls), 4),
        update_to_synced_median_s=round(statistics.median(latencies), 4),
        update_to_synced_max_s=round(max(latencies), 4),
    )
    slices = load.slices(driver)
    load.cleanup(driver, ctrl, client)
    benchmark.extra_info.update(figure)
    print(f"\n2000 pools x 50, {workers} worker(s), {max_writes_per_second} w/s: {figure}")
    assert len(slices) == pools
    for name in (names[0], names[-1]):
        assert_pool_is(slices, name, devices)
    assert figure["writes"] == {"POST": pools}
    assert figure["update_writes"] == {"PUT": 2 * changes}


def test_restart_over_100k_pool(benchmark: Any, load: Load) -> None:
    """A controller restarted over the 100k pool it published: the informer's relist of the
    782 slices, then a sync that finds nothing to write, and none after the resync that the
    informer's events schedule ``sync_delay`` later."""
    size, sync_delay = FLAT_POOL, 2.0
    devices = [device(i) for i in range(size)]
    desired = rs.DriverResources(pools={"p": rs.Pool(devices=devices, all_nodes=True)})
    driver = load.new_driver("restart")
    ctrl, _, client = load.start(driver, desired)
    assert ctrl.wait_synced(TIMEOUT)
    ctrl.stop()
    client.close()
    figures: list[dict[str, Any]] = []

    def relist() -> tuple[int, int]:
        """The informer's list alone, decoded as it arrives (as the informer does); the size
        of its JSON and the peak RSS increase."""
        received = 0

        def chunks(response: Any) -> Iterator[bytes]:
            nonlocal received
            for chunk in response.stream(1 << 16):
                received += len(chunk)
                yield chunk

        with PeakRss() as rss:
            response = load.api.list_resource_slice(
                field_selector=f"spec.driver={driver}", _preload_content=False
            )
            _, records = core.decode_list_chunks(chunks(response))
            response.release_conn()
            assert len(records) == FLAT_SLICES
            del records
        return received, rss.increase

    def restart() -> None:
        json_bytes, relist_rss = relist()
        client = load.cluster.api_client("admin")
        counter = RequestCounter(client)
        with PeakRss() as rss:
            started = time.monotonic()
            ctrl = rs.start_controller(
                client, driver=driver, resources=desired, sync_delay=sync_delay
            )
            assert ctrl.wait_synced(TIMEOUT)
            synced = time.monotonic() - started
        # Any resync that the informer's events queued (sync_delay later) must write nothing
        # either: idle is once none is pending.
        assert ctrl.wait_idle(TIMEOUT)
        figures.append(
            {
                "start_to_synced_s": round(synced, 2),
                "writes": counter.writes(),
                "syncs": ctrl.stats().syncs,
                "peak_rss_increase": rss.increase,
                "list_json_bytes": json_bytes,
                "relist_peak_rss_increase": relist_rss,
                "relist_rss_over_json": round(relist_rss / json_bytes, 2),
                "rss_over_json": round(rss.increase / json_bytes, 2),
            }
        )
        ctrl.stop()
        client.close()

    benchmark.pedantic(restart, rounds=2, iterations=1)
    load.api.delete_collection_resource_slice(
        field_selector=f"spec.driver={driver}", _preload_content=False
    )
    benchmark.extra_info.update(figures[-1])
    print(f"\nrestart over the 100k pool: {figures}")
    assert all(f["writes"] == {} for f in figures)
