"""The kubelet plugin, registered and called by kubelet's own code (the kubelet harness), with
claims on the real apiserver."""

from __future__ import annotations

import asyncio
import json
import os
import queue
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import pytest

import resourceslice as rs
from resourceslice import kubeletplugin
from resourceslice._http import get_json, request, send_json
from resourceslice.testing import TestCluster, wait_until
from resourceslice.testing.kubelet import KubeletHarness
from support.kubelet_env import Node, RecordingPlugin, delete_claim, uid

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def test_registers_with_kubelet(node: Node, kubelet: KubeletHarness) -> None:
    helper = node.start()
    event = kubelet.wait_registered(node.driver)
    # kubelet got the DRA socket and the services offered, newest first, and said so.
    assert event["endpoint"] == helper.plugin_socket_path
    assert event["versions"] == [kubeletplugin.DRA_V1, kubeletplugin.DRA_V1BETA1]
    assert helper.wait_registered(timeout=30)
    assert helper.registration_status is not None
    assert helper.registration_status.plugin_registered
    # kubelet's default layout, under the test's root.
    assert helper.registrar_socket_path == str(node.dir / "registry" / f"{node.driver}-reg.sock")
    assert helper.plugin_socket_path == str(node.dir / "plugins" / node.driver / "dra.sock")


def test_prepare_and_unprepare_one_claim(node: Node, kubelet: KubeletHarness) -> None:
    node.start()
    kubelet.wait_registered(node.driver)
    claim = node.claim("one", ["dev-0"])

    answer = kubelet.prepare(node.driver, [claim])
    assert "error" not in answer
    assert answer["claims"] == {
        uid(claim): {
            "error": "",
            "devices": [
                {
                    "requestNames": ["req"],
                    "poolName": "node-1",
                    "deviceName": "dev-0",
                    "cdiDeviceIDs": [f"{node.driver}/device=dev-0"],
                }
            ],
        }
    }
    # The callback got the claim as the apiserver has it, allocation included.
    (got,) = node.plugin.prepare_calls[0]
    assert got["metadata"]["uid"] == uid(claim)
    assert got["status"]["allocation"]["devices"]["results"][0]["device"] == "dev-0"
    assert node.plugin.prepared == {uid(claim)}

    answer = kubelet.unprepare(node.driver, [claim])
    assert answer["claims"] == {uid(claim): {"error": "", "devices": None}}
    assert node.plugin.unprepare_calls == [
        [
            kubeletplugin.ClaimRef(
                namespace="default", name=claim["metadata"]["name"], uid=uid(claim)
            )
        ]
    ]
    assert node.plugin.prepared == set()


def devices_of(answer: dict[str, Any], claim: dict[str, Any]) -> list[str]:
    return [d["deviceName"] for d in answer["claims"][uid(claim)]["devices"]]


def test_prepare_and_unprepare_many_claims(node: Node, kubelet: KubeletHarness) -> None:
    node.start()
    kubelet.wait_registered(node.driver)
    claims = [node.claim(f"c{i}", [f"dev-{2 * i}", f"dev-{2 * i + 1}"]) for i in range(8)]

    answer = kubelet.prepare(node.driver, claims)
    assert set(answer["claims"]) == {uid(c) for c in claims}
    for i, claim in enumerate(claims):
        assert answer["claims"][uid(claim)]["error"] == ""
        assert devices_of(answer, claim) == [f"dev-{2 * i}", f"dev-{2 * i + 1}"]
    # One call of the driver for kubelet's one call, with every claim.
    assert [[uid(c) for c in call] for call in node.plugin.prepare_calls] == [
        [uid(c) for c in claims]
    ]

    answer = kubelet.unprepare(node.driver, claims[:5])
    assert {k: v["error"] for k, v in answer["claims"].items()} == {uid(c): "" for c in claims[:5]}
    assert node.plugin.prepared == {uid(c) for c in claims[5:]}


