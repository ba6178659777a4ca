"""``non_plain``: which device items the API must convert before the core reads them."""

from __future__ import annotations

import datetime
import enum
from collections import OrderedDict
from types import ModuleType
from typing import Any

from kubernetes.client import V1Device


class Flag(enum.IntEnum):
    ON = 1


class Label(str):
    pass


def nested(levels: int) -> Any:
    """``levels`` lists, one inside the other, around a number."""
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return value


def test_only_exact_json_shaped_items_are_plain(core: ModuleType) -> None:
    plain = [
        {"name": "a", "attributes": {"x": {"int": 1}, "y": {"bool": True}}},
        {"name": "b", "capacity": {"m": {"value": "1Gi"}}, "n": None, "f": 1.5},
        "a string",
        nested(core.MAX_PLAIN_DEPTH),  # the deepest list sits at depth MAX_PLAIN_DEPTH - 1
    ]
    converted = [
        OrderedDict(name="c"),
        {"name": "d", "attributes": {1: {"int": 1}}},
        {"name": "e", "taints": ({"key": "k"},)},
        {"name": "f", "attributes": {"x": {"int": Flag.ON}}},
        {"name": "g", "attributes": {"x": {"string": Label("s")}}},
        {"name": "h", "taints": [{"timeAdded": datetime.datetime(2026, 1, 1)}]},
        V1Device(name="i"),
        nested(core.MAX_PLAIN_DEPTH + 1),
    ]
    items = [*plain, *converted]
    assert core.non_plain(items) == list(range(len(plain), len(items)))
    assert core.non_plain([]) == []
