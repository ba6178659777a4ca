"""``make demo``: the ``resourceslice`` command against a real local apiserver, and a pod
that gets its device through the whole DRA chain.

Run with ``python examples/demo.py``, from a checkout: it uses the example files beside it,
which the wheel does not ship, and so neither does it ship this. It starts the DRA cluster of
:mod:`resourceslice.testing` (the test kube-apiserver + etcd, kube-scheduler, the
resourceclaim controller and a simulated node running kubelet's DRA manager; built once per
machine), publishes ``gpu-node.yaml`` (one node, 288 devices) and ``fabric-pool.yaml`` (a
network-attached pool of 4,800 ports) with ``resourceslice publish``, prints ``resourceslice
status``, changes one device in the GPU file while its publisher runs, and shows the single
update that caused. Then it runs ``kubelet_driver.py`` (the README's whole driver) on the
node, creates a pod that asks for one of its devices, and prints what the pod's container
was given and, where runc can run here, the line the container's process itself printed.
It stops everything it started. The examples are copied first: the edit never touches the
checkout.
"""

from __future__ import annotations

import json
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import kubernetes.client
import yaml

import kubelet_driver  # beside this file
import resourceslice as rs
from resourceslice.testing import DRACluster, start_dra_cluster

NODE = "demo-node-1"
GPU_DRIVER = "gpu.example.com"
FABRIC_DRIVER = "fabric.example.com"
EXAMPLES = Path(__file__).resolve().parent
WAIT = 120.0


class DemoError(Exception):
    """A step did not do what it should; the message says which."""


def say(text: str) -> None:
    print(f"\n==> {text}", flush=True)


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "resourceslice.cli", *args]


def show_command(args: Sequence[str], work: Path) -> None:
    shown = " ".join(a.replace(f"{work}/", "") for a in args[3:])
    print(f"  $ resourceslice {shown}", flush=True)


def run(args: list[str], work: Path, *, check: bool = True) -> int:
    """Run one command to its end, its output indented under it."""
    show_command(args, work)
    result = subprocess.run(args, capture_output=True, text=True, check=False)
    for line in (result.stdout + result.stderr).splitlines():
        print(f"    {line}", flush=True)
    if check and result.returncode != 0:
        raise DemoError(f"exit code {result.returncode}")
    return result.returncode