def test_claim_with_the_wrong_uid(node: Node, kubelet: KubeletHarness) -> None:
    """A claim deleted and created anew under its name is another claim: kubelet's call for
    the old one fails for that claim alone; the driver never sees the new one in its place."""
    node.start()
    kubelet.wait_registered(node.driver)
    good = node.claim("good", ["dev-0"])
    old = node.claim("replaced", ["dev-1"])
    delete_claim(node.client, old["metadata"]["name"])
    node.claims.remove(old["metadata"]["name"])
    new = node.claim("replaced", ["dev-2"])
    assert uid(new) != uid(old)
    missing = {"namespace": "default", "name": "no-such-claim", "uid": "0000-missing"}

    answer = kubelet.prepare(node.driver, [good, old, missing])
    claims = answer["claims"]
    assert claims[uid(good)]["error"] == ""
    assert "got replaced" in claims[uid(old)]["error"]
    assert claims[uid(old)]["devices"] == []
    assert "not found" in claims["0000-missing"]["error"]
    assert [[uid(c) for c in call] for call in node.plugin.prepare_calls] == [[uid(good)]]


def test_a_refused_claim_read_reaches_kubelet_as_one_line(
    node: Node, kubelet: KubeletHarness, kube_cluster: TestCluster
) -> None:
    """The plugin's identity may not read claims: kubelet gets the status and the
    apiserver's message, not the client's exception with the response's headers."""
    with kube_cluster.api_client("driver") as unprivileged:  # no RBAC rights of its own
        node.start(api_client=unprivileged)
        kubelet.wait_registered(node.driver)
        claim = node.claim("denied", ["dev-0"])
        error = kubelet.prepare(node.driver, [claim])["claims"][uid(claim)]["error"]
    name = claim["metadata"]["name"]
    assert error == (
        f'403 resourceclaims.resource.k8s.io "{name}" is forbidden: User "driver" cannot get '
        'resource "resourceclaims" in API group "resource.k8s.io" in the namespace "default"'
    )
    assert node.plugin.prepare_calls == []


def test_callback_that_raises(node: Node, kubelet: KubeletHarness) -> None:
    node.start()
    kubelet.wait_registered(node.driver)
    claims = [node.claim("a", ["dev-0"]), node.claim("b", ["dev-1"])]
    node.plugin.fail_with = RuntimeError("device on fire")

    answer = kubelet.prepare(node.driver, claims)
    for claim in claims:
        assert answer["claims"][uid(claim)]["error"] == "RuntimeError: device on fire"
    answer = kubelet.unprepare(node.driver, claims)
    for claim in claims:
        assert answer["claims"][uid(claim)]["error"] == "RuntimeError: device on fire"
    assert [msg for _, msg in node.errors] == [
        "prepare_resource_claims failed",
        "unprepare_resource_claims failed",
    ]

    # Still serving: the next calls go through.
    node.plugin.fail_with = None
    answer = kubelet.prepare(node.driver, claims)
    assert [answer["claims"][uid(c)]["error"] for c in claims] == ["", ""]


def test_driver_restart(node: Node, kubelet: KubeletHarness) -> None:
    """A restarted plugin creates its sockets anew; kubelet unregisters the old one when its
    socket goes and registers the new one, which answers a claim the old one prepared from
    the checkpoint."""
    first = node.start()
    kubelet.wait_registered(node.driver)
    claim = node.claim("one", ["dev-0"])
    prepared = kubelet.prepare(node.driver, [claim])["claims"][uid(claim)]
    assert prepared["error"] == ""

    first.stop()
    kubelet.wait_event(lambda e: e["event"] == "deregister" and e["driver"] == node.driver)
    assert not Path(first.registrar_socket_path).exists()
    assert not Path(first.plugin_socket_path).exists()
    assert "not registered" in kubelet.prepare(node.driver, [claim])["error"]

    seen = len(kubelet.events())
    restarted = RecordingPlugin(node.driver)
    second = node.start(restarted)
    kubelet.wait_registered(node.driver, second.plugin_socket_path, after=seen)
    answer = kubelet.prepare(node.driver, [claim])
    assert answer["claims"][uid(claim)] == prepared
    assert restarted.prepare_calls == []
    assert second.checkpoint is not None and second.checkpoint.stats().answered == 1


