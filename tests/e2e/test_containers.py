"""Containers that really run: each container of a prepared pod is run by runc from the OCI
spec the runtime built (a base spec, the container's arguments and environment, its CDI
devices injected by the CDI library), and reports what its process sees. A CDI spec that is
wrong in a way only a runtime notices fails the container's start as kubelet reports it.

Each test reads what the process saw (``process.report``), which exists only when runc ran
the container; the project's ini option ``dra_containers = "require"`` fails these tests where
runc cannot run instead of skipping them.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import resourceslice as rs
from resourceslice import kubeletplugin
from resourceslice.testing import DRACluster, PodNotPrepared, SimulatedNode
from support.chain import EnvDriver, start_env_plugin

pytestmark = pytest.mark.integration

DRIVER = "gpu.example.com"
#: Where the driver's device nodes appear in the container: a path of its own.
NODE_PATH = "/dev/example-gpu/card{}"


class NodeDriver(EnvDriver):  # type: ignore[misc]
    """EnvDriver whose CDI edits also give each device a device node (a character device
    of the host, ``host_nodes[device]``) and, for the devices in ``broken_mounts``, a bind
    mount of a host path that does not exist. Records whether the containers it gave devices
    to still ran when kubelet asked it to unprepare."""

    def __init__(self, cdi_dir: Path, host_nodes: dict[str, Path]) -> None:
        super().__init__(DRIVER, cdi_dir)
        self.host_nodes = host_nodes
        self.broken_mounts: dict[str, Path] = {}
        #: Host PIDs of container processes, to check at unprepare; what was found there.
        self.watched_pids: list[int] = []
        self.running_at_unprepare: list[bool] = []

    def container_edits(self, device: str, config: Any) -> dict[str, Any]:
        edits: dict[str, Any] = super().container_edits(device, config)
        index = device.rsplit("-", 1)[-1]
        edits["deviceNodes"] = [
            {"path": NODE_PATH.format(index), "hostPath": str(self.host_nodes[device])}
        ]
        if device in self.broken_mounts:
            edits["mounts"] = [
                {
                    "hostPath": str(self.broken_mounts[device]),
                    "containerPath": "/etc/example-gpu/config",
                    "options": ["ro", "bind"],
                }
            ]
        return edits

    def unprepare_resource_claims(
        self, claims: list[kubeletplugin.ClaimRef]
    ) -> dict[str, BaseException | None]:
        self.running_at_unprepare.extend(os.path.exists(f"/proc/{p}") for p in self.watched_pids)
        result: dict[str, BaseException | None] = super().unprepare_resource_claims(claims)
        return result


@pytest.fixture
def gpus(tmp_path: Path) -> dict[str, Path]:
    """Two host character devices standing for the GPUs, as a driver finds them under
    /dev: made here with the numbers of /dev/null (1:3) and /dev/zero (1:5)."""
    nodes = {}
    for i, minor in enumerate((3, 5)):
        path = tmp_path / f"card{i}"
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, minor))
        nodes[f"gpu-{i}"] = path
    return nodes


@pytest.fixture
def node(dra_cluster: DRACluster) -> SimulatedNode:
    assert dra_cluster.runs_containers, dra_cluster.why_no_containers
    return dra_cluster.add_node("node-1")


@pytest.fixture
def driver(
    dra_cluster: DRACluster, node: SimulatedNode, gpus: dict[str, Path]
) -> Iterator[NodeDriver]:
    plugin = NodeDriver(node.cdi_dir, gpus)
    client = dra_cluster.api_client()
    devices = [rs.Device(name=name) for name in gpus]
    _, helper = start_env_plugin(
        dra_cluster, client, node, DRIVER, pool=rs.Pool(devices=devices), plugin=plugin
    )
    dra_cluster.create_device_class("gpu", driver=DRIVER)
    dra_cluster.create_claim_template("one-gpu", device_class="gpu")
    try:
        yield plugin
    finally:
        helper.stop()
        client.close()


def test_the_process_sees_its_device_node_env_and_args(
    dra_cluster: DRACluster, driver: NodeDriver, gpus: dict[str, Path]
) -> None:
    dra_cluster.create_pod(
        "app", claim_template="one-gpu", args=["/etc/hostname"], env={"MODE": "train"}
    )
    pod = dra_cluster.wait_pod_prepared("app")
    (claim,) = dra_cluster.pod_claims("app")
    device = claim["status"]["allocation"]["devices"]["results"][0]["device"]
    process = pod.containers["ctr"].process
    assert process is not None
    seen = process.report

    # The host's node, under the driver's path, with its type and numbers (CDI filled them
    # in from the host path, and allowed them in the device cgroup).
    host = gpus[device].stat().st_rdev
    path = NODE_PATH.format(device.rsplit("-", 1)[-1])
    node = seen.device(path)
    assert node is not None, seen.devices
    assert (node.type, node.major, node.minor) == ("c", os.major(host), os.minor(host))
    other = next(d for d in gpus if d != device)
    assert seen.device(NODE_PATH.format(other.rsplit("-", 1)[-1])) is None

    # The pod's variable and the driver's CDI variable, the image's entrypoint with the
    # container's arguments (a file of the read-only rootfs it could not read).
    assert seen.env["MODE"] == "train"
    assert seen.env[EnvDriver.env_of(device).split("=")[0]] == "1"
    assert seen.files == {"/etc/hostname": None}
    # The process runs as long as the pod: its status names the container runc runs.
    stored = dra_cluster.get_pod("app")
    assert stored is not None
    (status,) = stored["status"]["containerStatuses"]
    assert status["containerID"] == f"runc://{process.id}"
    assert os.path.exists(f"/proc/{process.pid}")


def test_deletion_stops_the_container_before_the_claims_are_unprepared(
    dra_cluster: DRACluster, driver: NodeDriver
) -> None:
    dra_cluster.create_pod("app", claim_template="one-gpu")
    pod = dra_cluster.wait_pod_prepared("app")
    process = pod.containers["ctr"].process
    assert process is not None
    driver.watched_pids.append(process.pid)
    dra_cluster.delete_pod("app")
    # SIGTERM was enough (the reporter exits on it), and it came before the driver's
    # unprepare: the process was gone by then.
    (stopped,) = [e for e in dra_cluster.events("stopped") if e["pod"]["uid"] == pod.uid]
    assert (stopped["container"], stopped["signal"], stopped["exitCode"]) == ("ctr", "TERM", 0)
    assert driver.running_at_unprepare == [False]
    assert not os.path.exists(f"/proc/{process.pid}")


def test_a_process_that_ignores_sigterm_is_killed_after_the_grace_period(
    dra_cluster: DRACluster, driver: NodeDriver
) -> None:
    dra_cluster.create_pod("app", claim_template="one-gpu", env={"REPORTER_IGNORE_TERM": "1"})
    pod = dra_cluster.wait_pod_prepared("app")
    process = pod.containers["ctr"].process
    assert process is not None
    driver.watched_pids.append(process.pid)
    dra_cluster.delete_pod("app", grace_period=1)
    (stopped,) = [e for e in dra_cluster.events("stopped") if e["pod"]["uid"] == pod.uid]
    # runc exits as its process did: killed by signal 9.
    assert (stopped["signal"], stopped["exitCode"]) == ("KILL", 128 + 9)
    assert driver.running_at_unprepare == [False]


def test_a_mount_whose_source_is_missing_fails_the_containers_start(
    dra_cluster: DRACluster, driver: NodeDriver, tmp_path: Path
) -> None:
    missing = tmp_path / "no-such-config"
    driver.broken_mounts = {name: missing for name in driver.host_nodes}
    dra_cluster.create_pod("app", claim_template="one-gpu")
    error = dra_cluster.wait_container_failed("app", container="ctr")
    assert f"{missing}: no such file or directory" in error

    # Where a user looks: the container waits in CreateContainerError with the runtime's
    # message, an event says it, and the pod never gets to running.
    pod = dra_cluster.get_pod("app")
    assert pod is not None
    (status,) = pod["status"]["containerStatuses"]
    assert status["state"]["waiting"]["reason"] == "CreateContainerError"
    assert str(missing) in status["state"]["waiting"]["message"]
    events = dra_cluster.pod_events(pod["metadata"]["uid"])
    assert any(e["reason"] == "Failed" and str(missing) in e["message"] for e in events), events
    with pytest.raises(PodNotPrepared) as caught:
        dra_cluster.wait_pod_prepared("app", timeout=1)
    assert caught.value.reason.startswith("CreateContainerError: ")
    assert f"{missing}: no such file or directory" in caught.value.reason

    # The driver fixes its spec: kubelet's retry starts the container.
    missing.write_text("fixed\n")
    pod_prepared = dra_cluster.wait_pod_prepared("app")
    assert pod_prepared.containers["ctr"].process is not None
    dra_cluster.delete_pod("app")
