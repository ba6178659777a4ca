"""What the apiserver did not store of what was sent (docs/core.md §6): paths and features."""

from __future__ import annotations

import copy
import json
from types import ModuleType
from typing import Any

from core_helpers import DRIVER
from hypothesis import given, settings
from hypothesis import strategies as st

from resourceslice import _core, _pycore

COUNTERS = [{"name": "gpu-0", "counters": {"mem": {"value": "1Gi"}}}]


def _slice(devices: list[dict[str, Any]], meta: dict[str, Any] | None = None, **spec: Any) -> Any:
    return {
        "kind": "ResourceSlice",
        "metadata": {"name": "00000-x", "uid": "u", "resourceVersion": "1", **(meta or {})},
        "spec": {
            "driver": DRIVER,
            "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
            "allNodes": True,
            **({"devices": devices} if devices else {}),
            **spec,
        },
    }


def _dropped(core: ModuleType, sent: Any, stored: Any) -> tuple[list[str], list[str]]:
    decode = core.decode_slice
    result: tuple[list[str], list[str]] = decode(json.dumps(sent).encode()).dropped_fields(
        decode(json.dumps(stored).encode())
    )
    return result


def _device(**extra: Any) -> dict[str, Any]:
    return {
        "name": "d0",
        "attributes": {"model": {"string": "a"}},
        "capacity": {"memory": {"value": "1Gi"}},
        **extra,
    }


BINDING = {
    "bindingConditions": ["example.com/a"],
    "bindingFailureConditions": ["example.com/b"],
    "bindsToNode": True,
}


def test_the_same_is_no_drop(core: ModuleType) -> None:
    sent = _slice([_device(**BINDING)])
    assert _dropped(core, sent, sent) == ([], [])


def test_additions_are_no_drop(core: ModuleType) -> None:
    """A webhook's label and annotation, the server's taint time and defaults."""
    sent = _slice([_device(taints=[{"key": "k", "effect": "NoSchedule"}])])
    stored = copy.deepcopy(sent)
    stored["metadata"].update(labels={"team": "x"}, annotations={"a": "b"})
    stored["spec"]["devices"][0]["taints"][0]["timeAdded"] = "2026-01-02T03:04:05Z"
    stored["spec"]["devices"][0]["attributes"]["extra"] = {"int": 1}
    assert _dropped(core, sent, stored) == ([], [])


def test_quantities_compare_by_value_everywhere(core: ModuleType) -> None:
    policy = {"default": "1Gi", "validRange": {"min": "1Gi", "step": "512Mi"}}
    allocatable = {"memory": {"mapping": {"deviceMultiplier": "1000m"}}}
    sent = _slice(
        [
            _device(
                capacity={"memory": {"value": "1024Mi", "requestPolicy": policy}},
                consumesCounters=[{"counterSet": "gpu-0", "counters": {"mem": {"value": "1Gi"}}}],
                nodeAllocatableResources=allocatable,
            )
        ],
        sharedCounters=[{"name": "gpu-0", "counters": {"mem": {"value": "1024Mi"}}}],
    )
    stored = copy.deepcopy(sent)
    device = stored["spec"]["devices"][0]
    device["capacity"]["memory"]["value"] = "1Gi"
    device["capacity"]["memory"]["requestPolicy"] = {
        "default": "1024Mi",
        "validRange": {"min": "1073741824", "step": "0.5Gi"},
    }
    device["consumesCounters"][0]["counters"]["mem"]["value"] = "1024Mi"
    device["nodeAllocatableResources"]["memory"]["mapping"]["deviceMultiplier"] = "1"
    stored["spec"]["sharedCounters"][0]["counters"]["mem"]["value"] = "1Gi"
    assert _dropped(core, sent, stored) == ([], [])
    device["capacity"]["memory"]["value"] = "2Gi"
    assert _dropped(core, sent, stored) == (['spec.devices[0].capacity["memory"].value'], [])


