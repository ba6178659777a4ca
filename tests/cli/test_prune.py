"""`prune` and `--version` against the real apiserver."""

from __future__ import annotations

from pathlib import Path

import kubernetes.client
import pytest
import yaml

import resourceslice
from resourceslice import cli
from resourceslice.cli import common
from support.cli import device, run, slices

pytestmark = pytest.mark.integration


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["--version"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert out == f"resourceslice {resourceslice.__version__} (core: rust)\n"
    assert resourceslice.__version__ == "0.1.0"


def test_prune_lists_without_yes_then_deletes_a_nodes_slices_then_the_rest(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    kubeconfig: str,
    resource_api: kubernetes.client.ResourceV1Api,
    driver: str,
    node: str,
) -> None:
    access = ["--driver", driver, "--kubeconfig", kubeconfig]
    for name, where in (("local", ["--node", node]), ("shared", ["--all-nodes"])):
        path = tmp_path / f"{name}.yaml"
        devices = [device(i) for i in range(200)]
        path.write_text(yaml.safe_dump({"pools": {name: {"devices": devices}}}))
        assert run(capsys, "publish", str(path), *access, *where, "--once")[0] == 0
    pools = sorted(s["spec"]["pool"]["name"] for s in slices(resource_api, driver))
    assert pools == ["local", "local", "shared", "shared"]

    code, out, err = run(capsys, "prune", *access)  # a dry run: it succeeds
    assert code == common.EXIT_OK
    assert err == (
        f"4 ResourceSlices of driver {driver}; nothing deleted (dry run): "
        "pass --yes to delete them\n"
    )
    assert sorted(line.split()[-1] for line in out.splitlines()) == pools
    assert len(slices(resource_api, driver)) == 4

    code, out, _ = run(capsys, "prune", *access, "--node", node, "--yes")
    assert (code, out) == (0, f"deleted 2 ResourceSlices of driver {driver} on node {node}\n")
    assert [s["spec"]["pool"]["name"] for s in slices(resource_api, driver)] == ["shared"] * 2

    code, out, _ = run(capsys, "prune", *access, "--yes")
    assert (code, out) == (0, f"deleted 2 ResourceSlices of driver {driver}\n")
    assert slices(resource_api, driver) == []
    assert run(capsys, "prune", *access, "--yes")[:2] == (
        0,
        f"deleted 0 ResourceSlices of driver {driver}\n",
    )
