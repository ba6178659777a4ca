"""Pool files are data: hostile ones get a ValidationError, within a time and memory budget,
never code run, a crash or gigabytes (issue 23, item 2)."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

import resourceslice as rs
from resourceslice import _poolfile
from resourceslice._names import BAD_POOL_NAME, MAX_POOL_NAME_LENGTH
from resourceslice.cli.common import UserError
from resourceslice.cli.common import load as cli_load


def load(tmp_path: Path, text: str, name: str = "pools.yaml") -> rs.DriverResources:
    path = tmp_path / name
    path.write_text(text)
    return rs.load_resources(path, node="n1")


def template(name: str, **foreach: Any) -> str:
    """A pool file of one ``foreach`` entry whose device is named ``name``."""
    entry = {"foreach": foreach or {"i": 3}, "device": {"name": name}}
    return yaml.safe_dump({"pools": {"p": {"devices": [entry]}}})


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("d-{i:{j.__class__.__mro__}}", "{i:{j.__class__.__mro__}}: the format spec must be plain"),
        ("d-{i:{zzz}}", "{i:{zzz}}: the format spec must be plain"),
        ("d-{i:>1000000000}", "{i:>1000000000}: the format spec must be plain"),
        ("d-{i:.65f}", "{i:.65f}: the format spec must be plain"),
        ("d-{i!r}", "{i!r}: only {name} or {name:spec}, no !conversion"),
        ("d-{i.real}", "unknown placeholder {i.real} (foreach defines i)"),
        ("d-{i[0]}", "unknown placeholder {i[0]} (foreach defines i)"),
        ("d-{i:c}", "OverflowError"),
    ],
)
def test_a_template_field_that_is_not_plain_is_refused(
    tmp_path: Path, name: str, problem: str
) -> None:
    foreach = {"i": [10**30]} if problem == "OverflowError" else {"i": 3}
    with pytest.raises(rs.ValidationError) as info:
        load(tmp_path, template(name, **foreach))
    where = 'pools["p"].devices[0].device'
    if problem == "OverflowError":
        assert info.value.errors[0].startswith(f"{where}: ")
    else:
        assert info.value.errors == [f'{where}["name"]: {problem}' + _tail(problem)]


def _tail(problem: str) -> str:
    if "must be plain" in problem:
        width = _poolfile.MAX_FORMAT_WIDTH
        return f" (no nested fields), with a width and precision of at most {width}"
    return ""


def test_plain_fields_with_bounded_specs_are_filled(tmp_path: Path) -> None:
    resources = load(tmp_path, template("d-{i:03d}-{i:>4}-{i:x}", i=[10, 11]))
    assert [d["name"] for d in resources.pools["p"].devices or []] == [
        "d-010-  10-a",
        "d-011-  11-b",
    ]


def test_an_expansion_past_the_limit_is_refused_before_it_is_made(tmp_path: Path) -> None:
    huge = template("d-{i}-{j}", i=10**12, j=10**12)
    with pytest.raises(rs.ValidationError) as info:
        load(tmp_path, huge)
    assert info.value.errors[0].startswith(
        f'pools["p"].devices[0]: makes {10**24} devices of about '
    )
    # An empty axis makes no devices, however big the others: nothing is made for them either
    # (itertools.product would first turn each into a tuple: MemoryError, or gigabytes).
    assert load(tmp_path, template("d-{i}", i=10**12, j=[])).pools["p"].devices == []
    # One count past what len() of a range can hold (found by the generated files).
    with pytest.raises(rs.ValidationError) as info:
        load(tmp_path, template("d-{i}", i=2**63))
    assert info.value.errors[0].startswith(f'pools["p"].devices[0]: makes {2**63} devices of ')
    # Few devices, each big: the size counts, not only the number.
    big = yaml.safe_dump(
        {
            "pools": {
                "p": {
                    "devices": [
                        {
                            "foreach": {"i": 90_000},
                            "device": {
                                "name": "d-{i}",
                                "attributes": {"a": {"string": "x" * 1000}},
                            },
                        }
                    ]
                }
            }
        }
    )
    with pytest.raises(rs.ValidationError, match="devices of about"):
        load(tmp_path, big)
    # The budget is the file's: two templates under the limit each, over it together.
    half = '[{foreach: {i: 60000}, device: {name: "d-{i}"}}]'
    two = f"pools:\n  p: {{devices: {half}}}\n  q: {{devices: {half}}}\n"
    with pytest.raises(rs.ValidationError) as info:
        load(tmp_path, two)
    assert [e.split(":")[0] for e in info.value.errors] == ['pools["q"].devices[0]']


#: The most digits int() reads: its binary, with a "_" every four, is 17,856 characters.
BIG = "9" * 4300


def made(value: Any) -> int:
    """The characters of the strings and numbers in ``value``: what writing it out makes. An
    object that every device shares (a foreach value that is a whole field) counts in each."""
    total, stack = 0, [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack += [*item.keys(), *item.values()]
        elif isinstance(item, list):
            stack += item
        elif isinstance(item, (str, int, float)):
            total += len(str(item))
    return total


@pytest.mark.parametrize(
    ("values", "text"),
    [
        pytest.param(BIG, "{v:_b}", id="an int in binary"),
        pytest.param(f"-{BIG}", "{v:#,}", id="an int grouped"),
        pytest.param(f"0x{'f' * 20_000}", "{v:_x}-{v:_b}", id="a hex int past int()'s digits"),
        pytest.param(f"[{BIG}, -{BIG}]", "x{v}", id="a list of ints in a string"),
        pytest.param(f"[{BIG}, -{BIG}]", "{v}", id="a list of ints as the value"),
        pytest.param("-1.7976931348623157e+308", "{v:,.64f}", id="a float"),
        pytest.param(f"{{k: [{BIG}], j: '{'x' * 1000}'}}", "{v}{v}", id="a mapping"),
    ],
)
def test_the_expansion_budget_bounds_what_is_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, values: str, text: str
) -> None:
    # Each value was counted 16 characters whatever its size, and each field 80 (fault 6 of
    # the review): 20 devices like the first made 357,610 characters and were charged 4,800;
    # like the hex one, 2.5 million charged 6,540, so that 100,000 of them, within the
    # budget, made 12.5 billion characters.
    device = f'{{name: "d-{{i}}", attributes: {{a: {{string: "{text}"}}}}}}'
    file = f"pools: {{p: {{devices: [{{foreach: {{i: 20, v: [{values}]}}, device: {device}}}]}}}}"
    devices = load(tmp_path, file).pools["p"].devices or []
    assert len(devices) == 20
    size = made(devices)
    assert size > 20 * 400  # (the case is what it says: big values)
    # With a budget of one character less than that, the file is refused, before it is made.
    monkeypatch.setattr(_poolfile, "MAX_EXPANDED_SIZE", size - 1)
    with pytest.raises(rs.ValidationError) as info:
        load(tmp_path, file)
    [error] = info.value.errors
    assert error.startswith('pools["p"].devices[0]: makes 20 devices of about ')


#: Format specs allowed in a template, with each part that can lengthen the text.
SPECS = [
    f"{fill}{sign}{alt}{zero}{width}{grouping}{precision}{kind}"
    for fill in ("", "*^", "%^")
    for sign in ("", "+")
    for alt in ("", "#")
    for zero in ("", "0")
    for width in ("", "64")
    for grouping in ("", "_", ",")
    for precision in ("", ".0", ".64")
    for kind in ["", *"bcdeEfFgGnosxX%"]
]


@pytest.mark.parametrize(
    "value",
    [
        0,
        -1,
        True,
        False,
        99_999,
        -(2**17),
        int(BIG),
        -int(BIG),
        16**20_000 - 1,  # past the digits str() writes: YAML reads it as 0xfff...
        0.0,
        -0.96,
        9.6,
        1023.9,
        0.000123456789,
        1e-300,
        5e-324,
        1e63,
        -1.7976931348623157e308,
        float("inf"),
        float("nan"),
        "",
        "é" * 10,
        "x" * 100,
        None,
        [int(BIG), "a\x00\U0001f600"],
        {"k": None, 1: [2.5]},
        datetime.date(2020, 1, 1),
        datetime.datetime(2020, 1, 1, tzinfo=datetime.timezone.utc),
    ],
    ids=lambda value: type(value).__name__,
)
def test_a_field_is_charged_no_less_than_it_makes(value: Any) -> None:
    charged = _poolfile._field_size(value)
    assert charged >= _poolfile._weight(value)
    for spec in SPECS:
        try:
            text = format(value, spec)
        except (ValueError, TypeError, OverflowError):  # a spec that does not suit the value
            continue
        assert len(text) <= charged, spec


def test_a_small_file_of_big_values_is_refused_at_the_real_budget(tmp_path: Path) -> None:
    # 4.4 KB that makes 71 million characters, more than the budget: refused, not made.
    device = '{name: "d-{i}", attributes: {a: {string: "{v:_b}"}}}'
    file = f"pools: {{p: {{devices: [{{foreach: {{i: 4000, v: [{BIG}]}}, device: {device}}}]}}}}"
    with pytest.raises(rs.ValidationError) as info:
        load(tmp_path, file)
    [error] = info.value.errors
    charged = int(error.split(" devices of about ")[1].split()[0])
    assert charged >= 4000 * len(f"{int(BIG):_b}") > _poolfile.MAX_EXPANDED_SIZE


def test_a_pool_name_too_long_is_refused_before_its_templates_expand(tmp_path: Path) -> None:
    # Found by the generated files: each error about one of a pool's devices starts with the
    # pool's name, so a 100,000-character name on 100,000 badly named devices made 10 GB of
    # error text in the command's load (one in about 30 runs of the generated files).
    long_name = "k" * 100_000
    entry = {"foreach": {"i": 300}, "device": {"name": "Bad_{i}"}}
    text = yaml.safe_dump({"pools": {long_name: {"devices": [entry]}, "p": {"devices": []}}})
    problem = f'pools["{long_name}"]: {BAD_POOL_NAME}'
    with pytest.raises(rs.ValidationError) as info:
        load(tmp_path, text)
    assert info.value.errors == [problem]
    # The command's load (`publish`, its reload, `plan`, `diff`) reports that one problem,
    # not one per device.
    path = tmp_path / "pools.yaml"
    with pytest.raises(UserError) as command:
        cli_load(path, "fuzz.example.com", _poolfile.Selection(node="n1"))
    assert str(command.value) == f"{path}: invalid:\n  {problem}"
    # The longest name allowed gets as far as the core, which checks the rest of it.
    longest = "k" * MAX_POOL_NAME_LENGTH
    text = yaml.safe_dump({"pools": {longest: {"devices": [entry]}}})
    assert len(load(tmp_path, text).pools[longest].devices or []) == 300


@pytest.mark.parametrize(
    ("name", "text", "problem"),
    [
        ("pools.yaml", "pools: {p: {generation: " + "1" * 5000 + "}}", "Exceeds the limit"),
        ("pools.json", '{"pools": {"p": {"generation": ' + "1" * 5000 + "}}}", "Exceeds the limit"),
        ("pools.yaml", "pools: {p: {generation: 2020-13-45}}", "month must be in 1..12"),
    ],
)
def test_a_value_python_will_not_make_is_refused(
    tmp_path: Path, name: str, text: str, problem: str
) -> None:
    # Each raised a ValueError from the parser, which nothing caught: publish crashed.
    with pytest.raises(rs.ValidationError) as info:
        load(tmp_path, text, name)
    [error] = info.value.errors
    assert error.startswith("a value that cannot be read: ") and problem in error


def bomb(levels: int) -> str:
    """The billion laughs: each level nine aliases of the one before."""
    lines = ['l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for n in range(1, levels + 1):
        lines.append(f"l{n}: &l{n} [" + ",".join([f"*l{n - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (bomb(9), "line 2, column 10: YAML aliases (*name) are not allowed in a pool file"),
        ("pools: &a {p: {devices: [*a]}}\n", "line 1, column 26: YAML aliases"),
        # Refused from the parser's events, before the composer recurses (PyYAML 6.0 with its
        # libyaml has no depth limit, and the interpreter crashed on this one), or by a newer
        # libyaml's own limit, which its scanner meets first while looking ahead.
        (
            "[" * 100_000 + "]" * 100_000,
            ("nested more than 64 levels deep", "exceeded maximum nesting depth"),
        ),
        ("pools: " + "[" * 70 + "]" * 70, f"nested more than {_poolfile.MAX_DEPTH} levels deep"),
    ],
)
def test_yaml_aliases_and_deep_nesting_are_refused(
    tmp_path: Path, text: str, problem: str | tuple[str, ...]
) -> None:
    with pytest.raises(rs.ValidationError) as info:
        load(tmp_path, text)
    expected = (problem,) if isinstance(problem, str) else problem
    assert any(part in info.value.errors[0] for part in expected), info.value.errors


def test_deep_json_is_refused(tmp_path: Path) -> None:
    with pytest.raises(rs.ValidationError) as info:
        load(tmp_path, "[" * 100_000 + "]" * 100_000, "pools.json")
    assert info.value.errors == [f"nested more than {_poolfile.MAX_DEPTH} levels deep"]
