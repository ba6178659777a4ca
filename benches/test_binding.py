"""Binding conditions, timed: an attach done -> the pod bound, with the real kube-scheduler.

On the DRA cluster (1.37: kube-scheduler, the resourceclaim controller, 2 simulated nodes
with kubelet's DRA manager), a fabric pool whose ports carry binding conditions is published
and attached by this library (``rs.start_controller`` + ``rs.start_binding_controller``, in
this process). One pod at a time, 20 runs per case: ``attach`` returns at once, or after a
random 0-10 s (as an attach that does work). Times, on this process's monotonic clock:
``attach`` returned; the claim's condition True first seen by a watch (the helper's write);
the pod's ``spec.nodeName`` first seen by a watch (bound).

kube-scheduler checks the claim every 5 s while it waits in PreBind, so the pod is bound at
the first check after the write: that poll, not the library, sets the figure.

Run: ``.venv/bin/pytest benches/test_binding.py --benchmark-enable -s``.
"""

from __future__ import annotations

import json
import random
import statistics
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import resourceslice as rs
from benchsize import sized
from resourceslice import kubeletplugin
from resourceslice._claimwatch import ClaimWatch
from resourceslice._http import request
from resourceslice._kubeclient import ClosingApiClient
from resourceslice.informer import _abort
from resourceslice.testing import DRACluster, running_dra_cluster, wait_until

pytestmark = pytest.mark.integration

DRIVER = "fabric.bench.example.com"
ATTACHED = f"{DRIVER}/Attached"
RUNS = sized(20, 2)


class Timeline:
    """When each claim's attach returned and its condition was seen True, and when each
    pod was seen bound."""

    def __init__(self, client: ClosingApiClient) -> None:
        self.lock = threading.Lock()
        self.attached: dict[str, float] = {}  # claim uid ->
        self.written: dict[str, float] = {}  # claim uid ->
        self.bound: dict[str, float] = {}  # pod name ->
        self.stopping = threading.Event()
        self.claims = ClaimWatch(
            client,
            replaced=lambda claims: [self.claim(c) for c in claims],
            changed=self.claim,
            deleted=lambda claim: None,
            on_error=lambda exc, what: print(what, exc),
        )
        self.response: Any = None
        self.pods = threading.Thread(target=self.watch_pods, args=(client,), daemon=True)
        self.claims.start()
        self.pods.start()
        assert self.claims.wait_synced(30)
        wait_until(lambda: self.response is not None, 30)

    def claim(self, claim: dict[str, Any]) -> None:
        for entry in (claim.get("status") or {}).get("devices") or ():
            for condition in entry.get("conditions") or ():
                if condition["type"] == ATTACHED and condition["status"] == "True":
                    with self.lock:
                        self.written.setdefault(claim["metadata"]["uid"], time.monotonic())

    def watch_pods(self, client: ClosingApiClient) -> None:
        response = request(
            client, "GET", "/api/v1/namespaces/default/pods", query=[("watch", "true")],
            stream=True, timeout=(10, 3600),
        )  # fmt: skip
        self.response = response
        pending = b""
        try:
            for chunk in response.stream(4096):
                pending += chunk
                while b"\n" in pending:
                    line, pending = pending.split(b"\n", 1)
                    pod = json.loads(line)["object"]
                    if pod.get("spec", {}).get("nodeName"):
                        with self.lock:
                            self.bound.setdefault(pod["metadata"]["name"], time.monotonic())
        except Exception:
            if not self.stopping.is_set():
                raise
        finally:
            response.release_conn()

    def close(self) -> None:
        self.stopping.set()
        self.claims.stop()
        _abort(self.response)
        self.pods.join(10)


class Plugin:
    """Prepares any port of DRIVER: its name in the container's environment, through CDI."""

    def __init__(self, cdi_dir: str) -> None:
        self.cdi = kubeletplugin.CDISpecWriter(DRIVER, cdi_dir=cdi_dir)

    def prepare_resource_claims(
        self, claims: list[kubeletplugin.ResourceClaim]
    ) -> dict[str, kubeletplugin.PrepareResult]:
        return kubeletplugin.prepare_each(claims, self.prepare)

    def prepare(self, claim: kubeletplugin.ResourceClaim) -> list[kubeletplugin.Device]:
        mine = kubeletplugin.allocated_devices(claim, DRIVER)
        ids = self.cdi.write_claim(
            claim["metadata"]["uid"], {d.name: {"env": [f"PORT={d.name}"]} for d in mine}
        )
        return [d.prepared(cdi_device_ids=[ids[d.name]]) for d in mine]

    def unprepare_resource_claims(
        self, claims: list[kubeletplugin.ClaimRef]
    ) -> dict[str, BaseException | None]:
        for claim in claims:
            self.cdi.remove_claim(claim.uid)
        return {claim.uid: None for claim in claims}


