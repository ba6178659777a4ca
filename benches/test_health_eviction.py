"""Health that evicts, timed: a device turns unhealthy -> its pod is evicted -> the
replacement pod is prepared on another device.

On the DRA cluster of 1.37 (kube-scheduler, the resourceclaim controller, the device-taint
eviction controller, a simulated node with kubelet's DRA manager), with the end-to-end tests'
driver (tests/e2e/health.py: this library's controller and kubelet plugin, one health source
for the taint and kubelet's health stream), both ways of tainting: the device's slice
(``update_devices``) and a DeviceTaintRule. Each run:

- t0: just before the health source marks the pod's device unhealthy (a NoExecute taint);
- evicted: the node unprepared the pod's claim (the eviction controller deleted the pod,
  kubelet stopped it), from the node's event;
- then the bench creates the replacement pod from the same template, as its ReplicaSet would
  (there is none in the DRA cluster; a ReplicaSet reacts earlier, to the deletion itself);
- prepared: the node prepared the replacement on another device.

The device is then healthy again (the taint goes) and the replacement is the next run's pod.
20 runs per way. The slice way twice: with each run's taint a change of its own ("lone": the
run waits out the controller's ``update_interval``, 1 s, after the repair), and right after
the repair ("back-to-back"), when the controller holds the change for the rest of that
interval, as it does for a pool changed twice within it. A DeviceTaintRule is written at once.

Run: ``.venv/bin/pytest benches/test_health_eviction.py --benchmark-enable -s``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from typing import Any

import pytest

import resourceslice as rs
from benchsize import sized
from e2e.health import HealthDriver, HealthSource, rule_taints, slice_taints
from resourceslice.controller import DEFAULT_UPDATE_INTERVAL
from resourceslice.testing import DRACluster, PreparedPod, running_dra_cluster
from support.chain import EnvDriver, start_env_plugin

pytestmark = pytest.mark.integration

DRIVER = "gpu.bench.example.com"
DEVICES = [f"gpu-{i}" for i in range(4)]
RUNS = sized(20, 1)


def device_of(pod: PreparedPod) -> str:
    (env,) = pod.containers["ctr"].env
    return next(d for d in DEVICES if env == EnvDriver.env_of(d))


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


@pytest.fixture(scope="module")
def cluster() -> Iterator[DRACluster]:
    with running_dra_cluster() as started:
        yield started


@pytest.mark.parametrize("way", ["slice-lone", "slice-back-to-back", "rule"])
def test_unhealthy_to_replacement_prepared(benchmark: Any, cluster: DRACluster, way: str) -> None:
    path = way.split("-")[0]
    client = cluster.api_client()
    node = cluster.add_node(f"node-{way}")
    health = HealthSource(node.name, DEVICES)
    plugin = HealthDriver(DRIVER, node.cdi_dir, health)
    pool = rs.Pool(devices=[{"name": d} for d in DEVICES], max_devices_per_slice=64)
    _, helper = start_env_plugin(cluster, client, node, DRIVER, pool=pool, plugin=plugin)
    assert helper.controller is not None
    rules = rs.DeviceTaintRules(client, driver=DRIVER) if path == "rule" else None
    published: rs.Controller | rs.DeviceTaintRules = rules or helper.controller
    health.publish = (
        rule_taints(rules, node.name) if rules else slice_taints(helper.controller, node.name)
    )
    namespace = f"bench-{way}"
    selector = {"kubernetes.io/hostname": node.name}
    figures: dict[str, list[float]] = {"evicted": [], "replaced": [], "total": []}
    try:
        cluster.create_device_class(f"gpu-{way}", driver=DRIVER)
        cluster.create_claim_template("one-gpu", device_class=f"gpu-{way}", namespace=namespace)
        cluster.create_pod("pod-0", claim_template="one-gpu", namespace=namespace,
                           node_selector=selector)  # fmt: skip
        current = cluster.wait_pod_prepared("pod-0", namespace)
        runs = iter(range(1, RUNS + 1))

        def one_run() -> None:
            nonlocal current
            n = next(runs)
            device = device_of(current)
            started = time.time()
            health.set(device, healthy=False, reason="xid-79", message="XID 79")
            eviction = cluster.wait_pod_evicted(current)
            cluster.create_pod(f"pod-{n}", claim_template="one-gpu", namespace=namespace,
                               node_selector=selector)  # fmt: skip
            replacement = cluster.wait_pod_prepared(f"pod-{n}", namespace)
            assert device_of(replacement) != device
            figures["evicted"].append(eviction.unprepared_at - started)
            figures["replaced"].append(replacement.prepared_at - eviction.unprepared_at)
            figures["total"].append(replacement.prepared_at - started)
            # Repaired: the taint goes before the next run, which breaks the replacement's.
            health.set(device, healthy=True)
            assert published.wait_synced(timeout=60)
            if way == "slice-lone":
                time.sleep(DEFAULT_UPDATE_INTERVAL)  # the next taint is a change of its own
            current = replacement

        benchmark.pedantic(one_run, rounds=RUNS)
    finally:
        health.close()
        if rules is not None:
            rules.stop()
        helper.stop()
        client.close()
    summary = {
        name: {
            "p50_ms": round(1000 * statistics.median(values), 1),
            "p95_ms": round(1000 * percentile(values, 0.95), 1),
            "max_ms": round(1000 * max(values), 1),
        }
        for name, values in figures.items()
    }
    benchmark.extra_info.update(summary=summary, runs=RUNS)
    print(f"\n{way}: {summary}")
    assert all(len(values) == RUNS for values in figures.values())