def test_dropped_paths_and_features(core: ModuleType) -> None:
    consumes = [
        {"counterSet": "gpu-0", "counters": {"mem": {"value": "1"}}, "compatibilityGroups": ["g"]}
    ]
    sent = _slice(
        [
            _device(
                taints=[{"key": "k", "effect": "NoSchedule"}],
                allowMultipleAllocations=True,
                consumesCounters=consumes,
                **BINDING,
            ),
            _device(name="d1", nodeName="n1"),
        ],
        partitionTypeAttribute="x.com/type",
        skipNodeOperations=["*"],
        perDeviceNodeSelection=True,
    )
    sent["spec"].pop("allNodes")
    stored = copy.deepcopy(sent)
    first, second = stored["spec"]["devices"]
    for key in ("taints", "allowMultipleAllocations", *BINDING):
        del first[key]
    del first["consumesCounters"][0]["compatibilityGroups"]
    del second["nodeName"]
    for key in ("partitionTypeAttribute", "skipNodeOperations"):
        del stored["spec"][key]
    assert _dropped(core, sent, stored) == (
        [
            "spec.devices[0].allowMultipleAllocations",
            "spec.devices[0].bindingConditions",
            "spec.devices[0].bindingFailureConditions",
            "spec.devices[0].bindsToNode",
            "spec.devices[0].consumesCounters[0].compatibilityGroups",
            "spec.devices[0].taints",
            "spec.devices[1].nodeName",
            "spec.partitionTypeAttribute",
            "spec.skipNodeOperations",
        ],
        [
            "DRAConsumableCapacity",
            "DRADeviceBindingConditions",
            "DRADeviceCompatibilityGroups",
            "DRADeviceTaints",
            "DRAOptionalNodeOperations",
            "DRAPartitionableDevices",
            "DRAPartitionableDevicesType",
        ],
    )


def test_dropped_counters_and_unknown_fields(core: ModuleType) -> None:
    sent = _slice([], sharedCounters=COUNTERS)
    stored = copy.deepcopy(sent)
    del stored["spec"]["sharedCounters"]
    assert _dropped(core, sent, stored) == (["spec.sharedCounters"], ["DRAPartitionableDevices"])
    # A field no known gate explains, and a device the server did not keep.
    sent = _slice([_device(future={"x": 1}), _device(name="d1")])
    stored = _slice([_device()])
    assert _dropped(core, sent, stored) == (
        ["spec.devices[0].future", "spec.devices[1]"],
        [],
    )


_scalar = st.one_of(
    st.sampled_from(["1Gi", "1024Mi", "1073741824", "500m", "0.5", "2k", "a", ""]),
    st.integers(-3, 3),
    st.booleans(),
)
_keys = st.sampled_from(
    [
        "taints",
        "capacity",
        "value",
        "counters",
        "consumesCounters",
        "compatibilityGroups",
        "nodeName",
        "requestPolicy",
        "x",
    ]
)
_tree = st.recursive(
    _scalar,
    lambda inner: st.one_of(
        st.lists(inner, min_size=1, max_size=3), st.dictionaries(_keys, inner, min_size=1)
    ),
    max_leaves=12,
)
_devices = st.lists(st.dictionaries(_keys, _tree, max_size=4), max_size=3)


def _drop_some(value: Any, choices: list[bool]) -> Any:
    """``value`` with some members and list tails removed, as choices say."""
    if isinstance(value, dict):
        kept = {}
        for key in sorted(value):
            if choices and choices.pop():
                continue
            kept[key] = _drop_some(value[key], choices)
        return kept
    if isinstance(value, list):
        cut = len(value) - 1 if choices and choices.pop() else len(value)
        return [_drop_some(v, choices) for v in value[:cut]]
    return value


@settings(max_examples=300, deadline=None)
@given(_devices, st.lists(st.booleans(), max_size=30), _devices)
def test_cores_agree(devices: list[Any], choices: list[bool], other: list[Any]) -> None:
    sent_devices = [{"name": f"d{i}", **d} for i, d in enumerate(devices)]
    sent = _slice(sent_devices)
    assert _dropped(_pycore, sent, sent) == ([], [])
    for stored in (
        _slice(_drop_some(sent_devices, list(choices))),
        _slice([{"name": f"d{i}", **d} for i, d in enumerate(other)]),
    ):
        assert _dropped(_pycore, sent, stored) == _dropped(_core, sent, stored)
