"""A network-attached pool (devices reachable from the nodes a selector picks), published by
two ``resourceslice publish --leader-elect`` replicas: kube-scheduler allocates it to pods on
the selected nodes only, and goes on doing so after the leader is killed mid-run and the
standby takes over."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

import resourceslice
from resourceslice import kubeletplugin
from resourceslice.testing import DRACluster
from support.chain import start_env_plugin
from support.cli import Output

pytestmark = pytest.mark.integration

DRIVER = "fabric.e2e.example.com"
LEASE = "fabric-publisher"


def write_pool(path: Path, ports: int) -> None:
    devices: list[dict[str, Any]] = [{"name": f"port-{i}"} for i in range(ports)]
    path.write_text(yaml.safe_dump({"pools": {"fabric-a": {"devices": devices}}}))


def test_a_selector_pool_from_leader_elected_replicas_is_allocated_on_selected_nodes_only(
    dra_cluster: DRACluster, tmp_path: Path
) -> None:
    client = dra_cluster.api_client()
    selected = {"fabric": "a"}
    nodes = [
        dra_cluster.add_node("fabric-a-0", labels=selected),
        dra_cluster.add_node("fabric-a-1", labels=selected),
        dra_cluster.add_node("other-0"),
    ]
    # The kubelet plugin runs on every node; the pool is published centrally.
    helpers: list[kubeletplugin.Helper] = [
        start_env_plugin(dra_cluster, client, node, DRIVER)[1] for node in nodes
    ]
    pool_file = tmp_path / "fabric.yaml"
    write_pool(pool_file, 3)
    env = dict(os.environ, PYTHONPATH=str(Path(resourceslice.__file__).parents[1]))

    def replica() -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "resourceslice.cli", "publish", str(pool_file),
             "--driver", DRIVER, "--node-selector", "fabric=a", "--interval", "0.05",
             "--kubeconfig", str(dra_cluster.apiserver.kubeconfigs["admin"]),
             "--leader-elect", "--lease-namespace", "default", "--lease-name", LEASE,
             "--lease-duration", "4"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        )  # fmt: skip

    leader = replica()
    standby: subprocess.Popen[str] | None = None
    try:
        leader_out = Output(leader)
        leader_out.wait_for("out", "took the lease: publishing")
        leader_out.wait_for("out", "1 create, 0 updates, 0 deletes")
        standby = replica()
        standby_out = Output(standby)
        standby_out.wait_for("out", "standby until it holds the lease")
        dra_cluster.create_device_class("port", driver=DRIVER)
        dra_cluster.create_claim_template("one-port", device_class="port")

        def run_pod(name: str) -> None:
            dra_cluster.create_pod(name, claim_template="one-port")
            pod = dra_cluster.wait_pod_prepared(name)
            assert pod.node.startswith("fabric-a-")
            (claim,) = dra_cluster.pod_claims(name)
            allocation = claim["status"]["allocation"]
            # The allocation carries the pool's selector: the pod can only be where it holds.
            (term,) = allocation["nodeSelector"]["nodeSelectorTerms"]
            assert term["matchExpressions"] == [
                {"key": "fabric", "operator": "In", "values": ["a"]}
            ]
            (result,) = allocation["devices"]["results"]
            assert pod.containers["ctr"].env == [f"DEVICE_{result['device'].replace('-', '_')}=1"]

        run_pod("before-0")
        run_pod("before-1")
        # A pod that may only run on the unselected node finds no port there.
        dra_cluster.create_pod("elsewhere", claim_template="one-port", node_selector={
            "kubernetes.io/hostname": "other-0"})  # fmt: skip
        assert "cannot allocate all claims" in dra_cluster.wait_pod_unschedulable("elsewhere")

        # The leader dies mid-run (no release); the fabric grows while nobody leads.
        leader.kill()
        leader.wait()
        write_pool(pool_file, 5)
        standby_out.wait_for("out", "took the lease: publishing")
        standby_out.wait_for("out", "0 creates, 1 update, 0 deletes")
        for i in range(3):
            run_pod(f"after-{i}")
        # 3 + 2 ports, 5 pods on the selected nodes: the sixth waits for a port.
        dra_cluster.create_pod("one-too-many", claim_template="one-port")
        assert "cannot allocate all claims" in dra_cluster.wait_pod_unschedulable("one-too-many")
        assert "cannot allocate all claims" in dra_cluster.why_not_prepared("elsewhere")
    finally:
        for process in (leader, standby):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()
        for helper in helpers:
            helper.stop()
        client.close()