def test_a_replaced_instance_leaves_the_new_ones_sockets(
    node: Node, kubelet: KubeletHarness
) -> None:
    """A DaemonSet rollout without rolling_update_uid: the new pod binds the old pod's
    socket paths while the old one runs. The old pod's stop leaves them, and kubelet keeps
    calling the new one."""
    old = node.start()
    kubelet.wait_registered(node.driver)
    seen = len(kubelet.events())
    new_plugin = RecordingPlugin(node.driver)
    new = node.start(new_plugin)
    kubelet.wait_registered(node.driver, after=seen)
    old.stop()
    assert Path(new.registrar_socket_path).is_socket() and Path(new.plugin_socket_path).is_socket()
    # kubelet handles the registry's changes in order: once it registered a driver started
    # after the stop, a removal made by the stop would have unregistered node.driver first.
    seen = len(kubelet.events())
    later = f"later-{node.driver}"
    with kubeletplugin.start(
        RecordingPlugin(later),
        driver=later,
        api_client=node.client,
        registrar_dir=str(node.dir / "registry"),
        plugin_data_dir=str(node.dir / "plugins" / later),
    ):
        kubelet.wait_registered(later, after=seen)
        events = kubelet.events()[seen:]
        assert [e for e in events if e == {**e, "event": "deregister", "driver": node.driver}] == []
        claim = node.claim("one", ["dev-0"])
        assert devices_of(kubelet.prepare(node.driver, [claim]), claim) == ["dev-0"]
        assert new_plugin.prepared == {uid(claim)}


def test_v1beta1_only(node: Node, kubelet: KubeletHarness) -> None:
    """A plugin offering only v1beta1 (kubelet 1.32/1.33's version) is called in v1beta1."""
    node.start(node_v1=False)
    event = kubelet.wait_registered(node.driver)
    assert event["versions"] == [kubeletplugin.DRA_V1BETA1]
    claim = node.claim("one", ["dev-0"])
    answer = kubelet.prepare(node.driver, [claim])
    assert devices_of(answer, claim) == ["dev-0"]
    assert kubelet.unprepare(node.driver, [claim])["claims"][uid(claim)]["error"] == ""


class AsyncPlugin:
    """The recording plugin's callbacks as coroutines."""

    def __init__(self, inner: RecordingPlugin) -> None:
        self.inner = inner
        self.loops: set[int] = set()

    async def prepare_resource_claims(
        self, claims: list[dict[str, Any]]
    ) -> dict[str, kubeletplugin.PrepareResult]:
        self.loops.add(id(asyncio.get_running_loop()))
        return self.inner.prepare_resource_claims(claims)

    async def unprepare_resource_claims(
        self, claims: list[kubeletplugin.ClaimRef]
    ) -> dict[str, BaseException | None]:
        self.loops.add(id(asyncio.get_running_loop()))
        return self.inner.unprepare_resource_claims(claims)


def test_async_callbacks(node: Node, kubelet: KubeletHarness) -> None:
    plugin = AsyncPlugin(node.plugin)
    node.start(plugin)
    kubelet.wait_registered(node.driver)
    claim = node.claim("one", ["dev-0"])
    assert devices_of(kubelet.prepare(node.driver, [claim]), claim) == ["dev-0"]
    assert kubelet.unprepare(node.driver, [claim])["claims"][uid(claim)]["error"] == ""
    assert node.plugin.prepared == set()
    assert len(plugin.loops) == 1  # both ran on the helper's one loop


class GatedPlugin(RecordingPlugin):
    """Records when each call starts and ends; a prepare blocks until ``gate`` is set."""

    def __init__(self, driver: str, name: str, order: list[str]) -> None:
        super().__init__(driver)
        self.name = name
        self.order = order
        self.entered = threading.Event()
        self.gate = threading.Event()

    def prepare_resource_claims(
        self, claims: list[dict[str, Any]]
    ) -> dict[str, kubeletplugin.PrepareResult]:
        self.order.append(f"{self.name}-enter")
        self.entered.set()
        assert self.gate.wait(60)
        self.order.append(f"{self.name}-exit")
        return super().prepare_resource_claims(claims)


def lock_waiters(path: Path) -> int:
    """Open files waiting for the lock of ``path`` that Go's helper takes, an open file
    description lock (the kernel lists them in /proc/locks as OFDLCK)."""
    inode = f":{os.stat(path).st_ino} "
    lines = Path("/proc/locks").read_text().splitlines()
    return sum(1 for line in lines if "->" in line and "OFDLCK" in line and inode in line)


