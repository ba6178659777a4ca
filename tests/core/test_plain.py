"""``non_plain``: which device items the API must convert before the core reads them."""

from __future__ import annotations

import datetime
import enum
from collections import OrderedDict
from types import ModuleType
from typing import Any
from unittest.mock import patch

from hypothesis import given, settings
from hypothesis import strategies as st
from kubernetes.client import V1Device

import resourceslice as rs
from resourceslice import _core, _plain, _pycore

DRIVER = "gpu.example.com"
_TIME = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)


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


def _with(device: Any) -> dict[str, Any]:
    return {
        "p": {
            "devices": [{"name": "a", "attributes": {"x": {"int": 1}}}, device],
            "slices": None,
            "nodeSelector": None,
            "allNodes": True,
            "nodeName": None,
            "generation": 0,
        }
    }


def test_plain_only_answers_none_exactly_when_an_item_needs_converting(
    core: ModuleType,
) -> None:
    """``prepare_desired(plain_only=True)``: ``(None, None)`` when ``non_plain`` would convert
    a device, else what the call without it gives (the API's one-read path)."""
    plain = [
        {"name": "b", "capacity": {"m": {"value": "1Gi"}}, "f": 1.5},
        {"name": "Bad_Name"},  # plain but invalid: the errors come back as they are
        "a string",
        nested(core.MAX_PLAIN_DEPTH - 2),  # a device sits at depth 2 from its pool
    ]
    converted = [
        OrderedDict(name="c"),
        {"name": "d", "attributes": {1: {"int": 1}}},
        {"name": "e", "taints": ({"key": "k"},)},
        {"name": "f", "attributes": {"x": {"int": Flag.ON}}},
        {"name": "g", "attributes": {"x": {"string": Label("s")}}},
        V1Device(name="i"),
        nested(core.MAX_PLAIN_DEPTH - 1),
    ]
    for device in plain:
        pools = _with(device)
        desired, errors = core.prepare_desired("d.example.com", pools, 1 << 20, plain_only=True)
        expected = core.prepare_desired("d.example.com", pools, 1 << 20)
        assert errors == expected[1]
        assert (desired is None) == (expected[0] is None)
    for device in converted:
        assert core.prepare_desired("d.example.com", _with(device), 1 << 20, plain_only=True) == (
            None,
            None,
        ), device
    # Outside the devices too: the driver, a pool's name, a pool's own members.
    assert core.prepare_desired(Label("d.example.com"), _with({}), 1 << 20, True) == (None, None)
    assert core.prepare_desired("d.example.com", {Label("p"): _with({})["p"]}, 1 << 20, True) == (
        None,
        None,
    )
    pools = _with({"name": "b"})
    pools["p"]["generation"] = Flag.ON
    assert core.prepare_desired("d.example.com", pools, 1 << 20, True) == (None, None)


def test_plain_only_meets_the_devices_of_a_refused_pool(core: ModuleType) -> None:
    """A pool with both ``devices`` and ``slices`` is refused, and its devices are still
    read: one that needs converting makes the answer ``(None, None)``, as ``non_plain`` would
    have converted it first."""
    pools = _with(V1Device(name="i"))
    pools["p"]["slices"] = [
        {
            "devices": [{"name": "s"}],
            "sharedCounters": None,
            "perDeviceNodeSelection": False,
            "partitionTypeAttribute": None,
            "skipNodeOperations": None,
        }
    ]
    assert core.prepare_desired("d.example.com", pools, 1 << 20, True) == (None, None)
    pools["p"]["devices"][1] = {"name": "i"}
    desired, errors = core.prepare_desired("d.example.com", pools, 1 << 20, True)
    assert desired is None
    assert errors == core.prepare_desired("d.example.com", pools, 1 << 20)[1] != []


_api_device = st.sampled_from(
    [
        {"name": "a", "attributes": {"x": {"int": 1}}},
        {"name": "b", "capacity": {"m": {"value": "1Gi"}}},
        {"name": "Bad_Name"},
        {"name": "c", "attributes": {"x": {"int": Flag.ON}}},
        {"name": "d", "taints": ({"key": "k", "effect": "NoSchedule"},)},
        {"name": "e", "taints": [{"key": "k", "effect": "NoSchedule", "timeAdded": _TIME}]},
        OrderedDict(name="f"),
        V1Device(name="g"),
        {"name": "h", "attributes": {"x": {"string": object()}}},
        nested(40),
    ]
)


@settings(max_examples=150, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["p", "q"]),
        st.tuples(st.lists(_api_device, max_size=4), st.booleans(), st.booleans()),
        max_size=2,
    ),
    st.sampled_from([None, "node-1"]),
)
def test_the_api_reads_devices_once_with_the_same_outcome(
    pools: dict[str, tuple[list[Any], bool, bool]], node_name: str | None
) -> None:
    """``_plain.prepare`` (devices read once, converted only when one needs it) gives what
    converting first gave: the same errors in the same order, or an equal desired state."""
    resources = rs.DriverResources(
        pools={
            name: rs.Pool(devices=devices, all_nodes=True)
            if flat
            else rs.Pool(
                slices=[rs.Slice(devices=devices, per_device_node_selection=per_device)],
                all_nodes=not per_device,
            )
            for name, (devices, flat, per_device) in pools.items()
        }
    )
    for core in (_pycore, _core):
        with patch.object(_plain, "core", core):
            new = _plain.prepare(DRIVER, resources, node_name, 1 << 20)
            converted, errors = _plain.to_plain_pools(resources, node_name)
            errors += _plain._scope_errors(converted, node_name, None)
            old = (None, errors) if errors else core.prepare_desired(DRIVER, converted, 1 << 20)
        assert new[1] == old[1]
        assert (new[0] is None) == (old[0] is None)
        if new[0] is not None and old[0] is not None:
            assert new[0].changed_pools(old[0]) == []
