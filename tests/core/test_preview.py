"""rs.plan and rs.validate: the command's ``plan`` and the controller's validation as
functions, on both cores (the ``core`` fixture: each module that reaches the core uses it)."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import resourceslice as rs
from resourceslice import _core, _plain, _pycore, cli, preview
from resourceslice.cli.common import parse_node_selector

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(autouse=True)
def use_core(core: ModuleType, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    for module in (_plain, preview):
        monkeypatch.setattr(module, "core", core)
    return core


def command_plan(capsys: pytest.CaptureFixture[str], *args: str) -> list[dict[str, Any]]:
    assert cli.main(["plan", *args, "-o", "json"]) == 0
    items: list[dict[str, Any]] = json.loads(capsys.readouterr().out)["items"]
    return items


CASES = {
    "node": ("gpu-node.yaml", "gpu.example.com", ["--node", "n1"], {"node": "n1"}),
    "selector": (
        "fabric-pool.yaml",
        "fabric.example.com",
        ["--node-selector", "fabric=a,!broken"],
        {"node_selector": parse_node_selector("fabric=a,!broken")},
    ),
    "node slices": ("fpga-slices.json", "fpga.example.com", ["--node", "n2"], {"node": "n2"}),
    "all nodes": ("mixed.yaml", "mixed.example.com", ["--all-nodes"], {"all_nodes": True}),
}

#: Pools that name their node selection and pools that take the command line's.
MIXED = """
pools:
  everywhere:
    devices: [{name: a}, {name: b, attributes: {size: {int: 2}}}]
  own-selector:
    nodeSelector: {nodeSelectorTerms: [{matchExpressions: [{key: x, operator: Exists}]}]}
    devices: [{name: c}]
  empty: {devices: []}
"""


@pytest.mark.parametrize("case", CASES)
def test_plan_gives_what_the_command_prints(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, case: str
) -> None:
    name, driver, flags, where = CASES[case]
    path = EXAMPLES / name
    if name == "mixed.yaml":
        path = tmp_path / name
        path.write_text(MIXED)
    printed = command_plan(capsys, str(path), "--driver", driver, *flags)
    resources = rs.load_resources(path, node=where.get("node"))
    planned = rs.plan(resources, driver=driver, **where)
    assert planned == printed
    assert len(planned) > 1
    if name == "mixed.yaml":  # a pool that says where it is keeps it
        where_published = {o["spec"]["pool"]["name"]: o["spec"].get("allNodes") for o in planned}
        assert where_published == {"empty": True, "everywhere": True, "own-selector": None}
    assert rs.validate(resources, driver=driver, **where) == []


def test_both_cores_plan_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    resources = rs.load_resources(EXAMPLES / "gpu-node.yaml", node="n1")
    plans = []
    for core in (_core, _pycore):
        for module in (_plain, preview):
            monkeypatch.setattr(module, "core", core)
        plans.append(rs.plan(resources, driver="gpu.example.com", node="n1"))
    assert plans[0] == plans[1]


BAD = rs.DriverResources(
    pools={
        "a": rs.Pool(devices=[{"name": "Not A Label"}, {"name": "d", "attributes": {"x": {}}}]),
        "b": rs.Pool(devices=[{"name": "d"}], all_nodes=True),
    }
)


def test_validate_returns_every_problem_without_raising() -> None:
    problems = rs.validate(BAD, driver="gpu.example.com", node="n1")
    with pytest.raises(rs.ValidationError) as raised:
        rs.start_controller(
            None,
            driver="gpu.example.com",
            owner=rs.Owner(api_version="v1", kind="Node", name="n1"),
            resources=BAD,
        )
    assert problems == raised.value.errors
    # A Node owner's pools are node-local: the controller's own check is there.
    assert any(p.startswith('pools["b"]: a Node owner publishes only node-local') for p in problems)
    problems = rs.validate(BAD, driver="gpu.example.com", all_nodes=True)
    assert any(p.startswith('pools["a"].devices[0].name') for p in problems), problems
    assert any(p.startswith('pools["a"].devices[1].attributes') for p in problems), problems
    with pytest.raises(rs.ValidationError) as raised:
        rs.plan(BAD, driver="gpu.example.com", all_nodes=True)
    assert raised.value.errors == problems


def test_a_pool_without_a_node_selection_is_a_problem_and_one_way_at_most() -> None:
    pools = rs.DriverResources(pools={"p": rs.Pool(devices=[{"name": "d"}])})
    (problem,) = rs.validate(pools, driver="gpu.example.com")
    assert problem.startswith('pools["p"]'), problem
    [published] = rs.plan(pools, driver="gpu.example.com", all_nodes=True)
    assert published["spec"]["allNodes"] is True
    with pytest.raises(TypeError, match="at most one"):
        rs.validate(pools, driver="gpu.example.com", node="n1", all_nodes=True)