class Background:
    """A long-running command whose output is printed as it comes and can be waited on."""

    def __init__(self, args: list[str], work: Path, label: str) -> None:
        show_command(args, work)
        print("    (left running)", flush=True)
        self.label = label
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.process = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        threading.Thread(target=self._pump, args=(self.process.stdout,), daemon=True).start()

    def _pump(self, stream: IO[str]) -> None:
        with stream:
            for line in stream:
                print(f"    [{self.label}] {line.rstrip()}", flush=True)
                self.lines.put(line)
        self.lines.put(None)

    def wait_for(self, text: str) -> str:
        while True:
            try:
                line = self.lines.get(timeout=WAIT)
            except queue.Empty:
                raise DemoError(f"{self.label}: no {text!r} within {WAIT:.0f}s") from None
            if line is None:
                raise DemoError(f"{self.label}: exited before {text!r}")
            if text in line:
                return line

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
        try:
            return self.process.wait(WAIT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()


def change_one_gpu(path: Path) -> str:
    """Report less memory on one GPU, as a driver would after a memory row is retired."""
    document: dict[str, Any] = yaml.load(path.read_text(), Loader=yaml.CSafeLoader)
    (pool,) = document["pools"].values()
    device = next(d for d in pool["devices"] if d["name"] == "gpu-3")
    device["capacity"]["memory"] = {"value": "79Gi"}
    path.write_text(yaml.dump(document, Dumper=yaml.CSafeDumper, sort_keys=False))
    return "gpu-3: capacity memory 80Gi -> 79Gi"


def slice_versions(client: kubernetes.client.ApiClient, driver: str) -> dict[str, str]:
    """name -> resourceVersion of the driver's slices (raw JSON: no model objects)."""
    # The client's own call, its JSON as sent: no model objects for 288 devices.
    response = kubernetes.client.ResourceV1Api(client).list_resource_slice(
        field_selector=f"spec.driver={driver}", _preload_content=False
    )
    items = json.loads(response.data)["items"]
    return {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in items}


def a_pod_gets_a_device(cluster: DRACluster, client: kubernetes.client.ApiClient) -> None:
    """The example driver on the node; a pod asks for one of its devices."""
    driver = kubelet_driver.DRIVER
    say(f"a pod gets a device: {driver} (examples/kubelet_driver.py) on {NODE}")
    node = cluster.nodes[NODE]
    helper = kubelet_driver.run(
        client,
        NODE,
        cdi_dir=str(node.cdi_dir),
        registrar_dir=str(node.registry_dir),
        plugin_data_dir=str(node.plugin_data_dir(driver)),
    )
    try:
        cluster.wait_registered(NODE, driver)
        assert helper.controller is not None
        if not helper.controller.wait_synced(timeout=WAIT):
            raise DemoError(f"{driver}'s devices were not published within {WAIT:.0f}s")
        print(f"  kubelet's plugin manager registered {driver}; its 4 devices published")
        cluster.create_device_class("demo", driver=driver)
        cluster.create_claim_template("one-demo-device", device_class="demo")
        cluster.create_pod("demo-pod", claim_template="one-demo-device")
        print("  created DeviceClass demo, ResourceClaimTemplate one-demo-device, Pod demo-pod")
        pod = cluster.wait_pod_prepared("demo-pod")
        (claim,) = cluster.pod_claims("demo-pod")
        (result,) = claim["status"]["allocation"]["devices"]["results"]
        print(f"  kube-scheduler put demo-pod on {pod.node} and allocated its claim")
        print(f"    {claim['metadata']['name']}: {result['driver']} pool {result['pool']}", end=" ")
        print(f"device {result['device']}")
        container = pod.containers["ctr"]
        print("  kubelet's DRA manager had the driver prepare it; the runtime's CDI injection gave")
        print(f"  container ctr: env {' '.join(container.env)}")
        print(f"    (CDI device {', '.join(container.cdi_devices)})")
        if container.process is None:
            print(f"  (no container ran: {cluster.why_no_containers})")
        else:
            seen = container.process.report
            shown = container.process.output
            shown = shown if len(shown) <= 150 else f"{shown[:150]}..."
            print(f"  runc ran container ctr (pid {container.process.pid}); its process printed:")
            print(f"    {shown}")
            demo_vars = sorted(f"{k}={v}" for k, v in seen.env.items() if k.startswith("DEMO_"))
            print(f"    so inside the container: {' '.join(demo_vars)}")
        cluster.delete_pod("demo-pod")
        print("  deleted demo-pod: unprepared, its claim deallocated and deleted")
    finally:
        helper.stop()


def demo(work: Path) -> None:
    say("starting a local DRA cluster (resourceslice.testing: kube-apiserver + etcd,")
    print("  kube-scheduler, the resourceclaim controller, a node with kubelet's DRA manager")
    print("  and runc where it can run)")
    with start_dra_cluster() as cluster, cluster.api_client() as client:
        kubeconfig = str(cluster.apiserver.kubeconfigs["admin"])
        print(f"  server {cluster.apiserver.server}; core: {rs.core_backend()}; ", end="")
        print(f"kubeconfig {kubeconfig}")
        cluster.add_node(NODE, labels={"fabric": "a"})
        print(f"  created Node {NODE} (label fabric=a)")
        gpu_file, fabric_file = work / "gpu-node.yaml", work / "fabric-pool.yaml"
        for path in (gpu_file, fabric_file):
            shutil.copy(EXAMPLES / path.name, path)
        access = ["--kubeconfig", kubeconfig]

        say("what the GPU node's file becomes, without a cluster")
        args = cli("plan", str(gpu_file), "--driver", GPU_DRIVER, "--node", NODE)
        show_command(args, work)
        result = subprocess.run(args, capture_output=True, text=True, check=True)
        print(f"    ({len(result.stdout.splitlines())} lines of YAML) {result.stderr.strip()}")

        say(f"publishing the GPU node ({GPU_DRIVER} on {NODE}), keeping it in sync")
        gpu = Background(
            cli("publish", str(gpu_file), "--driver", GPU_DRIVER, "--node", NODE, *access),
            work,
            "gpu",
        )
        try:
            gpu.wait_for("watching")

            say(f"publishing the network-attached pool ({FABRIC_DRIVER}, nodes with fabric=a)")
            run(
                cli(
                    "publish", str(fabric_file), "--driver", FABRIC_DRIVER,
                    "--node-selector", "fabric=a", "--once", *access,
                ),
                work,
            )  # fmt: skip

            say("what the cluster holds, as a scheduler sees it")
            run(cli("status", "--driver", GPU_DRIVER, *access), work)
            run(cli("status", "--driver", FABRIC_DRIVER, *access), work)

            before = slice_versions(client, GPU_DRIVER)
            say(f"changing one device in {gpu_file.name} ({change_one_gpu(gpu_file)})")
            line = gpu.wait_for("synced")
            if "0 creates, 1 update, 0 deletes" not in line:
                raise DemoError(f"expected exactly one update, got: {line.strip()}")
            after = slice_versions(client, GPU_DRIVER)
            changed = sorted(name for name in after if after[name] != before.get(name))
            print(f"  ResourceSlices rewritten: {', '.join(changed)} (resourceVersion", end=" ")
            print(f"{before[changed[0]]} -> {after[changed[0]]}); untouched: {len(after) - 1}")
            run(cli("status", "--driver", GPU_DRIVER, *access), work)

            a_pod_gets_a_device(cluster, client)
        finally:
            say("stopping the publisher (its slices stay) and the cluster")
            code = gpu.stop()
        if code != 0:
            raise DemoError(f"the publisher exited with {code}")


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="resourceslice-demo-") as work:
        try:
            demo(Path(work))
        except DemoError as exc:
            print(f"\ndemo failed: {exc}", file=sys.stderr)
            return 1
    say("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
