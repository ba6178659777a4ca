"""A driver's kubelet plugin killed, restarted, and its node rebooted, on the DRA cluster: what
the checkpoint of prepared claims is for, with kubelet's DRA manager (and its own checkpoint)
retrying as kubelet does.

The driver (restart_plugin.py) runs in a process of its own, which the tests SIGKILL; each
prepare makes a "partition" with an ID of its own and records it, and every call it gets is
logged to a file that outlives the process.
"""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.restart_plugin import DRIVER, env_name
from resourceslice._http import send_json
from resourceslice.testing import DRACluster, wait_until

pytestmark = pytest.mark.integration

TESTS = Path(__file__).resolve().parents[1]


class PluginProcess:
    """restart_plugin.py running: its stdout read on a thread, line by line."""

    def __init__(self, settings: dict[str, Any]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "e2e.restart_plugin", json.dumps(settings)],
            cwd=TESTS,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.lines: queue.Queue[dict[str, Any]] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(json.loads(line))

    def next_line(self, key: str, timeout: float = 60.0) -> Any:
        """The next line's ``key`` (which it must have)."""
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"the plugin said no {key!r} in {timeout}s") from None
        assert key in line, line
        return line[key]

    def wait_killed(self, timeout: float = 60.0) -> None:
        """Until it killed itself (SIGKILL), where its settings told it to."""
        assert self.process.wait(timeout) == -signal.SIGKILL

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(30)

    def stop(self) -> None:
        """Gracefully: the helper stops (its sockets go; kubelet deregisters it)."""
        assert self.process.stdin is not None
        self.process.stdin.close()
        assert self.process.wait(30) == 0

    def close(self) -> None:
        """Killed if it runs; its pipes closed."""
        if self.process.poll() is None:
            self.kill()
        self._reader.join(30)
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                pipe.close()


class Node:
    """A simulated node of the cluster, with the driver's plugin started on it as a process,
    a device class and a claim template of one device."""

    def __init__(self, cluster: DRACluster, log: Path) -> None:
        self.cluster = cluster
        self.node = cluster.add_node("restart-node")
        self.log = log
        self.processes: list[PluginProcess] = []
        cluster.create_device_class("partition", driver=DRIVER)
        cluster.create_claim_template("one", device_class="partition")

    def start_plugin(self, kill: str | None = None, registered: bool = True) -> PluginProcess:
        """The plugin started, its devices published; ``registered``: and registered with
        the node's kubelet (which must be running)."""
        after = len(self.cluster.events())
        plugin = PluginProcess(
            {
                "kubeconfig": str(self.cluster.apiserver.kubeconfigs["admin"]),
                "node": self.node.name,
                "registry_dir": str(self.node.registry_dir),
                "plugin_data_dir": str(self.node.plugin_data_dir(DRIVER)),
                "cdi_dir": str(self.node.cdi_dir),
                "log": str(self.log),
                "kill": kill,
            }
        )
        self.processes.append(plugin)
        assert plugin.next_line("ready") is True
        if registered:
            self.cluster.wait_registered(self.node.name, DRIVER, after=after)
        return plugin

    def calls(self, call: str, uid: str) -> list[dict[str, Any]]:
        """What the driver was asked, in every process so far, for the claim ``uid``."""
        entries = [json.loads(line) for line in self.log.read_text().splitlines()]
        return [e for e in entries if e["call"] == call and e["uid"] == uid]

    def claim_uid(self, pod: str) -> str:
        (claim,) = self.cluster.pod_claims(pod)
        return str(claim["metadata"]["uid"])

    def spec(self, claim_uid: str) -> Path:
        return self.node.cdi_dir / f"{DRIVER}-{claim_uid}.json"

    def force_delete(self, pod: str) -> None:
        """The pod deleted at once, as for a node that is down (``kubectl delete --force``),
        and its claim with it: deallocated by the resourceclaim controller, then deleted as
        the garbage collector (not running here) deletes what the pod owned."""
        ((claim,),) = [self.cluster.pod_claims(pod)]
        name, claim_uid = claim["metadata"]["name"], claim["metadata"]["uid"]
        client = self.cluster.api_client()
        try:
            send_json(
                client,
                "DELETE",
                f"/api/v1/namespaces/default/pods/{pod}",
                json.dumps({"gracePeriodSeconds": 0}).encode(),
            )

            def current() -> dict[str, Any] | None:
                found = [c for c in self.cluster.list_claims() if c["metadata"]["uid"] == claim_uid]
                return found[0] if found else None

            wait_until(lambda: not (current() or {}).get("status", {}).get("allocation"), 60)
            path = f"/apis/{self.cluster.resource_api}/namespaces/default/resourceclaims/{name}"
            send_json(client, "DELETE", path, b"{}")
            wait_until(lambda: current() is None, 60)
        finally:
            client.close()

    def close(self) -> None:
        for plugin in self.processes:
            plugin.close()


@pytest.fixture
def node(dra_cluster: DRACluster, tmp_path: Path) -> Iterator[Node]:
    env = Node(dra_cluster, tmp_path / "calls.jsonl")
    try:
        yield env
    finally:
        env.close()


