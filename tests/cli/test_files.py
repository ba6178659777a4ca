"""FILE: YAML/JSON reading, the compact `foreach` form, {node}, and errors a user can act on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import resourceslice as rs
from resourceslice import _poolfile, cli
from resourceslice.cli import command, common

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def parse(document: Any, **selection: Any) -> tuple[dict[str, Any], list[str]]:
    resources, errors = _poolfile.parse_resources(document, _poolfile.Selection(**selection))
    return dict(resources.pools), errors


def run_plan(path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str]:
    code = cli.main(["plan", str(path), "--driver", "gpu.example.com", *extra])
    return code, capsys.readouterr().err


def test_examples_parse_to_the_documented_sizes() -> None:
    sizes = {}
    for name in ("gpu-node.yaml", "fabric-pool.yaml", "fpga-slices.json"):
        pools, errors = parse(_poolfile.read_document(EXAMPLES / name), node="n1")
        assert errors == []
        for pool_name, pool in pools.items():
            devices = pool.devices or [d for s in pool.slices for d in s.devices]
            sizes[pool_name] = len(devices)
    assert sizes == {"n1": 288, "fabric-a": 4800, "n1-fpga": 4}


def test_foreach_expands_the_product_in_order_and_keeps_int_types() -> None:
    template = {
        "foreach": {"leaf": 2, "side": ["a", "b"]},
        "device": {
            "name": "l{leaf:02d}-{side}",
            "attributes": {"leaf": {"int": "{leaf}"}, "label": {"string": "{side}{leaf}"}},
        },
    }
    pools, errors = parse({"pools": {"p": {"devices": [{"name": "first"}, template]}}})
    assert errors == []
    devices = pools["p"].devices
    assert [d["name"] for d in devices] == ["first", "l00-a", "l00-b", "l01-a", "l01-b"]
    assert devices[3]["attributes"] == {"leaf": {"int": 1}, "label": {"string": "a1"}}


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ({"foreach": {"i": 2}, "device": {"name": "d-{j}"}}, "unknown placeholder {j}"),
        ({"foreach": {"i": -1}, "device": {"name": "d"}}, "must be a count"),
        ({"foreach": {}, "device": {"name": "d"}}, "foreach: must map variable names"),
        ({"foreach": {"i": 1}}, "device: must be an object"),
        ({"foreach": {"i": 1}, "device": {"name": "d-{i"}}, "expected '}'"),
        ({"foreach": {"i": ["x"]}, "device": {"name": "d-{i:03d}"}}, "Unknown format code"),
        ({"foreach": {"i": 1}, "device": {}, "count": 3}, "unknown field 'count'"),
    ],
)
def test_foreach_problems_name_the_entry(entry: dict[str, Any], problem: str) -> None:
    _, errors = parse({"pools": {"p": {"devices": [entry]}}})
    assert len(errors) >= 1
    assert errors[0].startswith('pools["p"].devices[0]')
    assert problem in errors[0]


def test_node_placeholder_needs_node() -> None:
    pools, errors = parse({"pools": {"{node}-x": {"devices": []}}}, node="n7")
    assert (list(pools), errors) == (["n7-x"], [])
    _, errors = parse({"pools": {"{node}": {"devices": []}}})
    assert errors == ['pools["{node}"]: {node} in a pool name needs --node']


def test_command_line_selection_is_the_default_a_pool_can_override() -> None:
    own = {"nodeSelectorTerms": [{"matchFields": [{"key": "x", "operator": "In"}]}]}
    document = {"pools": {"plain": {"devices": []}, "own": {"devices": [], "nodeSelector": own}}}
    pools, _ = parse(document, all_nodes=True)
    assert (pools["plain"].all_nodes, pools["plain"].node_selector) == (True, None)
    assert (pools["own"].all_nodes, pools["own"].node_selector) == (False, own)


@pytest.mark.parametrize(
    ("document", "problem"),
    [
        ([1, 2], "the top level must be an object with a `pools` mapping"),
        ({"pools": {}, "driver": "x"}, "the top level: unknown field 'driver'"),
        ({"pools": {"p": {"device": []}}}, "pools[\"p\"]: unknown field 'device'"),
        ({"pools": {"p": []}}, 'pools["p"]: must be an object with devices or slices'),
        ({"pools": {"p": {"devices": {}}}}, 'pools["p"].devices: must be a list'),
        ({"pools": {"p": {"slices": [{"devs": []}]}}}, 'pools["p"].slices[0]: unknown field'),
        ({"pools": {"p": {"devices": [], "allNodes": "yes"}}}, "allNodes: must be a boolean"),
        ({"pools": {"p": {"devices": [], "generation": 1.5}}}, "generation: must be an integer"),
    ],
)
def test_shape_problems(document: Any, problem: str) -> None:
    _, errors = parse(document)
    assert any(problem in e for e in errors), errors


@pytest.mark.parametrize(
    ("name", "text", "problem"),
    [
        ("bad.yaml", "pools:\n  p:\n    devices: [\n", "line 4, column 1:"),
        ("bad.json", '{"pools": {"p": }}', "line 1, column 17: Expecting value"),
        ("shape.yaml", "pools:\n  p:\n    device: []\n", "unknown field 'device'"),
    ],
)
def test_bad_file_is_one_message_with_path_and_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, text: str, problem: str
) -> None:
    path = tmp_path / name
    path.write_text(text)
    code, err = run_plan(path, capsys)
    assert code == common.EXIT_USAGE
    assert err.startswith(f"resourceslice: {path}: ")
    assert problem in err
    assert "Traceback" not in err


def test_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run_plan(tmp_path / "nope.yaml", capsys)
    assert (code, err) == (
        common.EXIT_USAGE,
        f"resourceslice: {tmp_path / 'nope.yaml'}: No such file or directory\n",
    )


@pytest.mark.parametrize(
    ("text", "expressions"),
    [
        ("fabric=a", [{"key": "fabric", "operator": "In", "values": ["a"]}]),
        (
            "zone==z1, rack!=r9",
            [
                {"key": "zone", "operator": "In", "values": ["z1"]},
                {"key": "rack", "operator": "NotIn", "values": ["r9"]},
            ],
        ),
        (
            "example.com/gpu,!spot",
            [
                {"key": "example.com/gpu", "operator": "Exists"},
                {"key": "spot", "operator": "DoesNotExist"},
            ],
        ),
    ],
)
def test_node_selector_syntax(text: str, expressions: list[dict[str, Any]]) -> None:
    assert common.parse_node_selector(text) == {
        "nodeSelectorTerms": [{"matchExpressions": expressions}]
    }


@pytest.mark.parametrize("text", ["", "a=b,", "!a=b", "a b"])
def test_node_selector_errors(text: str) -> None:
    with pytest.raises(common.UserError, match="--node-selector: cannot parse"):
        common.parse_node_selector(text)


def test_json_and_yaml_give_the_same_resources(tmp_path: Path) -> None:
    document = _poolfile.read_document(EXAMPLES / "fpga-slices.json")
    as_yaml = tmp_path / "same.yaml"
    as_yaml.write_text(json.dumps(document, indent=1).replace('"', "'"))
    assert parse(_poolfile.read_document(as_yaml), node="n") == parse(document, node="n")


# -- resourceslice.load_resources: the same parser, for drivers -------------------------------

#: Each example with the selection its header comment gives it.
EXAMPLE_ARGS = {
    "gpu-node.yaml": ["--node", "n1"],
    "fabric-pool.yaml": ["--node-selector", "fabric=a"],
    "fpga-slices.json": ["--node", "n1"],
}


@pytest.mark.parametrize("name", sorted(EXAMPLE_ARGS))
def test_load_resources_gives_what_plan_publishes(name: str) -> None:
    path = EXAMPLES / name
    args = command.build_parser().parse_args(
        ["plan", str(path), "--driver", "x.example.com", *EXAMPLE_ARGS[name]]
    )
    selection = common.selection_of(args)
    loaded = common.load(path, "x.example.com", selection)
    resources = rs.load_resources(str(path), node=args.node, node_selector=selection.node_selector)
    assert resources == loaded.resources and resources.pools
    # What a driver does with it: the controller takes it as it is.
    owner = rs.Owner("v1", "Node", args.node) if args.node else None
    rs.start_controller(None, driver="x.example.com", owner=owner, resources=resources).stop()


def test_load_resources_selection_keywords(tmp_path: Path) -> None:
    path = tmp_path / "pools.yaml"
    path.write_text("pools:\n  '{node}-local': {devices: [{name: a}]}\n  net: {devices: []}\n")
    resources = rs.load_resources(path, node="n3", all_nodes=True)
    assert list(resources.pools) == ["n3-local", "net"]
    assert resources.pools["net"].all_nodes is True
    with pytest.raises(rs.ValidationError) as raised:
        rs.load_resources(path)
    assert raised.value.errors == ['pools["{node}-local"]: {node} in a pool name needs --node']


@pytest.mark.parametrize(
    ("name", "text", "errors"),
    [
        ("bad.yaml", "pools:\n  p:\n    devices: [\n", ["line 4, column 1: "]),
        ("bad.json", '{"pools": {"p": }}', ["line 1, column 17: Expecting value"]),
        (
            "shape.yaml",
            "pools:\n  p:\n    device: []\n  q: {generation: x, devices: []}\n",
            ["pools[\"p\"]: unknown field 'device'", 'pools["q"].generation: must be an integer'],
        ),
    ],
)
def test_load_resources_lists_every_problem(
    tmp_path: Path, name: str, text: str, errors: list[str]
) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(rs.ValidationError) as raised:
        rs.load_resources(path)
    assert len(raised.value.errors) == len(errors)
    for got, wanted in zip(raised.value.errors, errors):
        assert got.startswith(wanted)


def test_load_resources_of_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        rs.load_resources(tmp_path / "nope.yaml")