def unix_sockets(directory: str) -> list[tuple[str, str]]:
    """``(state, bound path)`` of the Unix sockets bound in ``directory`` (/proc/net/unix:
    01 listening, 03 connected). The bound path is the name the socket was bound to: the
    helper binds a private name and renames it into place (kubeletplugin/sockets.py)."""
    found = []
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        fields = line.split()
        # gRPC binds "unix:///path" as "///path".
        path = os.path.normpath(fields[7]) if len(fields) >= 8 else ""
        if os.path.dirname(path) == directory:
            found.append((fields[5], path))
    return found


def test_rolling_update(node: Node, kubelet: KubeletHarness) -> None:
    """Old and new pod of a DaemonSet run side by side: each registers on its own sockets,
    kubelet calls the newer, and a prepare in one waits for a prepare in the other."""
    order: list[str] = []
    old_plugin = GatedPlugin(node.driver, "old", order)
    new_plugin = GatedPlugin(node.driver, "new", order)
    new_plugin.gate.set()
    old = node.start(old_plugin, rolling_update_uid="3f1c2a9e-old")
    kubelet.wait_registered(node.driver, old.plugin_socket_path)
    claims = [node.claim("a", ["dev-0"]), node.claim("b", ["dev-1"])]

    with futures.ThreadPoolExecutor(2) as pool:
        first = pool.submit(kubelet.prepare, node.driver, claims[:1])
        assert old_plugin.entered.wait(60)  # the old pod is preparing, holding the lock

        plugin_dir = os.path.dirname(old.plugin_socket_path)
        listening_before = {path for state, path in unix_sockets(plugin_dir) if state == "01"}
        new = node.start(new_plugin, rolling_update_uid="7b0d4e1f-new")
        kubelet.wait_registered(node.driver, new.plugin_socket_path)
        [new_socket] = {p for s, p in unix_sockets(plugin_dir) if s == "01"} - listening_before
        # kubelet calls the newest plugin it is connected to (DRAPluginManager.get): until
        # its connection to the new one is up, a call would still go to the old one.
        wait_until(lambda: ("03", new_socket) in unix_sockets(plugin_dir), timeout=60)
        assert {new.registrar_socket_path, new.plugin_socket_path}.isdisjoint(
            {old.registrar_socket_path, old.plugin_socket_path}
        )
        second = pool.submit(kubelet.prepare, node.driver, claims[1:])
        # kubelet called the new pod, which waits for the old one's lock.
        lock_file = node.dir / "plugins" / node.driver / "serialize.lock"
        wait_until(lambda: lock_waiters(lock_file) == 1, timeout=60)
        assert order == ["old-enter"]
        old_plugin.gate.set()
        assert first.result()["claims"][uid(claims[0])]["error"] == ""
        assert second.result()["claims"][uid(claims[1])]["error"] == ""
    assert order == ["old-enter", "old-exit", "new-enter", "new-exit"]
    assert new_plugin.prepared == {uid(claims[1])}

    # The old pod goes: kubelet keeps the new one.
    old.stop()
    kubelet.wait_event(
        lambda e: e["event"] == "deregister" and e["endpoint"] == old.plugin_socket_path
    )
    assert kubelet.unprepare(node.driver, claims)["claims"][uid(claims[1])]["error"] == ""
    assert new_plugin.prepared == set()


class HealthPlugin(RecordingPlugin):
    """Reports what the test puts into ``reports`` (None ends the stream)."""

    def __init__(self, driver: str) -> None:
        super().__init__(driver)
        self.reports: queue.Queue[list[kubeletplugin.DeviceHealth] | None] = queue.Queue()

    def watch_health(self) -> Iterator[list[kubeletplugin.DeviceHealth]]:
        while (report := self.reports.get()) is not None:
            yield report


