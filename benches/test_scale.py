"""Scale on the real apiserver (issue 22, item 4): what a controller holding 100,000 devices
keeps in memory, and 1,000,000 devices across 100 pools.

Both use the benchmark device of ``test_core.gpu`` (8 attributes, 2 capacities). Memory is
this process's RSS (``/proc/self/status``), always after ``gc.collect()``; "trimmed" figures
are taken after ``malloc_trim(0)`` too, which gives the heap's free pages back, so that the
difference tells memory freed but kept by the allocator from memory in use.

Run: ``.venv/bin/pytest benches/test_scale.py --benchmark-enable -s -q`` (``-k held`` or
``-k million`` for one).
"""

from __future__ import annotations

import ctypes
import gc
import itertools
import json
import os
import time
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any

import kubernetes.client
import pytest

import resourceslice as rs
from benchsize import sized
from resourceslice._backend import core
from resourceslice._plain import prepare
from resourceslice.controller import DEFAULT_MAX_SLICE_BYTES
from resourceslice.testing import TestCluster, running_cluster
from resourceslice.testing.counting import RequestCounter
from test_core import gpu
from test_load import PeakRss, _status_kib

if TYPE_CHECKING:
    from resourceslice._core import SliceRecord

pytestmark = [pytest.mark.integration, pytest.mark.timeout(3600)]

TIMEOUT = 1800.0
DEVICES_PER_SLICE = 128
_run = itertools.count()


def rss(trim: bool) -> int:
    """This process's resident bytes now, after a collection (and ``malloc_trim(0)``)."""
    gc.collect()
    if trim:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    return _status_kib("VmRSS") * 1024


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def warm_up(cluster: TestCluster) -> None:
    """One small controller started and stopped: the modules and client code a controller
    loads on first use are in the baseline, not in what is measured after."""
    client = cluster.api_client("admin")
    driver = f"warm-{next(_run)}.scale.example.com"
    pools = {"w": rs.Pool(devices=[gpu(0)], all_nodes=True)}
    ctrl = rs.start_controller(client, driver=driver, resources=rs.DriverResources(pools=pools))
    assert ctrl.wait_synced(TIMEOUT)
    ctrl.stop()
    delete_slices(client, driver)
    client.close()


def delete_slices(client: kubernetes.client.ApiClient, driver: str) -> None:
    kubernetes.client.ResourceV1Api(client).delete_collection_resource_slice(
        field_selector=f"spec.driver={driver}", _preload_content=False
    )


