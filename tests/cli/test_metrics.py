"""`publish --metrics-address`: a running `resourceslice publish` on the real apiserver,
scraped over HTTP as Prometheus would, and its health endpoints."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import kubernetes.client
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

import resourceslice
from resourceslice import cli
from resourceslice.cli import common
from support.cli import TIMEOUT, Output, device, slices

pytestmark = pytest.mark.integration


def get(url: str) -> tuple[int, str, str]:
    """Status, content type and body; an error status is an answer too."""
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.headers["Content-Type"], exc.read().decode()


def samples(text: str, driver: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """(sample name, its labels but driver) -> value, for ``driver``'s series."""
    found = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.labels.get("driver") == driver:
                labels = tuple(sorted((k, v) for k, v in s.labels.items() if k != "driver"))
                found[s.name, labels] = s.value
    return found


def test_a_running_publish_serves_the_writes_it_made_and_its_health(
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
         "--all-nodes", "--interval", "0.05", "--kubeconfig", kubeconfig,
         "--metrics-address", "127.0.0.1:0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        output = Output(process)
        line = output.wait_for("out", "/metrics")
        match = re.search(r"(http://127\.0\.0\.1:\d+)/metrics and \1/healthz", line)
        assert match, line
        base = match[1]
        output.wait_for("out", "3 creates, 0 updates, 0 deletes")

        status, content_type, text = get(f"{base}/metrics")
        assert status == 200 and content_type.startswith("text/plain"), (status, content_type)
        found = samples(text, driver)
        writes = {k[1]: v for k, v in found.items() if k[0] == "resourceslice_writes_total"}
        assert writes == {
            (("outcome", "success"), ("verb", "create")): 3,
            (("outcome", "success"), ("verb", "update")): 0,
            (("outcome", "success"), ("verb", "delete")): 0,
        }
        assert found["resourceslice_pools", (("state", "synced"),)] == 1
        assert found["resourceslice_pools", (("state", "failing"),)] == 0
        assert found["resourceslice_published_devices", ()] == 300
        assert found["resourceslice_syncs_total", (("result", "success"),)] >= 1
        assert found["resourceslice_sync_duration_seconds_count", ()] >= 1
        assert found["resourceslice_synced", ()] == 1
        assert found["resourceslice_informer_connected", ()] == 1
        assert found["resourceslice_last_sync_timestamp_seconds", ()] > 0
        assert "process_cpu_seconds_total" in text  # the process's own metrics too

        for endpoint in ("healthz", "livez", "readyz"):
            status, content_type, body = get(f"{base}/{endpoint}")
            assert (status, content_type) == (200, "application/json"), endpoint
            health = json.loads(body)[driver]
            assert health["alive"] and health["syncedOnce"] and health["failing"] == {}
        assert get(f"{base}/nothing")[0] == 404

        # A change of one device: one update, seen by the next scrape.
        devices[200] = device(200, speed="200G")
        path.write_text(yaml.safe_dump({"pools": {"fabric": {"devices": devices}}}))
        output.wait_for("out", "0 creates, 1 update, 0 deletes")
        updates = samples(get(f"{base}/metrics")[2], driver)[
            "resourceslice_writes_total", (("outcome", "success"), ("verb", "update"))
        ]
        assert updates == 1

        process.send_signal(signal.SIGINT)
        output.wait_for("out", "stopping")
        assert process.wait(TIMEOUT) == 0
        # The server stopped with the command.
        with pytest.raises(urllib.error.URLError):
            urllib.request.urlopen(f"{base}/metrics", timeout=TIMEOUT)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_metrics_address_errors(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    kubeconfig: str,
    resource_api: kubernetes.client.ResourceV1Api,
    driver: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = tmp_path / "pool.yaml"
    path.write_text(yaml.safe_dump({"pools": {"p": {"devices": [device(0)]}}}))
    args = ["publish", str(path), "--driver", driver, "--all-nodes", "--once"]
    args += ["--kubeconfig", kubeconfig]

    with pytest.raises(SystemExit) as exited:
        cli.main([*args, "--metrics-address", "9090"])
    assert exited.value.code == common.EXIT_USAGE
    assert "expected HOST:PORT, not '9090'" in capsys.readouterr().err

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert cli.main([*args, "--metrics-address", f"127.0.0.1:{port}"]) == common.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith(f"resourceslice: --metrics-address 127.0.0.1:{port}: "), err

    # Without the extra installed: what to install, not a traceback.
    monkeypatch.delitem(sys.modules, "resourceslice.metrics", raising=False)
    monkeypatch.delattr(resourceslice, "metrics", raising=False)
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    assert cli.main([*args, "--metrics-address", "127.0.0.1:0"]) == common.EXIT_USAGE
    err = capsys.readouterr().err
    assert "needs prometheus_client: the package's metrics extra" in err
    assert "(pip install 'prometheus-client>=0.17')" in err
    # Each was refused before anything was published.
    assert slices(resource_api, driver) == []
