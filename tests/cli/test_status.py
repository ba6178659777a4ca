"""`status`: what a scheduler would make of each pool, from slice records."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from resourceslice._backend import core
from resourceslice.cli import status as cli_status


@dataclass(frozen=True)
class Rec:
    name: str
    pool: str
    generation: int
    resource_slice_count: int
    device_names: list[str] = field(default_factory=list)
    node_name: str | None = "n1"


def test_complete_pool_with_obsolete_leftovers_is_ok() -> None:
    records = [
        Rec("a-0", "p", 2, 2, ["d0", "d1"]),
        Rec("a-1", "p", 2, 2, ["d2"]),
        Rec("old", "p", 1, 1, ["d0"]),
    ]
    (status,) = cli_status.pool_statuses(records)
    assert (status.generation, status.seen, status.expected, status.devices) == (2, 2, 2, 3)
    assert status.ok
    assert status.state == "ok (1 obsolete slice)"


def test_missing_slice_is_incomplete() -> None:
    (status,) = cli_status.pool_statuses([Rec("a-0", "p", 3, 3), Rec("a-2", "p", 3, 3)])
    assert not status.ok
    assert status.problems == ["incomplete: 1 of 3 slices missing"]


def test_disagreeing_counts_and_duplicate_devices_are_inconsistent() -> None:
    records = [
        Rec("a-0", "p", 1, 2, ["d0", "d1", "d2", "d3", "d4"]),
        Rec("a-1", "p", 1, 3, ["d0", "d1", "d2", "d3", "d5"]),
    ]
    (status,) = cli_status.pool_statuses(records)
    assert status.problems == [
        "slices disagree on resourceSliceCount (2, 3)",
        "incomplete: 1 of 3 slices missing",
        "4 devices in more than one slice: d0, d1, d2, …",
    ]


def test_more_slices_than_count() -> None:
    (status,) = cli_status.pool_statuses([Rec("a", "p", 1, 1), Rec("b", "p", 1, 1)])
    assert status.problems == ["2 slices for resourceSliceCount 1"]


def test_table_columns_and_order() -> None:
    records = [
        Rec("z-0", "zeta", 1, 1, ["x"], node_name=None),
        Rec("a-0", "alpha", 4, 2, ["a", "b"]),
    ]
    lines = cli_status.status_table(cli_status.pool_statuses(records)).splitlines()
    assert [line.split()[:5] for line in lines] == [
        ["POOL", "NODE", "GENERATION", "SLICES", "DEVICES"],
        ["alpha", "n1", "4", "1/2", "2"],
        ["zeta", "-", "1", "1/1", "1"],
    ]
    assert lines[1].endswith("incomplete: 1 of 2 slices missing")
    assert lines[2].endswith("ok")


def slice_object(name: str, pool: str, generation: int, count: int, devices: int) -> Any:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": "7"},
        "spec": {
            "driver": "gpu.example.com",
            "nodeName": "n1",
            "pool": {"name": pool, "generation": generation, "resourceSliceCount": count},
            "devices": [{"name": f"{name}-d{i}"} for i in range(devices)],
        },
    }


def test_status_of_a_recorded_list() -> None:
    """The list JSON as the apiserver returns it, decoded by the core as `status` does."""
    listing = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSliceList",
        "metadata": {"resourceVersion": "42"},
        "items": [
            slice_object("s0", "good", 1, 2, 3),
            slice_object("s1", "good", 1, 2, 1),
            slice_object("s2", "bad", 5, 2, 2),
        ],
    }
    _, records = core.decode_list(json.dumps(listing).encode())
    statuses = cli_status.pool_statuses(records)
    assert [(s.pool, s.seen, s.expected, s.devices, s.ok) for s in statuses] == [
        ("bad", 1, 2, 2, False),
        ("good", 2, 2, 4, True),
    ]