def test_killed_before_kubelet_got_the_answer_the_retry_is_answered_from_the_checkpoint(
    dra_cluster: DRACluster, node: Node
) -> None:
    first = node.start_plugin(kill="before-answer")
    dra_cluster.create_pod("pod", claim_template="one")
    first.wait_killed()
    claim = node.claim_uid("pod")
    (prepared,) = node.calls("prepare", claim)

    node.start_plugin()
    pod = dra_cluster.wait_pod_prepared("pod")
    # kubelet's retry got what the killed process recorded: the driver was not called again,
    # and the container has the partition that prepare made.
    assert node.calls("prepare", claim) == [prepared]
    ((claim_object,),) = [dra_cluster.pod_claims("pod")]
    (device,) = [r["device"] for r in claim_object["status"]["allocation"]["devices"]["results"]]
    assert pod.containers["ctr"].env == [f"{env_name(device)}={prepared['partition']}"]
    assert dra_cluster.container_edits("pod") == pod.containers["ctr"]


def test_killed_inside_prepare_after_writing_the_spec_the_retry_prepares_once_more(
    dra_cluster: DRACluster, node: Node
) -> None:
    first = node.start_plugin(kill="in-prepare")
    dra_cluster.create_pod("pod", claim_template="one")
    first.wait_killed()
    claim = node.claim_uid("pod")
    (killed,) = node.calls("prepare", claim)
    spec = node.spec(claim)
    assert killed["partition"] in spec.read_text()  # left by the prepare that never answered

    second = node.start_plugin()
    # Not recorded, so not prepared: the start removed the spec before kubelet could call.
    assert second.next_line("reconciled")["cdi_specs_removed"] == [str(spec)]
    pod = dra_cluster.wait_pod_prepared("pod")
    killed_again, retried = node.calls("prepare", claim)
    assert killed_again == killed and retried["partition"] != killed["partition"]
    # One set of edits, the retry's: in the container, in the only spec of the claim.
    (env,) = pod.containers["ctr"].env
    assert env.endswith(f"={retried['partition']}")
    assert killed["partition"] not in spec.read_text()
    assert sorted(p.name for p in node.node.cdi_dir.iterdir()) == [spec.name]


def test_killed_after_answering_unprepare_gets_what_prepare_recorded(
    dra_cluster: DRACluster, node: Node
) -> None:
    first = node.start_plugin()
    dra_cluster.create_pod("pod", claim_template="one")
    dra_cluster.wait_pod_prepared("pod")
    claim = node.claim_uid("pod")
    (prepared,) = node.calls("prepare", claim)
    first.kill()

    node.start_plugin()
    dra_cluster.delete_pod("pod")  # kubelet unprepares it, through the new process
    assert node.calls("unprepare", claim) == [
        {"call": "unprepare", "uid": claim, "data": {"partition": prepared["partition"]}}
    ]
    assert not node.spec(claim).exists()


def test_a_reboot_gives_bound_pods_their_edits_back_and_leaves_no_stale_spec(
    dra_cluster: DRACluster, node: Node
) -> None:
    plugin = node.start_plugin()
    for pod in ("bound", "gone"):
        dra_cluster.create_pod(pod, claim_template="one")
    before = dra_cluster.wait_pod_prepared("bound")
    dra_cluster.wait_pod_prepared("gone")
    bound, gone = node.claim_uid("bound"), node.claim_uid("gone")
    (gone_prepared,) = node.calls("prepare", gone)

    # The reboot: kubelet and the plugin stop, a pod is deleted meanwhile (its node is
    # down), and /var/run/cdi, a tmpfs, comes back empty.
    plugin.stop()
    dra_cluster.stop_kubelet(node.node.name)
    node.force_delete("gone")
    node.node.empty_cdi_dir()
    after = len(dra_cluster.events())
    dra_cluster.start_kubelet(node.node.name)
    report = node.start_plugin().next_line("reconciled")

    # kubelet prepares the bound pod again, and the runtime gives its container the same
    # edits: the spec is back, the driver not called again.
    pod = dra_cluster.wait_pod_prepared("bound", after=after)
    assert pod.containers == before.containers
    assert len(node.calls("prepare", bound)) == 1
    assert str(node.spec(bound)) in report["cdi_specs_restored"]
    # The deleted pod's claim is unprepared with its record, and its spec is not back.
    assert [ref["uid"] for ref in report["unprepared"]] == [gone]
    assert node.calls("unprepare", gone) == [
        {"call": "unprepare", "uid": gone, "data": {"partition": gone_prepared["partition"]}}
    ]
    assert sorted(node.node.cdi_dir.iterdir()) == [node.spec(bound)]


def test_a_claim_deleted_while_the_plugin_was_down_is_unprepared_when_it_starts(
    dra_cluster: DRACluster, node: Node
) -> None:
    plugin = node.start_plugin()
    dra_cluster.create_pod("pod", claim_template="one")
    dra_cluster.wait_pod_prepared("pod")
    claim = node.claim_uid("pod")
    (prepared,) = node.calls("prepare", claim)

    # The node goes down (the plugin killed, kubelet stopped); the pod is deleted, and with
    # it its claim.
    plugin.kill()
    dra_cluster.stop_kubelet(node.node.name)
    node.force_delete("pod")

    # The plugin starts first: it unprepares the claim itself, with its record, once.
    report = node.start_plugin(registered=False).next_line("reconciled")
    assert [(ref["namespace"], ref["uid"]) for ref in report["unprepared"]] == [("default", claim)]
    assert report["unprepare_failed"] == {} and report["unchecked"] == {}
    assert node.calls("unprepare", claim) == [
        {"call": "unprepare", "uid": claim, "data": {"partition": prepared["partition"]}}
    ]
    assert not node.spec(claim).exists()
    after = len(dra_cluster.events())
    dra_cluster.start_kubelet(node.node.name)
    dra_cluster.wait_registered(node.node.name, DRIVER, after=after)
