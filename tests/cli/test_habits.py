"""kubectl's habits, against the real apiserver: ``diff`` (kubectl diff's form and exit
codes), ``-o json|yaml`` of ``status`` and ``prune``, and ``-v`` after the subcommand."""

from __future__ import annotations

import json
from pathlib import Path

import kubernetes.client
import pytest
import yaml

from resourceslice.cli import command
from support.cli import EXAMPLES, device, run, slices

pytestmark = pytest.mark.integration


@pytest.fixture
def pools(tmp_path: Path) -> Path:
    path = tmp_path / "pools.yaml"
    devices = [device(i) for i in range(3)]
    path.write_text(yaml.safe_dump({"pools": {"rack-1": {"devices": devices}}}))
    return path


def test_diff_shows_creates_updates_and_deletes_without_writing(
    capsys: pytest.CaptureFixture[str],
    pools: Path,
    kubeconfig: str,
    resource_api: kubernetes.client.ResourceV1Api,
    driver: str,
) -> None:
    access = ["--driver", driver, "--all-nodes", "--kubeconfig", kubeconfig]
    code, out, err = run(capsys, "diff", str(pools), *access)
    assert (code, err) == (1, "")  # differences: a create
    assert out.startswith("diff -u -N LIVE/resource.k8s.io.v1.ResourceSlice.")
    assert "\n--- LIVE/" in out and "\n+++ MERGED/" in out
    assert "\n+  devices:\n+  - attributes:\n" in out and "\n+    name: port-0\n" in out
    assert not any(line.startswith("-") and not line.startswith("---") for line in out.splitlines())
    assert slices(resource_api, driver) == []  # nothing written

    assert run(capsys, "publish", str(pools), *access, "--once")[0] == 0
    assert run(capsys, "diff", str(pools), *access) == (0, "", "")  # the cluster matches

    text = yaml.safe_load(pools.read_text())
    text["pools"]["rack-1"]["devices"][1]["name"] = "port-renamed"
    pools.write_text(yaml.safe_dump(text))
    code, out, _ = run(capsys, "diff", str(pools), *access)
    assert code == 1
    assert "\n-    name: port-1\n" in out and "\n+    name: port-renamed\n" in out
    assert "resourceVersion" not in out and "managedFields" not in out

    pools.write_text(yaml.safe_dump({"pools": {}}))  # publish would delete the pool's slice
    code, out, _ = run(capsys, "diff", str(pools), *access)
    assert code == 1
    assert "\n-    name: port-0\n" in out
    assert not any(line.startswith("+") and not line.startswith("+++") for line in out.splitlines())
    assert len(slices(resource_api, driver)) == 1  # still nothing written


def test_diff_errors_exit_above_one(
    capsys: pytest.CaptureFixture[str], pools: Path, kubeconfig: str, driver: str
) -> None:
    """kubectl diff: >1 for an error, so that 1 always means "differences"."""
    code, _, err = run(
        capsys, "diff", str(pools), "--driver", driver, "--node", "no-such-node",
        "--kubeconfig", kubeconfig,
    )  # fmt: skip
    assert code == 2
    assert "node no-such-node: 404" in err


def test_status_and_prune_output_json_and_yaml(
    capsys: pytest.CaptureFixture[str],
    pools: Path,
    kubeconfig: str,
    resource_api: kubernetes.client.ResourceV1Api,
    driver: str,
    node: str,
) -> None:
    access = ["--driver", driver, "--kubeconfig", kubeconfig]
    assert run(capsys, "publish", str(pools), *access, "--node", node, "--once")[0] == 0

    code, out, _ = run(capsys, "status", *access, "-o", "json")
    assert code == 0
    status = json.loads(out)
    assert status["driver"] == driver
    assert [(p["pool"], p["node"], p["devices"], p["ok"]) for p in status["pools"]] == [
        ("rack-1", node, 3, True)
    ]
    code, out, _ = run(capsys, "status", *access, "-o", "yaml")
    assert (code, yaml.safe_load(out)) == (0, status)

    code, out, _ = run(capsys, "prune", *access, "-o", "yaml")  # a dry run
    listed = yaml.safe_load(out)
    assert code == 0
    assert listed["deleted"] is False
    assert [(s["pool"], s["node"]) for s in listed["slices"]] == [("rack-1", node)]
    assert len(slices(resource_api, driver)) == 1

    code, out, _ = run(capsys, "prune", *access, "--yes", "-o", "json")
    assert (code, json.loads(out)) == (0, {**listed, "deleted": True})
    assert slices(resource_api, driver) == []


def test_verbose_after_the_subcommand() -> None:
    parser = command.build_parser()
    after = parser.parse_args(["plan", str(EXAMPLES / "gpu-node.yaml"), "--driver", "d", "-vv"])
    before = parser.parse_args(["-v", "plan", str(EXAMPLES / "gpu-node.yaml"), "--driver", "d"])
    status = parser.parse_args(["status", "--driver", "d", "-v"])
    assert (after.verbose, before.verbose, status.verbose) == (2, 1, 1)
