"""What a node agent costs, side by side with Go's in one run: examples/kubelet_driver.py (this
library) and benches/godriver (the same driver on k8s.io/dynamic-resource-allocation v0.37.2),
each a process of its own serving its own simulated node of one DRA cluster.

Per driver and device count: start → registered (process spawned → kubelet's plugin manager
registered it), then, idle for ``IDLE`` seconds once both have published: RSS and PSS (from
``/proc/<pid>/smaps_rollup``), threads, voluntary context switches (every thread's) and CPU
over the idle window; then RSS after ``PODS`` pods (or one per device, when fewer) each given
one of its devices (prepared).

Run: ``.venv/bin/pytest benches/test_node_agent.py --benchmark-enable -s`` (about 5 min).
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchsize import sized
from resourceslice._http import get_json
from resourceslice.testing import DRACluster, SimulatedNode, running_dra_cluster, wait_until
from resourceslice.testing._jsonlines import JsonLinesProcess
from resourceslice.testing.cluster import build_go_binary
from support.chain import load_example
from test_scale import cpu_seconds

pytestmark = pytest.mark.integration

HERE = Path(__file__).resolve().parent
GO_DRIVER = "go-demo.example.com"
IDLE = sized(60.0, 2.0)
PODS = sized(10, 2)
COUNTS = sized([8, 128, 1_024], [8])


def status_field(pid: int, field: str, task: str = "") -> int:
    """A number of ``/proc/<pid>[/task/<tid>]/status`` (``VmRSS`` in KiB, ``Threads``...)."""
    for line in Path(f"/proc/{pid}{task}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise LookupError(field)


def pss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1])
    raise LookupError("Pss")


def voluntary_switches(pid: int) -> int:
    """Voluntary context switches of every thread of ``pid`` (a wakeup each, about)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):  # a thread ended
            total += status_field(pid, "voluntary_ctxt_switches", f"/task/{task.name}")
    return total


class Agent:
    """One driver's node agent: its process, its node, its figures."""

    def __init__(self, side: str, driver: str, node: SimulatedNode) -> None:
        self.side, self.driver, self.node = side, driver, node
        self.process: JsonLinesProcess | None = None
        self.figures: dict[str, Any] = {}

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self, cluster: DRACluster, devices: int) -> None:
        kubeconfig = cluster.apiserver.kubeconfigs["admin"]
        node = self.node
        if self.side == "python":
            args = [sys.executable, str(HERE / "node_agent.py"), f"--kubeconfig={kubeconfig}",
                    f"--node={node.name}", f"--registry={node.registry_dir}",
                    f"--plugin-data={node.plugin_data_dir(self.driver)}",
                    f"--cdi={node.cdi_dir}", f"--devices={devices}"]  # fmt: skip
        else:
            binary = build_go_binary(
                HERE / "godriver", binary="godriver", cache_name="godriver", what="the Go driver"
            )
            dirs = [{"name": node.name, "registry": str(node.registry_dir),
                     "plugins": str(node.plugins_dir), "cdi": str(node.cdi_dir)}]  # fmt: skip
            args = [str(binary), f"--kubeconfig={kubeconfig}", f"--driver={self.driver}",
                    f"--nodes={json.dumps(dirs)}", f"--devices={devices}"]  # fmt: skip
        events = len(cluster.events())
        began = time.monotonic()
        self.process = JsonLinesProcess(
            args, log_path=cluster.apiserver.data_dir / f"{self.side}-agent.log", what=self.side
        )
        cluster.wait_registered(node.name, self.driver, after=events)
        self.figures["start_to_registered_s"] = round(time.monotonic() - began, 3)
        self.process.wait_event(lambda e: e.get("event") == "ready", timeout=120)

    def stop(self) -> None:
        if self.process is not None:
            self.process.close()


def published(cluster: DRACluster, agent: Agent) -> int:
    """The devices of ``agent``'s node published by its driver."""
    with cluster.api_client() as client:
        listed = json.loads(get_json(client, "/apis/resource.k8s.io/v1/resourceslices"))
    return sum(
        len(s["spec"].get("devices") or ())
        for s in listed["items"]
        if s["spec"]["driver"] == agent.driver and s["spec"].get("nodeName") == agent.node.name
    )


@pytest.fixture(scope="module")
def cluster() -> Iterator[DRACluster]:
    with running_dra_cluster() as made:
        yield made


@pytest.mark.parametrize("devices", COUNTS)
def test_node_agent_memory_and_wakeups(benchmark: Any, cluster: DRACluster, devices: int) -> None:
    python_driver = load_example().DRIVER
    agents = [
        Agent("python", python_driver, cluster.add_node(f"py-{devices}")),
        Agent("go", GO_DRIVER, cluster.add_node(f"go-{devices}")),
    ]
    try:

        def measure() -> None:
            for agent in agents:  # one after the other: neither starts on a busy machine
                agent.start(cluster, devices)
                wait_until(lambda a=agent: published(cluster, a) == devices, 120)
            before = {a.side: (voluntary_switches(a.pid), cpu_seconds(a.pid)) for a in agents}
            began = time.monotonic()
            # The measurement window: both agents idle, nothing asked of them.
            time.sleep(IDLE)
            window = time.monotonic() - began
            for agent in agents:
                switches, cpu = before[agent.side]
                agent.figures.update(
                    rss_idle_mb=round(status_field(agent.pid, "VmRSS") / 1024, 1),
                    pss_idle_mb=round(pss_kib(agent.pid) / 1024, 1),
                    threads=status_field(agent.pid, "Threads"),
                    wakeups_per_s=round((voluntary_switches(agent.pid) - switches) / window, 2),
                    idle_cpu_ms_per_min=round((cpu_seconds(agent.pid) - cpu) / window * 60_000, 1),
                )
            for agent in agents:
                cls = f"{agent.side}-{devices}"
                cluster.create_device_class(cls, driver=agent.driver)
                cluster.create_claim_template(cls, device_class=cls)
                pods = [f"{cls}-{i}" for i in range(min(PODS, devices))]
                for pod in pods:
                    cluster.create_pod(pod, claim_template=cls)
                for pod in pods:
                    assert cluster.wait_pod_prepared(pod).node == agent.node.name
                agent.figures.update(
                    pods=len(pods),
                    rss_after_pods_mb=round(status_field(agent.pid, "VmRSS") / 1024, 1),
                )
                for pod in pods:
                    cluster.delete_pod(pod)

        benchmark.pedantic(measure, rounds=1, iterations=1)
    finally:
        for agent in agents:
            agent.stop()
    python, go = (a.figures for a in agents)
    ratios = {
        f"{key}_python_over_go": round(python[key] / go[key], 2)
        for key in ("rss_idle_mb", "pss_idle_mb", "start_to_registered_s")
    }
    benchmark.extra_info.update(python=python, go=go, **ratios)
    print(f"\n{devices} devices: python {python}\n{devices} devices: go {go}\n{ratios}")
    assert python["threads"] > 0 and go["threads"] > 0
