"""`resourceslice plan`: the ResourceSlices FILE becomes, without a cluster, parsed back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from resourceslice import _poolfile, cli
from resourceslice.cli import common

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def plan(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[list[Any], str]:
    assert cli.main(["plan", *args]) == common.EXIT_OK
    captured = capsys.readouterr()
    return list(yaml.load_all(captured.out, Loader=yaml.CSafeLoader)), captured.err


def file_device_names(name: str, node: str | None = None) -> list[str]:
    resources, errors = _poolfile.parse_resources(
        _poolfile.read_document(EXAMPLES / name), _poolfile.Selection(node=node)
    )
    assert errors == []
    return [d["name"] for pool in resources.pools.values() for d in pool.devices or []]


def check_pool(slices: list[Any], driver: str, pool: str, prefix: str) -> list[str]:
    """The slices of one first publish: named by index, one generation, counted right."""
    for i, obj in enumerate(slices):
        assert (obj["apiVersion"], obj["kind"]) == ("resource.k8s.io/v1", "ResourceSlice")
        assert list(obj["metadata"]) == ["name"]
        assert obj["metadata"]["name"][:-10] == f"{i:05x}-{prefix}"[:53]
        spec = obj["spec"]
        assert spec["driver"] == driver
        assert spec["pool"] == {"name": pool, "generation": 1, "resourceSliceCount": len(slices)}
        assert 0 < len(spec["devices"]) <= 128
    return [d["name"] for obj in slices for d in obj["spec"]["devices"]]


def test_gpu_node(capsys: pytest.CaptureFixture[str]) -> None:
    slices, summary = plan(
        capsys, str(EXAMPLES / "gpu-node.yaml"), "--driver", "gpu.example.com", "--node", "n1"
    )
    assert summary == "1 pool, 3 slices, 288 devices (dry run: nothing was sent)\n"
    names = check_pool(slices, "gpu.example.com", "n1", "gpu.example.com-n1-")
    # A first publish keeps the driver's order: it is the allocator's preference.
    assert names == file_device_names("gpu-node.yaml", node="n1")
    assert {obj["spec"]["nodeName"] for obj in slices} == {"n1"}
    first = slices[0]["spec"]["devices"][0]
    assert first["name"] == "gpu-0"
    assert first["capacity"] == {"memory": {"value": "80Gi"}, "multiprocessors": {"value": "132"}}
    assert first["attributes"]["driverVersion"] == {"version": "550.54.15"}


def test_fabric_pool_with_a_node_selector(capsys: pytest.CaptureFixture[str]) -> None:
    slices, summary = plan(
        capsys,
        str(EXAMPLES / "fabric-pool.yaml"),
        "--driver",
        "fabric.example.com",
        "--node-selector",
        "fabric=a",
    )
    assert summary == "1 pool, 38 slices, 4800 devices (dry run: nothing was sent)\n"
    names = check_pool(slices, "fabric.example.com", "fabric-a", "fabric.example.com-")
    assert names == file_device_names("fabric-pool.yaml")
    selector = {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "fabric", "operator": "In", "values": ["a"]}
    ]}]}  # fmt: skip
    for obj in slices:
        assert obj["spec"]["nodeSelector"] == selector
        assert "nodeName" not in obj["spec"]


def test_explicit_slices_are_published_as_given(capsys: pytest.CaptureFixture[str]) -> None:
    slices, summary = plan(
        capsys, str(EXAMPLES / "fpga-slices.json"), "--driver", "fpga.example.com", "--node", "n2"
    )
    assert summary == "1 pool, 2 slices, 4 devices (dry run: nothing was sent)\n"
    check_pool(slices, "fpga.example.com", "n2-fpga", "fpga.example.com-n2-")
    assert [[d["name"] for d in obj["spec"]["devices"]] for obj in slices] == [
        ["fpga-0", "fpga-1"],
        ["fpga-2", "fpga-3"],
    ]


def test_json_output_is_a_list_of_the_same_objects(capsys: pytest.CaptureFixture[str]) -> None:
    args = [str(EXAMPLES / "fpga-slices.json"), "--driver", "fpga.example.com", "--node", "n2"]
    as_yaml, _ = plan(capsys, *args)
    assert cli.main(["plan", *args, "-o", "json"]) == common.EXIT_OK
    listing = json.loads(capsys.readouterr().out)
    assert (listing["apiVersion"], listing["kind"]) == ("v1", "List")
    assert listing["items"] == as_yaml


def test_invalid_devices_list_every_problem_with_its_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        "pools:\n"
        "  p:\n"
        "    allNodes: true\n"
        "    devices:\n"
        "      - name: Not_A_Label\n"
        "      - name: ok\n"
        "        capacity: {memory: {value: lots}}\n"
    )
    assert cli.main(["plan", str(path), "--driver", "gpu.example.com"]) == common.EXIT_USAGE
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert lines[0] == f"resourceslice: {path}: invalid:"
    assert lines[1].startswith('  pools["p"].devices[0].name: ')
    assert lines[2].startswith('  pools["p"].devices[1].capacity["memory"].value: ')
    assert "Traceback" not in captured.err


def test_a_pool_file_packs_fewer_devices_per_slice(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``maxDevicesPerSlice`` reaches the packer (a pool whose devices get tainted: 64)."""
    path = tmp_path / "ports.yaml"
    path.write_text(
        "pools:\n  ports:\n    maxDevicesPerSlice: 64\n    devices:\n"
        "      - foreach: {port: 130}\n        device: {name: 'port-{port}'}\n"
    )
    slices, summary = plan(capsys, str(path), "--driver", "net.example.com", "--all-nodes")
    assert summary == "1 pool, 3 slices, 130 devices (dry run: nothing was sent)\n"
    assert [len(obj["spec"]["devices"]) for obj in slices] == [64, 64, 2]
