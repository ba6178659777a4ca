"""Quantities against vectors printed by Go's own resource.Quantity."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any

from core_helpers import DRIVER, MAX_BYTES, apply, pool

from resourceslice._pycore.quantity import MAX_MANTISSA_BITS, parse_quantity

VECTORS: list[dict[str, Any]] = json.loads(
    (Path(__file__).parent.parent / "vectors" / "quantities.json").read_text()
)


def _refused_by_us(v: dict[str, Any]) -> bool:
    """Go accepts it, but its mantissa is over the core's 96-bit bound (docs/core.md §2)."""
    mantissa = v["value"].split("e")[0]
    return v["value"] != "0" and abs(int(mantissa)) >= 1 << MAX_MANTISSA_BITS


def test_vectors_cover_the_shapes() -> None:
    assert len(VECTORS) > 500
    assert sum(v["canonical"] is None for v in VECTORS) > 20
    assert any(_refused_by_us(v) for v in VECTORS if v["canonical"] is not None)


def test_python_parser_matches_go() -> None:
    for v in VECTORS:
        q = parse_quantity(v["input"])
        if v["canonical"] is None or _refused_by_us(v):
            assert q is None, v
        else:
            assert q is not None, v
            assert (q.canonical, q.key) == (v["canonical"], v["value"]), v


def _quoted(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _capacity_device(i: int, value: str) -> dict[str, Any]:
    return {"name": f"q{i}", "capacity": {"c": {"value": value}}}


def test_core_canonical_strings(core: ModuleType) -> None:
    valid = [v for v in VECTORS if v["canonical"] is not None and not _refused_by_us(v)]
    desired, errors = core.prepare_desired(
        DRIVER,
        {"p": pool([_capacity_device(i, v["input"]) for i, v in enumerate(valid)])},
        MAX_BYTES,
    )
    assert errors == []
    plan = core.plan_pool(desired, "p", [], None, None)
    got = {}
    for body in plan.creates:
        for device in json.loads(body)["spec"]["devices"]:
            got[device["name"]] = device["capacity"]["c"]["value"]
    assert got == {f"q{i}": v["canonical"] for i, v in enumerate(valid)}


def test_core_refuses_what_go_refuses(core: ModuleType) -> None:
    refused = [v for v in VECTORS if v["canonical"] is None or _refused_by_us(v)]
    devices = [_capacity_device(i, v["input"]) for i, v in enumerate(refused)]
    _, errors = core.prepare_desired(DRIVER, {"p": pool(devices)}, MAX_BYTES)
    assert errors == [
        f'pools["p"].devices[{i}].capacity["c"].value: invalid quantity {_quoted(v["input"])}'
        for i, v in enumerate(refused)
    ]


def test_core_compares_quantities_by_value(core: ModuleType) -> None:
    """A stored value written as the value key (same value, other spelling) is unchanged."""
    valid = [v for v in VECTORS if v["canonical"] is not None and not _refused_by_us(v)][:120]
    devices = [_capacity_device(i, v["input"]) for i, v in enumerate(valid)]
    desired, _ = core.prepare_desired(DRIVER, {"p": pool(devices)}, MAX_BYTES)
    records = apply(core, core.plan_pool(desired, "p", [], None, None), [])
    assert len(records) == 1
    (record,) = records
    respelled = json.loads(core.plan_pool(desired, "p", [], None, None).creates[0])
    for device, v in zip(respelled["spec"]["devices"], valid):
        device["capacity"]["c"]["value"] = v["value"]
    respelled["metadata"] = {"name": record.name, "uid": record.uid, "resourceVersion": "9"}
    stored = core.decode_slice(json.dumps(respelled).encode())
    plan = core.plan_pool(desired, "p", [stored], None, None)
    assert (plan.updates, plan.creates, plan.deletes) == ([], [], [])
    # A different value is a change.
    respelled["spec"]["devices"][0]["capacity"]["c"]["value"] = "12345"
    changed = core.decode_slice(json.dumps(respelled).encode())
    assert len(core.plan_pool(desired, "p", [changed], None, None).updates) == 1