def test_health_stream(node: Node, kubelet: KubeletHarness) -> None:
    plugin = HealthPlugin(node.driver)
    try:
        node.start(plugin)
        event = kubelet.wait_registered(node.driver)
        assert event["versions"] == [
            kubeletplugin.DRA_V1,
            kubeletplugin.DRA_V1BETA1,
            kubeletplugin.HEALTH_V1,
            kubeletplugin.HEALTH_V1ALPHA1,
        ]
        healthy = kubeletplugin.HealthStatus.HEALTHY
        plugin.reports.put(
            [
                kubeletplugin.DeviceHealth("node-1", "dev-0", healthy, last_updated=1700000000),
                kubeletplugin.DeviceHealth(
                    "node-1",
                    "dev-1",
                    kubeletplugin.HealthStatus.UNHEALTHY,
                    timeout_seconds=60,
                    message="ECC errors",
                ),
            ]
        )
        report = kubelet.wait_event(lambda e: e["event"] == "health")
        assert report["driver"] == node.driver
        assert report["devices"] == [
            {
                "pool": "node-1",
                "device": "dev-0",
                "health": "HEALTHY",
                "lastUpdated": 1700000000,
                "timeoutSeconds": 0,
                "message": "",
            },
            {
                "pool": "node-1",
                "device": "dev-1",
                "health": "UNHEALTHY",
                "lastUpdated": 0,
                "timeoutSeconds": 60,
                "message": "ECC errors",
            },
        ]
        # The plugin keeps serving prepare beside the open stream.
        claim = node.claim("one", ["dev-0"])
        assert devices_of(kubelet.prepare(node.driver, [claim]), claim) == ["dev-0"]
    finally:
        plugin.reports.put(None)


def test_publish_resources(node: Node, kubelet: KubeletHarness) -> None:
    """The helper's publish_resources is the controller with the Node as owner."""
    node_name = node.driver.split(".")[0][:50]
    created = json.loads(
        send_json(
            node.client,
            "POST",
            "/api/v1/nodes",
            json.dumps(
                {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node_name}}
            ).encode(),
        )
    )
    try:
        helper = node.start(node_name=node_name)
        helper.publish_resources(
            rs.DriverResources(pools={node_name: rs.Pool(devices=[{"name": "dev-0"}])})
        )
        assert helper.controller is not None
        assert helper.controller.wait_synced(timeout=60)
        slices = json.loads(
            get_json(
                node.client,
                "/apis/resource.k8s.io/v1/resourceslices",
                [("fieldSelector", f"spec.driver={node.driver}")],
            )
        )["items"]
        assert len(slices) == 1
        (published,) = slices
        assert published["spec"]["nodeName"] == node_name
        assert published["spec"]["devices"] == [{"name": "dev-0"}]
        (owner,) = published["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["uid"]) == (
            "Node",
            node_name,
            created["metadata"]["uid"],
        )
        helper.stop()
        with pytest.raises(rs.ControllerStoppedError):
            helper.controller.update(rs.DriverResources())
    finally:
        send_json(node.client, "DELETE", f"/api/v1/nodes/{node_name}", b"{}")
        request(
            node.client,
            "DELETE",
            "/apis/resource.k8s.io/v1/resourceslices",
            query=[("fieldSelector", f"spec.driver={node.driver}")],
        )


def test_driver_crash_and_restart(
    node: Node, kubelet: KubeletHarness, kube_cluster: TestCluster
) -> None:
    """A plugin process killed leaves its sockets behind; its successor replaces them, and
    kubelet drops the dead registration and takes the new one."""

    def run_plugin() -> subprocess.Popen[str]:
        """The plugin process (a context manager: on exit its pipes are closed and it is
        waited for)."""
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.kubeletplugin.plugin_process",
                str(kube_cluster.kubeconfigs["admin"]),
                node.driver,
                str(node.dir),
            ],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    claim = node.claim("one", ["dev-0"])
    with run_plugin() as first:
        try:
            assert first.stdout is not None and first.stdout.readline() == "ready\n"
            kubelet.wait_registered(node.driver)
            assert kubelet.prepare(node.driver, [claim])["claims"][uid(claim)]["error"] == ""
        finally:
            first.kill()
    registry = node.dir / "registry" / f"{node.driver}-reg.sock"
    assert registry.is_socket()  # left behind
    # kubelet still has the registration, but nobody answers on it.
    assert "error" in kubelet.prepare(node.driver, [claim])

    seen = len(kubelet.events())
    with run_plugin() as second:
        assert second.stdin is not None and second.stdout is not None
        try:
            assert second.stdout.readline() == "ready\n"
            kubelet.wait_registered(node.driver, after=seen)
            answer = kubelet.prepare(node.driver, [claim])
            assert answer["claims"][uid(claim)]["error"] == ""
            assert kubelet.unprepare(node.driver, [claim])["claims"][uid(claim)]["error"] == ""
        finally:
            second.stdin.close()
        assert second.wait(30) == 0
    assert not registry.exists()