class Bench:
    def __init__(self, cluster: DRACluster) -> None:
        self.cluster = cluster
        self.client = cluster.api_client()
        nodes = [cluster.add_node(f"fabric-{i}", labels={"fabric": "a"}) for i in range(2)]
        self.helpers = [
            kubeletplugin.start(
                Plugin(str(node.cdi_dir)), driver=DRIVER, api_client=self.client,
                node_name=node.name, registrar_dir=str(node.registry_dir),
                plugin_data_dir=str(node.plugin_data_dir(DRIVER)),
            )
            for node in nodes
        ]  # fmt: skip
        for node in nodes:
            cluster.wait_registered(node.name, DRIVER)
        ports: list[rs.Device] = [
            {"name": f"port-{i}", "bindsToNode": True, "bindingConditions": [ATTACHED],
             "bindingFailureConditions": [f"{DRIVER}/AttachFailed"]} for i in range(4)
        ]  # fmt: skip
        selector: rs.NodeSelector = {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "fabric", "operator": "In", "values": ["a"]}]}]}  # fmt: skip
        pool = rs.Pool(devices=ports, node_selector=selector)
        resources = rs.DriverResources(pools={"fabric": pool})
        self.ctrl = rs.start_controller(self.client, driver=DRIVER, resources=resources)
        assert self.ctrl.wait_synced(60)
        self.timeline = Timeline(cluster.api_client())
        self.delay = (0.0, 0.0)
        self.binder = rs.start_binding_controller(self.ctrl, attach=self.attach)
        cluster.create_device_class("port", driver=DRIVER)
        cluster.create_claim_template("one-port", device_class="port")

    def attach(self, claim: dict[str, Any], device: rs.BindingDevice) -> bool:
        time.sleep(random.uniform(*self.delay))  # the attach's own work
        with self.timeline.lock:
            self.timeline.attached[device.claim_uid] = time.monotonic()
        return True

    def run(self, pod: str) -> tuple[float, float]:
        """(attach done -> condition written, attach done -> pod bound) of one pod."""
        self.cluster.create_pod(pod, claim_template="one-port")
        self.cluster.wait_pod_prepared(pod, timeout=60)
        (claim,) = self.cluster.pod_claims(pod)
        uid = claim["metadata"]["uid"]
        timeline = self.timeline
        wait_until(lambda: uid in timeline.written and pod in timeline.bound, 30)
        with timeline.lock:
            done = timeline.attached[uid]
            figures = (timeline.written[uid] - done, timeline.bound[pod] - done)
        self.cluster.delete_pod(pod)
        return figures

    def close(self) -> None:
        self.binder.stop()
        self.ctrl.stop()
        self.timeline.close()
        for helper in self.helpers:
            helper.stop()
        self.client.close()


@pytest.fixture
def bench() -> Iterator[Bench]:
    with running_dra_cluster() as cluster:
        made = Bench(cluster)
        try:
            yield made
        finally:
            made.close()


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def summary(values: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(1000 * statistics.median(values), 1),
        "p95_ms": round(1000 * percentile(values, 0.95), 1),
        "max_ms": round(1000 * max(values), 1),
    }


def test_attach_done_to_pod_bound(benchmark: Any, bench: Bench) -> None:
    cases = {"attach at once": (0.0, 0.0), "attach takes 0-10 s": (0.0, 10.0)}
    figures: dict[str, dict[str, Any]] = {}

    def all_cases() -> None:
        for n, (case, delay) in enumerate(cases.items()):
            bench.delay = delay
            runs = [bench.run(f"pod-{n}-{i}") for i in range(RUNS)]
            figures[case] = {
                "runs": len(runs),
                "written": summary([w for w, _ in runs]),
                "bound": summary([b for _, b in runs]),
            }

    benchmark.pedantic(all_cases, rounds=1)
    benchmark.extra_info.update(figures=figures)
    for case, found in figures.items():
        print(f"\n{case}: attach done -> condition written {found['written']}; "
              f"-> pod bound {found['bound']} ({found['runs']} runs)")  # fmt: skip
    assert all(found["runs"] == RUNS for found in figures.values())
