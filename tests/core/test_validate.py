"""Every rule of docs/core.md §3, with its path and message, on both cores."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest
from core_helpers import DRIVER, MAX_BYTES, pool

P = 'pools["p"]'
D = f"{P}.devices[0]"
ONE_TYPE = "must have exactly one of bool, int, string, version, bools, ints, strings, versions"


def _errors(core: ModuleType, pools: dict[str, Any], driver: str = DRIVER) -> list[str]:
    desired, errors = core.prepare_desired(driver, pools, MAX_BYTES)
    assert (desired is None) == bool(errors)
    return list(errors)


def _device_errors(core: ModuleType, **fields: Any) -> list[str]:
    return _errors(core, {"p": pool([{"name": "dev", **fields}])})


def _slice_errors(core: ModuleType, *slices: dict[str, Any]) -> list[str]:
    return _errors(core, {"p": pool(None, slices=list(slices))})


def test_driver(core: ModuleType) -> None:
    msg = "driver: must be a DNS subdomain of at most 63 characters"
    assert _errors(core, {}, driver="Bad_Driver") == [msg]
    assert _errors(core, {}, driver="a" * 64) == [msg]
    assert _errors(core, {}, driver="a" * 63) == []


@pytest.mark.parametrize("name", ["", "UPPER", "a//b", "x" * 254, "-a"])
def test_pool_name(core: ModuleType, name: str) -> None:
    assert _errors(core, {name: pool([])}) == [
        f'pools["{name}"]: pool name must be at most 253 characters of /-separated DNS subdomains'
    ]


def test_pool_shape(core: ModuleType) -> None:
    assert _errors(core, {"p": pool(None)}) == [
        f"{P}: exactly one of devices and slices is required"
    ]
    assert _errors(core, {"p": pool([], slices=[])}) == [
        f"{P}: exactly one of devices and slices is required"
    ]
    assert _errors(core, {"p": pool([], allNodes=True, nodeSelector={"a": 1})}) == [
        f"{P}: at most one of nodeSelector and allNodes"
    ]
    assert _errors(core, {"p": pool([], generation=-1)}) == [
        f"{P}.generation: must not be negative"
    ]
    assert _errors(core, {"p": pool([], generation=1.0)}) == [
        f"{P}.generation: must not be a float"
    ]
    assert _errors(core, {"p": pool([], generation=1 << 63)}) == [
        f"{P}.generation: out of range for a 64-bit integer"
    ]
    assert _errors(core, {"p": [1]}) == [f"{P}: must be an object"]


def test_device_names(core: ModuleType) -> None:
    devices = [{"name": "a"}, {"name": "a"}, {"name": "B"}, 7, {}]
    assert _errors(core, {"p": pool(devices)}) == [
        f'{P}.devices[1].name: duplicate device name "a"',
        f"{P}.devices[2].name: must be a DNS label",
        f"{P}.devices[3]: must be an object",
        f"{P}.devices[4]: name is required",
    ]


def test_attributes(core: ModuleType) -> None:
    attrs = {
        "ok": {"int": 1},
        "both": {"int": 1, "bool": True},
        "none": {},
        "long": {"string": "x" * 65},
        "ver": {"version": "1.02.3"},
        "vers": {"versions": ["1.0.0", "v1"]},
        "9bad": {"bool": True},
        "Bad_Domain/x": {"bool": "yes"},
        "f": {"int": 0.5},
    }
    assert _device_errors(core, attributes=attrs) == [
        f'{D}.attributes["9bad"]: the name must be a C identifier of at most 32 characters',
        f'{D}.attributes["Bad_Domain/x"]: the domain must be a DNS subdomain of at most 63 '
        "characters",
        f'{D}.attributes["Bad_Domain/x"].bool: must be a boolean',
        f'{D}.attributes["both"]: {ONE_TYPE}',
        f'{D}.attributes["f"].int: must not be a float',
        f'{D}.attributes["long"].string: must be at most 64 characters',
        f'{D}.attributes["none"]: {ONE_TYPE}',
        f'{D}.attributes["ver"].version: must be a semantic version (semver 2.0.0)',
        f'{D}.attributes["vers"].versions[1]: must be a semantic version (semver 2.0.0)',
    ]


def test_attributes_and_capacities_at_most_32(core: ModuleType) -> None:
    attrs = {f"a{i}": {"int": i} for i in range(20)}
    caps = {f"c{i}": {"value": "1"} for i in range(13)}
    assert _device_errors(core, attributes=attrs, capacity=caps) == [
        f"{D}: at most 32 attributes and capacities together, got 33"
    ]


def test_capacity(core: ModuleType) -> None:
    caps = {"a": {}, "b": {"value": "1x"}, "c": {"value": 3, "requestPolicy": {"default": "z"}}}
    assert _device_errors(core, capacity=caps) == [
        f'{D}.capacity["a"]: value is required',
        f'{D}.capacity["b"].value: invalid quantity "1x"',
        f'{D}.capacity["c"].requestPolicy.default: invalid quantity "z"',
    ]


def test_taints(core: ModuleType) -> None:
    taints = [
        {"key": "bad key", "value": "-v", "effect": "Sometimes", "timeAdded": "yesterday"},
        {},
    ]
    assert _device_errors(core, taints=taints) == [
        f"{D}.taints[0].effect: must be one of NoSchedule, NoExecute, None",
        f"{D}.taints[0].key: must be a label name",
        f"{D}.taints[0].timeAdded: must be an RFC 3339 time",
        f"{D}.taints[0].value: must be a label value",
        f"{D}.taints[1]: key is required",
        f"{D}.taints[1]: effect is required",
    ]
    many = [{"key": f"k{i}", "effect": "None"} for i in range(17)]
    assert _device_errors(core, taints=many) == [f"{D}.taints: at most 16 taints, got 17"]


def test_binding_conditions(core: ModuleType) -> None:
    assert _device_errors(core, bindingConditions=["a", "b", "c", "d", "e"]) == [
        f"{D}.bindingConditions: at most 4 conditions, got 5"
    ]
    assert _device_errors(core, bindingFailureConditions=["no good"]) == [
        f"{D}.bindingFailureConditions[0]: must be a qualified name"
    ]


def test_per_device_node_selection(core: ModuleType) -> None:
    assert _device_errors(core, nodeName="n") == [
        f"{D}: nodeName, nodeSelector and allNodes are only allowed in a slice with "
        "perDeviceNodeSelection"
    ]
    assert _slice_errors(core, {"devices": [{"name": "a"}], "perDeviceNodeSelection": True}) == [
        f"{P}.slices[0].devices[0]: exactly one of nodeName, nodeSelector, allNodes is required "
        "with perDeviceNodeSelection"
    ]
    assert (
        _slice_errors(
            core, {"devices": [{"name": "a", "nodeName": "n"}], "perDeviceNodeSelection": True}
        )
        == []
    )


def test_counters(core: ModuleType) -> None:
    """Devices consume counter sets that other slices of the pool share."""
    shared = {"sharedCounters": [{"name": "set", "counters": {"mem": {"value": "1Gi"}}}]}
    uses = {
        "name": "a",
        "consumesCounters": [
            {"counterSet": "set", "counters": {"mem": {"value": "1"}, "cpu": {"value": "1"}}},
            {"counterSet": "set", "counters": {"mem": {"value": "1"}}},
            {"counterSet": "other", "counters": {"x": {"value": "1"}}},
        ],
    }
    assert _slice_errors(core, shared, {"devices": [uses]}) == [
        f"{P}.slices[1].devices[0].consumesCounters: at most 2 counter consumptions, got 3",
        f'{P}.slices[1].devices[0].consumesCounters[0].counters["cpu"]: '
        'unknown counter "cpu" in counter set',
        f'{P}.slices[1].devices[0].consumesCounters[1].counterSet: duplicate counter set "set"',
        f'{P}.slices[1].devices[0].consumesCounters[2].counterSet: unknown counter set "other"',
    ]
    assert _slice_errors(core, shared, {**shared, "devices": [{"name": "b"}]}) == [
        f"{P}.slices[1]: a slice has devices or sharedCounters, not both",
        f'{P}.slices[1].sharedCounters[0].name: duplicate counter set name "set"',
    ]
    sets = [{"name": f"s{i}", "counters": {"c": {"value": "1"}}} for i in range(9)]
    assert _slice_errors(core, {"sharedCounters": sets}) == [
        f"{P}.slices[0].sharedCounters: at most 8 counter sets, got 9"
    ]


def test_explicit_slice_device_limits(core: ModuleType) -> None:
    plain = [{"name": f"d{i}"} for i in range(129)]
    assert _slice_errors(core, {"devices": plain}) == [
        f"{P}.slices[0].devices: at most 128 devices in a slice, got 129"
    ]
    tainted = [{"name": f"d{i}", "taints": [{"key": "k", "effect": "None"}]} for i in range(65)]
    assert _slice_errors(core, {"devices": tainted}) == [
        f"{P}.slices[0].devices: at most 64 devices in a slice, got 65"
    ]


def test_types_and_utf8(core: ModuleType) -> None:
    assert _device_errors(core, extra={"x": 1.5, "s": "\udcff", "o": object()}) == [
        f'{D}.extra["o"]: unsupported type object',
        f'{D}.extra["s"]: not valid UTF-8',
        f'{D}.extra["x"]: must not be a float',
    ]


def test_device_too_large(core: ModuleType) -> None:
    desired, errors = core.prepare_desired(
        DRIVER, {"p": pool([{"name": "a", "attributes": {"s": {"string": "x" * 60}}}])}, 4096 + 50
    )
    assert (desired, errors) == (None, [f"{D}: device too large"])


def test_every_problem_is_reported_in_order(core: ModuleType) -> None:
    errors = _errors(core, {"b": pool([{"name": "X"}]), "a": pool([{"name": "Y"}])}, "Bad_")
    assert [e.split(":")[0] for e in errors] == [
        "driver",
        'pools["a"].devices[0].name',
        'pools["b"].devices[0].name',
    ]
