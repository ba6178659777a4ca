"""The whole chain, timed: a pod created -> its container running (or, without the runtime
step, its CDI edits ready).

50 pods at once, each with a claim for one device, on 10 simulated nodes of the DRA cluster
(kube-scheduler, the resourceclaim controller, kubelet's DRA manager, CDI injection), with the
devices published and prepared by examples/kubelet_driver.py (this library's controller and
kubelet plugin) and, in the same cluster and the same rounds, by the same driver written in Go
on k8s.io/dynamic-resource-allocation v0.37.2 (benches/godriver). Each pod's latency runs from
just before its create request to the moment its container ran under runc and printed its
report (``runc``) or, with the runtime step left out, the moment the simulated runtime had its
CDI edits (``edits``); the rounds alternate the two drivers.

Run: ``.venv/bin/pytest benches/test_dra_chain.py --benchmark-enable -s``.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchsize import sized
from resourceslice import kubeletplugin
from resourceslice._kubeclient import ClosingApiClient
from resourceslice.testing import DRACluster, running_dra_cluster
from resourceslice.testing._jsonlines import JsonLinesProcess
from resourceslice.testing.cluster import build_go_binary
from support.chain import load_example

pytestmark = pytest.mark.integration

NODES = sized(10, 2)
DEVICES_PER_NODE = 8
PODS = sized(50, 4)
ROUNDS = sized(3, 1)
GO_DRIVER = "go-demo.example.com"
HERE = Path(__file__).resolve().parent


class Drivers:
    """Both drivers on every node of one DRA cluster."""

    def __init__(self, cluster: DRACluster) -> None:
        self.cluster = cluster
        self.example = load_example()
        self.clients: list[ClosingApiClient] = []
        self.helpers: list[kubeletplugin.Helper] = []
        self.go: JsonLinesProcess | None = None

    def start(self) -> None:
        nodes = [self.cluster.add_node(f"node-{i}") for i in range(NODES)]
        for node in nodes:
            # A client per node, as each node's driver pod has its own.
            self.clients.append(self.cluster.api_client())
            self.helpers.append(
                self.example.run(
                    self.clients[-1],
                    node.name,
                    cdi_dir=str(node.cdi_dir),
                    devices=DEVICES_PER_NODE,
                    registrar_dir=str(node.registry_dir),
                    plugin_data_dir=str(node.plugin_data_dir(self.example.DRIVER)),
                )
            )
        binary = build_go_binary(
            HERE / "godriver", binary="godriver", cache_name="godriver", what="the Go driver"
        )
        dirs = [
            {"name": n.name, "registry": str(n.registry_dir), "plugins": str(n.plugins_dir),
             "cdi": str(n.cdi_dir)}
            for n in nodes
        ]  # fmt: skip
        self.go = JsonLinesProcess(
            [str(binary), f"--kubeconfig={self.cluster.apiserver.kubeconfigs['admin']}",
             f"--driver={GO_DRIVER}", f"--nodes={json.dumps(dirs)}",
             f"--devices={DEVICES_PER_NODE}"],
            log_path=self.cluster.apiserver.data_dir / "godriver.log",
            what="the Go driver",
        )  # fmt: skip
        self.go.wait_event(lambda e: e.get("event") == "ready")
        for node in nodes:
            self.cluster.wait_registered(node.name, self.example.DRIVER)
            self.cluster.wait_registered(node.name, GO_DRIVER)
        for helper in self.helpers:
            assert helper.controller is not None and helper.controller.wait_synced(timeout=60)
        for name, driver in (("python", self.example.DRIVER), ("go", GO_DRIVER)):
            self.cluster.create_device_class(name, driver=driver)
            self.cluster.create_claim_template(name, device_class=name)

    def burst(self, name: str, round_: int) -> list[float]:
        """PODS pods with a claim of driver ``name``'s class: each one's seconds from its
        create to its container running (its CDI edits, without containers); then all
        deleted (stopped, unprepared, claims gone)."""
        created: dict[str, float] = {}
        for i in range(PODS):
            pod = f"{name}-{round_}-{i}"
            created[pod] = time.time()
            self.cluster.create_pod(pod, claim_template=name)
        latencies = []
        for pod, started in created.items():
            prepared = self.cluster.wait_pod_prepared(pod)
            ran = prepared.containers["ctr"].process is not None
            assert ran == self.cluster.runs_containers, self.cluster.why_no_containers
            latencies.append(prepared.prepared_at - started)
        for pod in created:
            self.cluster.delete_pod(pod)
        return latencies

    def close(self) -> None:
        if self.go is not None:
            self.go.close()
        for helper in self.helpers:
            helper.stop()
        for client in self.clients:
            client.close()


@pytest.fixture(params=[True, False], ids=["runc", "edits"])
def drivers(request: pytest.FixtureRequest) -> Iterator[Drivers]:
    with running_dra_cluster(containers=request.param) as cluster:
        both = Drivers(cluster)
        try:
            both.start()
            yield both
        finally:
            both.close()


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def test_pod_to_container_running(benchmark: Any, drivers: Drivers) -> None:
    latencies: dict[str, list[float]] = {"python": [], "go": []}
    rounds = iter(range(ROUNDS))

    def one_round() -> None:
        n = next(rounds)
        # Alternate which goes first, so neither always meets a cluster the other just busied.
        for name in ("python", "go") if n % 2 == 0 else ("go", "python"):
            latencies[name] += drivers.burst(name, n)

    benchmark.pedantic(one_round, rounds=ROUNDS)
    figures = {
        name: {
            "p50_ms": round(1000 * statistics.median(values), 1),
            "p95_ms": round(1000 * percentile(values, 0.95), 1),
            "max_ms": round(1000 * max(values), 1),
            "pods": len(values),
        }
        for name, values in latencies.items()
    }
    ratios = {
        key: round(figures["python"][key] / figures["go"][key], 2) for key in ("p50_ms", "p95_ms")
    }
    benchmark.extra_info.update(figures=figures, python_over_go=ratios)
    step = "container running" if drivers.cluster.runs_containers else "CDI edits ready"
    print(f"\npod created -> {step}: {figures}; python/go {ratios}")
    assert figures["python"]["pods"] == figures["go"]["pods"] == PODS * ROUNDS