def test_held_rss_of_100k_devices(benchmark: Any, kube_cluster: TestCluster) -> None:
    """The memory a synced controller holds for one pool of 100,000 devices, against the
    compact JSON (``json.dumps``, no spaces) of those devices.

    Counted: the RSS increase over a baseline taken before the devices are built (the
    interpreter, the imports, a client, a controller's code warmed up), once the controller
    is synced and the caller has dropped its own device dicts, as a driver that builds its
    devices, hands them over and lets them go. Not counted: the caller's dicts themselves
    (about 6.6 times their JSON in CPython); the peak during the publish is over the RSS
    with them.
    """
    size = sized(100_000, 1_000)
    figures: list[dict[str, Any]] = []

    def hold() -> None:
        warm_up(kube_cluster)
        client = kube_cluster.api_client("admin")
        driver = f"held-{next(_run)}.scale.example.com"
        baseline = rss(trim=True)
        devices = [gpu(i) for i in range(size)]
        json_bytes = len(json.dumps(devices, separators=(",", ":")))
        resources = rs.DriverResources(pools={"p": rs.Pool(devices=devices, all_nodes=True)})
        with PeakRss() as peak:
            ctrl = rs.start_controller(
                client, driver=driver, resources=resources, max_writes_per_second=None
            )
            assert ctrl.wait_synced(TIMEOUT)
        del devices, resources
        # The device texts held, each distinct one once (shared by the desired state and
        # the records, docs/core.md §6): the Rust core's own count.
        text_bytes = core.held_texts()[1] if hasattr(core, "held_texts") else 0
        held = rss(trim=False) - baseline
        held_trimmed = rss(trim=True) - baseline
        ctrl.stop()
        del ctrl
        after_stop = rss(trim=True) - baseline
        # The two copies of the devices a synced controller holds, each measured alone: the
        # desired state (what update() keeps), and the informer's records of the slices.
        devices = [gpu(i) for i in range(size)]
        resources = rs.DriverResources(pools={"p": rs.Pool(devices=devices, all_nodes=True)})
        before = rss(trim=True)
        desired, errors = prepare(driver, resources, None, DEFAULT_MAX_SLICE_BYTES)
        assert desired is not None, errors
        desired_bytes = rss(trim=True) - before
        del desired, devices, resources
        before = rss(trim=True)
        records = stored_records(client, driver)
        records_bytes = rss(trim=True) - before
        figures.append(
            {
                "devices_json_bytes": json_bytes,
                "held": held,
                "held_over_json": round(held / json_bytes, 2),
                "text_bytes_over_json": round(text_bytes / json_bytes, 2),
                "held_trimmed": held_trimmed,
                "held_trimmed_over_json": round(held_trimmed / json_bytes, 2),
                "peak_increase_during_publish": peak.increase,
                "after_stop": after_stop,
                "desired": desired_bytes,
                "desired_over_json": round(desired_bytes / json_bytes, 2),
                "records": records_bytes,
                "records_over_json": round(records_bytes / json_bytes, 2),
                "slices": len(records),
            }
        )
        del records
        delete_slices(client, driver)
        client.close()

    benchmark.pedantic(hold, rounds=2, iterations=1)
    benchmark.extra_info.update(figures[-1])
    print(f"\n100k devices held: {figures}")
    assert all(f["slices"] == -(-size // DEVICES_PER_SLICE) for f in figures)


def stored_records(client: kubernetes.client.ApiClient, driver: str) -> list[SliceRecord]:
    """The driver's slices as the informer decodes them (as they arrive: a list of a million
    devices as Python objects would take gigabytes)."""
    response = kubernetes.client.ResourceV1Api(client).list_resource_slice(
        field_selector=f"spec.driver={driver}", _preload_content=False
    )
    try:
        return core.decode_list_chunks(response.stream(1 << 16))[1]
    finally:
        response.release_conn()


def etcd_db_size(cluster: TestCluster) -> int:
    """etcd's database file size in bytes (its maintenance status, JSON gateway)."""
    request = urllib.request.Request(
        cluster.etcd_url + "/v3/maintenance/status", data=b"{}", method="POST"
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return int(json.load(response)["dbSize"])


#: Only resource.k8s.io/v1 served (the test apiserver serves v1beta1 and v1beta2 as well by
#: default). The apiserver keeps a watch cache per served version of a resource, each holding
#: every slice decoded: with three, the 1,000,000 devices did not fit on the 24 GiB machine
#: (BENCHMARKS.md, 1,000,000 devices).
ONLY_V1 = "--runtime-config=resource.k8s.io/v1beta1=false,resource.k8s.io/v1beta2=false"
#: The apiserver's Go heap limit (``GOMEMLIMIT``). Its one watch cache holds about 6.5 GB of
#: decoded slices at the end of the publish; with Go's default pacing (``GOGC=100``: collect
#: when the heap has doubled) the process grew to 15.5 GB, more than a shared 24 GiB machine
#: can spare. The limit makes it collect more often instead.
SERVER_MEMORY_LIMIT = "10GiB"


def test_million_devices_in_100_pools(benchmark: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """100 pools x 10,000 devices, one controller with the default settings, on a cluster of
    its own (so that the apiserver's memory is this run's): the first publish, then steady
    state.

    The 100 pools are given the same 10,000 device dicts (device names are per pool), so the
    caller's dicts are 1% of what they would be with a list each, and the memory measured is
    the controller's.
    """
    pools, per_pool = sized((100, 10_000), (5, 1_000))
    one, first, second = per_pool * 4_321 // 10_000, pools * 61 // 100, pools * 37 // 100
    devices = [gpu(i) for i in range(per_pool)]
    names = [f"pool-{p:03}" for p in range(pools)]
    desired = {name: rs.Pool(devices=devices, all_nodes=True) for name in names}
    changed = list(devices)
    changed[one] = gpu(one, revision=1)
    # Compact JSON of the 1,000,000 devices: the same 10,000 in each pool.
    json_bytes = pools * len(json.dumps(devices, separators=(",", ":")))
    figure: dict[str, Any] = {"devices_json_bytes": json_bytes}

    monkeypatch.setenv("GOMEMLIMIT", SERVER_MEMORY_LIMIT)  # the server inherits it
    with running_cluster(extra_args=[ONLY_V1]) as cluster:
        server_pid = cluster.process.pid if cluster.process else 0
        warm_up(cluster)
        client = cluster.api_client("admin")
        counter = RequestCounter(client)
        driver = f"million-{next(_run)}.scale.example.com"
        baseline = rss(trim=True)
        started: list[rs.Controller] = []

        def publish() -> None:
            cpu = cpu_seconds(os.getpid()), cpu_seconds(server_pid)
            with PeakRss() as peak:
                began = time.monotonic()
                ctrl = rs.start_controller(
                    client,
                    driver=driver,
                    resources=rs.DriverResources(pools=desired),
                    sync_delay=sized(30.0, 1.0),  # the default; short for the small size
                )
                assert ctrl.wait_synced(TIMEOUT)
                figure["start_to_synced_s"] = round(time.monotonic() - began, 1)
            figure["publish_cpu_s"] = round(cpu_seconds(os.getpid()) - cpu[0], 1)
            figure["publish_server_cpu_s"] = round(cpu_seconds(server_pid) - cpu[1], 1)
            figure["writes"] = counter.writes()
            figure["server_peak_rss_publish"] = _status_kib("VmHWM", server_pid) * 1024
            figure["peak_rss_increase"] = peak.increase
            started.append(ctrl)

        benchmark.pedantic(publish, rounds=1, iterations=1)
        [ctrl] = started
        # The resync of every pool that the informer's events scheduled (sync_delay) is over.
        began = time.monotonic()
        assert ctrl.wait_idle(TIMEOUT)
        figure["synced_to_idle_s"] = round(time.monotonic() - began, 1)
        figure["writes_until_idle"] = counter.writes()
        figure["rss_at_rest"] = rss(trim=False) - baseline
        figure["rss_at_rest_trimmed"] = rss(trim=True) - baseline
        figure["rss_at_rest_trimmed_over_json"] = round(
            figure["rss_at_rest_trimmed"] / json_bytes, 2
        )
        figure["server_rss"] = _status_kib("VmRSS", server_pid) * 1024
        figure["server_peak_rss"] = _status_kib("VmHWM", server_pid) * 1024
        figure["etcd_db_bytes"] = etcd_db_size(cluster)

        # Each step changes a pool no earlier step synced: none waits for update_interval.
        # One device changed in one pool through update_devices(), then one in another pool
        # through update() of the whole state (the first change included).
        counter.reset()
        began = time.monotonic()
        ctrl.update_devices(names[first], upsert=[changed[one]])
        assert ctrl.wait_synced(TIMEOUT)
        figure["update_devices_to_synced_s"] = round(time.monotonic() - began, 3)
        figure["update_devices_writes"] = counter.writes()
        desired[names[first]] = rs.Pool(changed, all_nodes=True)

        counter.reset()
        began, cpu = time.monotonic(), time.thread_time()
        ctrl.update(
            rs.DriverResources(pools={**desired, names[second]: rs.Pool(changed, all_nodes=True)})
        )
        figure["one_change_update_call_s"] = round(time.monotonic() - began, 3)
        figure["one_change_update_call_cpu_s"] = round(time.thread_time() - cpu, 3)
        assert ctrl.wait_synced(TIMEOUT)
        figure["one_change_to_synced_s"] = round(time.monotonic() - began, 3)
        figure["one_change_writes"] = counter.writes()
        desired[names[second]] = rs.Pool(changed, all_nodes=True)

        # The whole state again, unchanged, three times: validated and compared, nothing
        # to sync. Then json.dumps of the same devices, the yardstick for update().
        assert ctrl.wait_idle(TIMEOUT)
        counter.reset()
        syncs = ctrl.stats().syncs
        calls, call_cpu = [], []
        with PeakRss() as peak:
            for _ in range(3):
                began, cpu = time.monotonic(), time.thread_time()
                ctrl.update(rs.DriverResources(pools=desired))
                calls.append(round(time.monotonic() - began, 3))
                call_cpu.append(round(time.thread_time() - cpu, 3))
        assert ctrl.wait_idle(TIMEOUT)
        figure["unchanged_update_call_s"] = calls
        figure["unchanged_update_call_cpu_s"] = call_cpu
        figure["unchanged_update_peak_rss_increase"] = peak.increase
        figure["unchanged_update_writes"] = counter.writes()
        figure["unchanged_update_syncs"] = ctrl.stats().syncs - syncs
        began, cpu = time.monotonic(), time.thread_time()
        for pool in desired.values():
            json.dumps(pool.devices)
        figure["json_dumps_s"] = round(time.monotonic() - began, 3)
        figure["json_dumps_cpu_s"] = round(time.thread_time() - cpu, 3)
        figure["server_peak_rss_end"] = _status_kib("VmHWM", server_pid) * 1024

        records = stored_records(client, driver)
        ctrl.stop()
        del ctrl, started[:]

        # The restart of the controller (a new process would be the same, plus the imports)
        # over the unchanged state: the informer's relist of every slice, then syncs that find
        # nothing to write, and none in the resync that the relist's events schedule.
        counter.reset()
        gc.collect()
        rested = rss(trim=True)
        cpu = cpu_seconds(os.getpid())
        with PeakRss() as peak:
            began = time.monotonic()
            ctrl = rs.start_controller(
                client,
                driver=driver,
                resources=rs.DriverResources(pools=desired),
                sync_delay=sized(30.0, 1.0),
            )
            assert ctrl.wait_synced(TIMEOUT)
            figure["restart_to_synced_s"] = round(time.monotonic() - began, 1)
        figure["restart_cpu_s"] = round(cpu_seconds(os.getpid()) - cpu, 1)
        figure["restart_peak_rss_increase"] = peak.increase
        assert ctrl.wait_idle(TIMEOUT)
        figure["restart_writes_until_idle"] = counter.writes()
        figure["restart_rss_at_rest_trimmed"] = rss(trim=True) - rested
        ctrl.stop()
        client.close()

    benchmark.extra_info.update(figure)
    print(f"\n1M devices in 100 pools: {figure}")
    per_pool_slices = -(-per_pool // DEVICES_PER_SLICE)
    assert figure["writes"] == {"POST": pools * per_pool_slices}
    assert figure["one_change_writes"] == {"PUT": 1}
    assert figure["update_devices_writes"] == {"PUT": 1}
    assert figure["unchanged_update_writes"] == {}
    assert figure["restart_writes_until_idle"] == {}
    assert len(records) == pools * per_pool_slices
    published: dict[str, set[str]] = {name: set() for name in names}
    for record in records:
        assert record.resource_slice_count == per_pool_slices
        published[record.pool].update(record.device_names)
    assert published == {name: {d["name"] for d in devices} for name in names}
