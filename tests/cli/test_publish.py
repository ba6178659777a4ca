"""`publish` and `status` against the real apiserver of resourceslice.testing."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest
import yaml

import resourceslice
from resourceslice.cli import command, common
from resourceslice.cli import publish as cli_publish
from resourceslice.preview import first_plans
from resourceslice.testing import wait_until
from support.cli import EXAMPLES, TIMEOUT, Output, device, run, slices

pytestmark = pytest.mark.integration


def test_publish_once_then_status_then_restart_writes_nothing(
    capsys: pytest.CaptureFixture[str],
    kubeconfig: str,
    resource_api: kubernetes.client.ResourceV1Api,
    driver: str,
    node: str,
) -> None:
    publish = ["publish", str(EXAMPLES / "gpu-node.yaml"), "--driver", driver, "--node", node]
    publish += ["--once", "--kubeconfig", kubeconfig, "--timeout", str(TIMEOUT)]
    code, out, err = run(capsys, *publish)
    assert (code, err) == (0, "")
    assert "1 pool, 3 slices, 288 devices; 3 writes needed" in out
    assert "3 creates, 0 updates, 0 deletes" in out

    stored = slices(resource_api, driver)
    assert len(stored) == 3
    assert {s["spec"]["nodeName"] for s in stored} == {node}
    assert {s["metadata"]["ownerReferences"][0]["name"] for s in stored} == {node}
    assert sum(len(s["spec"]["devices"]) for s in stored) == 288

    code, out, err = run(
        capsys, "status", "--driver", driver, "--node", node, "--kubeconfig", kubeconfig
    )
    assert (code, err) == (0, "")
    header, row = out.splitlines()
    assert header.split() == ["POOL", "NODE", "GENERATION", "SLICES", "DEVICES", "STATUS"]
    assert row.split() == [node, node, "1", "3/3", "288", "ok"]

    # The same file again: the cluster already matches, nothing is written.
    code, out, err = run(capsys, *publish)
    assert (code, err) == (0, "")
    assert "0 writes needed" in out
    assert "0 creates, 0 updates, 0 deletes" in out


def test_status_fails_for_an_incomplete_pool(
    capsys: pytest.CaptureFixture[str],
    kubeconfig: str,
    resource_api: kubernetes.client.ResourceV1Api,
    driver: str,
) -> None:
    code, _, _ = run(
        capsys, "publish", str(EXAMPLES / "fabric-pool.yaml"), "--driver", driver,
        "--node-selector", "fabric=a", "--once", "--kubeconfig", kubeconfig,
    )  # fmt: skip
    assert code == 0
    victim = sorted(s["metadata"]["name"] for s in slices(resource_api, driver))[5]
    resource_api.delete_resource_slice(victim)

    code, out, err = run(capsys, "status", "--driver", driver, "--kubeconfig", kubeconfig)
    assert code == common.EXIT_FAILED
    (row,) = out.splitlines()[1:]
    assert row.split()[:5] == ["fabric-a", "-", "1", "37/38", str(4800 - 128)]
    assert row.endswith("incomplete: 1 of 38 slices missing")
    assert err == "1 pool not usable by the scheduler: fabric-a\n"


def test_pools_no_longer_in_the_file_are_deleted(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    kubeconfig: str,
    resource_api: kubernetes.client.ResourceV1Api,
    driver: str,
) -> None:
    path = tmp_path / "pools.yaml"
    two = {"pools": {"keep": {"devices": [{"name": "a"}]}, "drop": {"devices": [{"name": "b"}]}}}
    path.write_text(yaml.safe_dump(two))
    publish = ["publish", str(path), "--driver", driver, "--all-nodes", "--once"]
    publish += ["--kubeconfig", kubeconfig]
    assert run(capsys, *publish)[0] == 0
    assert sorted(s["spec"]["pool"]["name"] for s in slices(resource_api, driver)) == [
        "drop",
        "keep",
    ]

    del two["pools"]["drop"]
    path.write_text(yaml.safe_dump(two))
    code, out, _ = run(capsys, *publish)
    assert code == 0
    assert "0 creates, 0 updates, 1 delete" in out
    assert [s["spec"]["pool"]["name"] for s in slices(resource_api, driver)] == ["keep"]


def test_publish_once_exits_in_sync_when_another_writer_did_part_of_the_work(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    kubeconfig: str,
    resource_api: kubernetes.client.ResourceV1Api,
    driver: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = tmp_path / "pools.yaml"
    two = {"pools": {"a": {"devices": [{"name": "a"}]}, "b": {"devices": [{"name": "b"}]}}}
    path.write_text(yaml.safe_dump(two))
    planned_writes = cli_publish.Publisher._planned_writes

    def and_then_another_writer(publisher: Any, client: Any, loaded: Any, owner: Any) -> int:
        # Between the count of the writes needed and the controller's start, someone else
        # (another publish of the same FILE) creates one of the slices, exactly as wanted.
        planned: int = planned_writes(publisher, client, loaded, owner)
        [body] = first_plans(loaded.desired, None)[0].creates
        resource_api.create_resource_slice(json.loads(body), _preload_content=False)
        return planned

    monkeypatch.setattr(cli_publish.Publisher, "_planned_writes", and_then_another_writer)
    publish = ["publish", str(path), "--driver", driver, "--all-nodes", "--once"]
    code, out, err = run(capsys, *publish, "--kubeconfig", kubeconfig, "--timeout", "30")
    # In sync after one create of the two planned: done, not waiting for the timeout.
    assert (code, err) == (0, "")
    assert "2 writes needed" in out
    assert "1 create, 0 updates, 0 deletes" in out
    assert sorted(s["spec"]["pool"]["name"] for s in slices(resource_api, driver)) == ["a", "b"]


def test_missing_node_is_a_clear_error(
    capsys: pytest.CaptureFixture[str], kubeconfig: str, driver: str
) -> None:
    code, out, err = run(
        capsys, "publish", str(EXAMPLES / "gpu-node.yaml"), "--driver", driver,
        "--node", "no-such-node", "--once", "--kubeconfig", kubeconfig,
    )  # fmt: skip
    assert (code, out) == (common.EXIT_FAILED, "")
    assert err.startswith("resourceslice: node no-such-node: 404 ")
    assert "must exist" in err


def test_publish_follows_the_file_and_keeps_the_last_good_state(
    tmp_path: Path,
    kubeconfig: str,
    resource_api: kubernetes.client.ResourceV1Api,
    driver: str,
) -> None:
    path = tmp_path / "fabric.yaml"
    devices = [device(i) for i in range(300)]
    path.write_text(yaml.safe_dump({"pools": {"fabric": {"devices": devices}}}))
    env = dict(os.environ, PYTHONPATH=str(Path(resourceslice.__file__).parents[1]))
    process = subprocess.Popen(
        [sys.executable, "-m", "resourceslice.cli", "publish", str(path), "--driver", driver,
         "--all-nodes", "--interval", "0.05", "--kubeconfig", kubeconfig],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        output = Output(process)
        output.wait_for("out", "3 creates, 0 updates, 0 deletes")
        output.wait_for("out", "watching")

        devices[200] = device(200, speed="200G")
        path.write_text(yaml.safe_dump({"pools": {"fabric": {"devices": devices}}}))
        output.wait_for("out", "0 creates, 1 update, 0 deletes")
        speeds = {
            d["name"]: d["attributes"]["speed"]["string"]
            for s in slices(resource_api, driver)
            for d in s["spec"]["devices"]
        }
        assert (len(speeds), speeds["port-200"], speeds["port-199"]) == (300, "200G", "400G")

        path.write_text("pools:\n  fabric:\n    devices: [{name: Bad_Name}]\n")
        assert output.wait_for("err", f"{path}: invalid") == f"error: {path}: invalid:"
        output.wait_for("err", 'pools["fabric"].devices[0].name')
        output.wait_for("err", "keeping the last good state")
        assert sum(len(s["spec"]["devices"]) for s in slices(resource_api, driver)) == 300
        # Hostile files too (issue 23): a nested field and a recursive alias get a clear
        # error, and the last good state stays published.
        template = '{foreach: {i: 2}, device: {name: "d-{i:{zzz}}"}}'
        path.write_text(f"pools:\n  fabric:\n    devices: [{template}]\n")
        output.wait_for("err", "the format spec must be plain")
        path.write_text("pools: &a {fabric: {devices: [*a]}}\n")
        output.wait_for("err", "YAML aliases (*name) are not allowed")
        assert sum(len(s["spec"]["devices"]) for s in slices(resource_api, driver)) == 300

        path.write_text(yaml.safe_dump({"pools": {"fabric": {"devices": devices[:10]}}}))
        output.wait_for("out", "changed: 1 pool, 1 slice, 10 devices")
        output.wait_for("out", "synced")
        assert [len(s["spec"]["devices"]) for s in slices(resource_api, driver)] == [10]

        process.send_signal(signal.SIGINT)
        output.wait_for("out", "stopping")
        assert process.wait(TIMEOUT) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_an_edit_while_the_file_is_loaded_is_followed(
    tmp_path: Path,
    kubeconfig: str,
    resource_api: kubernetes.client.ResourceV1Api,
    driver: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """FILE changes right after publish read it (a ConfigMap update as the Pod starts): the
    edit is published, not lost to a watch that took the edited file as its baseline."""
    path = tmp_path / "fabric.yaml"
    path.write_text(yaml.safe_dump({"pools": {"fabric": {"devices": [device(0)]}}}))
    edited = yaml.safe_dump({"pools": {"fabric": {"devices": [device(0), device(1)]}}})
    first_load = common.load

    def load_then_edit(*args: Any) -> Any:
        loaded = first_load(*args)
        if path.read_text() != edited:
            path.write_text(edited)
        return loaded

    monkeypatch.setattr(cli_publish, "load", load_then_edit)
    args = command.build_parser().parse_args(
        ["publish", str(path), "--driver", driver, "--all-nodes", "--interval", "0.05",
         "--kubeconfig", kubeconfig]
    )  # fmt: skip
    publisher = cli_publish.Publisher(args, io.StringIO(), io.StringIO())
    runner = threading.Thread(target=publisher.run)
    runner.start()
    try:
        wait_until(
            lambda: [len(s["spec"]["devices"]) for s in slices(resource_api, driver)] == [2],
            TIMEOUT,
        )
    finally:
        publisher.stop.set()
        runner.join(TIMEOUT)
