"""Every rule of docs/core.md §3, with its path and message, on both cores."""

from __future__ import annotations

import json
from types import ModuleType
from typing import Any

import pytest
from core_helpers import DRIVER, MAX_BYTES, pool

P = 'pools["p"]'
D = f"{P}.devices[0]"
REQUIRED = (
    "no node selection: a Node owner, nodeSelector, allNodes, or slices with "
    "perDeviceNodeSelection is required"
)
CONFLICT = "at most one of a Node owner, nodeSelector, allNodes and perDeviceNodeSelection"
ONE_TYPE = "must have exactly one of bool, int, string, version, bools, ints, strings, versions"


def _errors(core: ModuleType, pools: dict[str, Any], driver: str = DRIVER) -> list[str]:
    desired, errors = core.prepare_desired(driver, pools, MAX_BYTES)
    assert (desired is None) == bool(errors)
    return list(errors)


def _device_errors(core: ModuleType, **fields: Any) -> list[str]:
    return _errors(core, {"p": pool([{"name": "dev", **fields}])})


def _slice_errors(core: ModuleType, *slices: dict[str, Any], **selection: Any) -> list[str]:
    return _errors(core, {"p": pool(None, slices=list(slices), **selection)})


def test_driver(core: ModuleType) -> None:
    msg = "driver: must be a DNS subdomain of at most 63 characters"
    assert _errors(core, {}, driver="Bad_Driver") == [msg]
    assert _errors(core, {}, driver="a" * 64) == [msg]
    assert _errors(core, {}, driver="") == [msg]
    assert _errors(core, {}, driver="a" * 63) == []
    # As the server: upper case is allowed (it warns), and one label may be long.
    assert _errors(core, {}, driver="GPU.Example.com") == []
    assert _errors(core, {}, driver="a." + "b" * 61) == []
    # The Kelvin sign lower-cases to "k" in Unicode: both cores take ASCII only.
    assert _errors(core, {}, driver="\u212a.com") == [msg]


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
        f"{P}.nodeSelector.nodeSelectorTerms: at least one node selector term is required",
        f"{P}.nodeSelector.nodeSelectorTerms: must have exactly one node selector term",
        f"{P}: {CONFLICT}",
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
    for bad in (0, 129, -1):
        assert _errors(core, {"p": pool([], maxDevicesPerSlice=bad)}) == [
            f"{P}.maxDevicesPerSlice: must be from 1 to 128"
        ]
    assert _errors(core, {"p": pool([], maxDevicesPerSlice=64.0)}) == [
        f"{P}.maxDevicesPerSlice: must not be a float"
    ]
    explicit = pool(None, slices=[{"devices": []}], maxDevicesPerSlice=64)
    assert _errors(core, {"p": explicit}) == [
        f"{P}.maxDevicesPerSlice: only a flat devices list is packed: not allowed with slices"
    ]


def test_device_names(core: ModuleType) -> None:
    devices = [{"name": "a"}, {"name": "a"}, {"name": "B"}, 7, {}]
    assert _errors(core, {"p": pool(devices)}) == [
        f'{P}.devices[1]: duplicate device name "a"',
        f"{P}.devices[2].name: must be a DNS label",
        f"{P}.devices[3]: must be an object",
        f"{P}.devices[4].name: is required",
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
        f'{D}.attributes["long"].string: must be at most 64 bytes',
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
    # No value is zero, as the server reads it.
    caps = {"a": {}, "b": {"value": "1x"}, "c": {"value": 3, "requestPolicy": {"default": "z"}}}
    assert _device_errors(core, capacity=caps) == [
        f'{D}.capacity["b"].value: invalid quantity "1x"',
        f'{D}.capacity["c"].requestPolicy: requestPolicy needs allowMultipleAllocations: true',
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
        f"{D}.taints[1].key: is required",
        f"{D}.taints[1].effect: is required",
    ]
    many = [{"key": f"k{i}", "effect": "None"} for i in range(17)]
    assert _device_errors(core, taints=many) == [f"{D}.taints: at most 16 taints, got 17"]


def test_binding_conditions(core: ModuleType) -> None:
    failed = {"bindingFailureConditions": ["failed"]}
    assert _device_errors(core, bindingConditions=["a", "b", "c", "d", "e"], **failed) == [
        f"{D}.bindingConditions: at most 4 conditions, got 5"
    ]
    assert _device_errors(core, bindingConditions=["ok"], bindingFailureConditions=["no good"]) == [
        f"{D}.bindingFailureConditions[0]: must be a label name"
    ]
    assert _device_errors(
        core, bindingConditions=["a", "a"], bindingFailureConditions=["b", "a"]
    ) == [
        f"{D}.bindingConditions[1]: duplicate",
        f"{D}.bindingFailureConditions[1]: must not also be a binding condition",
    ]
    both = "bindingConditions and bindingFailureConditions go together"
    assert _device_errors(core, bindingConditions=["ready"]) == [
        f"{D}.bindingFailureConditions: {both}"
    ]
    assert _device_errors(core, bindingConditions=[], **failed) == [
        f"{D}.bindingConditions: {both}"
    ]


def test_per_device_node_selection(core: ModuleType) -> None:
    assert _device_errors(core, nodeName="n") == [
        f"{D}: nodeName, nodeSelector and allNodes are only allowed in a slice with "
        "perDeviceNodeSelection"
    ]
    per_device = {"perDeviceNodeSelection": True}
    assert _slice_errors(core, {"devices": [{"name": "a"}], **per_device}, nodeName=None) == [
        f"{P}.slices[0].devices[0]: exactly one of nodeName, nodeSelector, allNodes is required "
        "with perDeviceNodeSelection"
    ]
    assert _slice_errors(
        core, {"devices": [{"name": "a", "allNodes": False}], **per_device}, nodeName=None
    ) == [
        f"{P}.slices[0].devices[0].allNodes: must be true or unset",
        f"{P}.slices[0].devices[0]: exactly one of nodeName, nodeSelector, allNodes is required "
        "with perDeviceNodeSelection",
    ]
    ok = {"devices": [{"name": "a", "nodeName": "n"}], **per_device}
    assert _slice_errors(core, ok, nodeName=None) == []
    # The pool's own selection and perDeviceNodeSelection exclude each other.
    assert _slice_errors(core, ok) == [f"{P}.slices[0]: {CONFLICT}"]
    assert _slice_errors(core, ok, nodeName=None, nodeSelector=SELECTOR) == [
        f"{P}.slices[0]: {CONFLICT}"
    ]


SELECTOR = {
    "nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
    ]
}


def test_node_selection(core: ModuleType) -> None:
    """Each slice has exactly one node selection: the pool's (a Node owner's name, a
    selector, all nodes) or perDeviceNodeSelection. No default: a pool without one is
    refused, not published on every node."""
    assert _errors(core, {"p": pool([], nodeName=None)}) == [f"{P}: {REQUIRED}"]
    assert _slice_errors(core, {"devices": [{"name": "a"}]}, {}, nodeName=None) == [
        f"{P}.slices[0]: {REQUIRED}",
        f"{P}.slices[1]: {REQUIRED}",
    ]
    assert _errors(core, {"p": pool([], allNodes=True, nodeName="n")}) == [f"{P}: {CONFLICT}"]
    assert _errors(core, {"p": pool([], nodeName="")}) == [
        f"{P}.nodeName: is required",
        f"{P}: {REQUIRED}",
    ]
    assert _errors(core, {"p": pool([], nodeName="Node_1")}) == [
        f"{P}.nodeName: must be a DNS subdomain"
    ]
    for selection in ({"allNodes": True}, {"nodeSelector": SELECTOR}, {"nodeName": "n"}):
        assert _errors(core, {"p": pool([], **selection)}) == []


def test_node_selector(core: ModuleType) -> None:
    term = {
        "matchExpressions": [
            {"key": "a b", "operator": "In"},
            {"key": "zone", "operator": "Exists", "values": ["x"]},
            {"key": "rank", "operator": "Gt", "values": ["1", "2"]},
            {"key": "zone", "operator": "Near", "values": ["-x"]},
        ],
        "matchFields": [
            {"key": "metadata.name", "operator": "In", "values": ["Node_1"]},
            {"key": "spec.x", "operator": "Exists"},
        ],
    }
    ns = f"{P}.nodeSelector.nodeSelectorTerms"
    assert _errors(core, {"p": pool([], nodeSelector={"nodeSelectorTerms": [term, {}]})}) == [
        f"{ns}: must have exactly one node selector term",
        f"{ns}[0].matchExpressions[0].key: must be a label name",
        f"{ns}[0].matchExpressions[0].values: values are required with In and NotIn",
        f"{ns}[0].matchExpressions[1].values: values are not allowed with Exists and DoesNotExist",
        f"{ns}[0].matchExpressions[2].values: exactly one value is required",
        f"{ns}[0].matchExpressions[3].values[0]: must be a label value",
        f"{ns}[0].matchExpressions[3].operator: must be one of In, NotIn, Exists, DoesNotExist, "
        "Gt, Lt",
        f"{ns}[0].matchFields[0].values[0]: must be a DNS subdomain",
        f"{ns}[0].matchFields[1].operator: must be In or NotIn",
        f"{ns}[0].matchFields[1].key: must be metadata.name",
    ]


def test_counters(core: ModuleType) -> None:
    """Devices consume counter sets that other slices of the pool share; counter and
    counter set names are DNS labels (a partitioned GPU's ``memory-slice-0``)."""
    shared = {"sharedCounters": [{"name": "set", "counters": {"memory-slice-0": {"value": "1Gi"}}}]}
    mem = {"memory-slice-0": {"value": "1"}}
    uses = {
        "name": "a",
        "consumesCounters": [
            {"counterSet": "set", "counters": {**mem, "cpu": {"value": "1"}}},
            {"counterSet": "set", "counters": mem},
            {"counterSet": "other", "counters": {"x": {"value": "1"}}},
        ],
    }
    assert _slice_errors(core, shared, {"devices": [uses]}) == [
        f"{P}.slices[1].devices[0].consumesCounters: at most 2 counter consumptions, got 3",
        f'{P}.slices[1].devices[0].consumesCounters[0].counters["cpu"]: '
        'unknown counter "cpu" in counter set',
        f'{P}.slices[1].devices[0].consumesCounters[1]: duplicate counter set "set"',
        f'{P}.slices[1].devices[0].consumesCounters[2].counterSet: unknown counter set "other"',
    ]
    assert (
        _slice_errors(
            core,
            shared,
            {
                "devices": [
                    {"name": "a", "consumesCounters": [{"counterSet": "set", "counters": mem}]}
                ]
            },
        )
        == []
    )
    assert _slice_errors(core, shared, {**shared, "devices": [{"name": "b"}]}) == [
        f"{P}.slices[1]: a slice has devices or sharedCounters, not both",
        f'{P}.slices[1].sharedCounters[0]: duplicate counter set name "set"',
    ]
    sets = [{"name": f"s{i}", "counters": {"c": {"value": "1"}}} for i in range(9)]
    assert _slice_errors(core, {"sharedCounters": sets}) == [
        f"{P}.slices[0].sharedCounters: at most 8 counter sets, got 9"
    ]
    bad = [
        {"name": "s", "counters": {"mem_a": {}, "x.com/mem": {}}},
        {"name": "t"},
        {"name": "u", "counters": {}},
    ]
    assert _slice_errors(core, {"sharedCounters": bad}) == [
        f'{P}.slices[0].sharedCounters[0].counters["mem_a"]: must be a DNS label',
        f'{P}.slices[0].sharedCounters[0].counters["x.com/mem"]: must be a DNS label',
        f"{P}.slices[0].sharedCounters[1].counters: is required",
        f"{P}.slices[0].sharedCounters[2].counters: is required",
    ]
    groups = {"counterSet": "set", "counters": mem, "compatibilityGroups": ["a", "a", "B"]}
    G = f"{P}.slices[1].devices[0].consumesCounters[0].compatibilityGroups"
    assert _slice_errors(
        core,
        shared,
        {"devices": [{"name": "a", "consumesCounters": [groups, {"counterSet": "set"}]}]},
    ) == [
        f"{G}: at most 2 groups, got 3",
        f"{G}[1]: duplicate",
        f"{G}[2]: must be a DNS label",
        f'{P}.slices[1].devices[0].consumesCounters[1]: duplicate counter set "set"',
        f"{P}.slices[1].devices[0].consumesCounters[1].counters: is required",
    ]


def test_list_attributes(core: ModuleType) -> None:
    """An empty list is refused, not dropped; a device holds at most 48 values, list items
    counting one each."""
    assert _device_errors(core, attributes={"a": {"ints": []}}) == [
        f'{D}.attributes["a"]: {ONE_TYPE}',
        f'{D}.attributes["a"].ints: must not be empty',
    ]
    assert _device_errors(core, attributes={"a": {"ints": list(range(47))}, "b": {"int": 1}}) == []
    assert _device_errors(core, attributes={"a": {"ints": list(range(48))}, "b": {"int": 1}}) == [
        f"{D}: at most 48 attribute values (list items count one each), got 49"
    ]


def test_request_policy(core: ModuleType) -> None:
    def policy(p: dict[str, Any], value: str = "10") -> list[str]:
        cap = {"c": {"value": value, "requestPolicy": p}}
        return _device_errors(core, allowMultipleAllocations=True, capacity=cap)

    c = f'{D}.capacity["c"].requestPolicy'
    assert policy({"default": "1", "validValues": ["1", "2"]}) == []
    assert policy({"default": "3", "validValues": ["2", "1", "1000m", "11"]}) == [
        f"{c}.validValues[1]: must be sorted in ascending order",
        f"{c}.validValues[2]: duplicate",
        f"{c}.validValues[3]: must not exceed the capacity's value",
        f"{c}.validValues: the default must be one of validValues",
    ]
    assert policy({"validValues": ["1"], "validRange": {"min": "1"}}) == [
        f"{c}: at most one of validValues and validRange"
    ]
    assert policy({"default": "2", "validRange": {"min": "1", "max": "9", "step": "2"}}) == [
        f"{c}.validRange.step: min plus a multiple of step must give the default and max"
    ]
    assert policy({"default": "1500m", "validRange": {"min": "500m", "step": "500m"}}) == []
    assert policy({"default": "1", "validRange": {"min": "0.0001"}}) == [
        f"{c}.validRange.min: must be a whole number of thousandths in 64 bits"
    ]
    assert policy({"default": "1", "validRange": {"max": "5"}}) == [
        f"{c}.validRange.min: is required"
    ]
    assert policy({"default": "1", "validRange": {"min": "1"}}, value="1e21") == [
        f'{D}.capacity["c"].value: must be below 10^20 in a request policy'
    ]


def test_node_allocatable_resources(core: ModuleType) -> None:
    def allocatable(resources: dict[str, Any]) -> list[str]:
        cap = {"mem": {"value": "8Gi"}}
        return _device_errors(core, capacity=cap, nodeAllocatableResources=resources)

    n = f"{D}.nodeAllocatableResources"
    assert (
        allocatable({"memory": {"mapping": {"capacityKey": "mem", "capacityMultiplier": "1"}}})
        == []
    )
    assert (
        allocatable(
            {"cpu": {"mapping": {"deviceMultiplier": "1000m"}, "overhead": {"perPod": "0"}}}
        )
        == []
    )
    assert allocatable(
        {
            "pods": {},
            "memory": {"mapping": {"capacityKey": "gpu", "deviceMultiplier": "0"}, "overhead": {}},
        }
    ) == [
        f'{n}["memory"].mapping.capacityKey: must name a capacity of the device',
        f'{n}["memory"].mapping.capacityMultiplier: is required',
        f'{n}["memory"].mapping.deviceMultiplier: must be positive',
        f'{n}["memory"].mapping: exactly one of capacityKey and deviceMultiplier is required',
        f'{n}["memory"].overhead: at least one of perPod and perContainer is required',
        f'{n}["pods"]: must be cpu, memory or hugepages-<size>',
        f'{n}["pods"]: at least one of mapping and overhead is required',
    ]


def test_partition_type_attribute_and_skip_node_operations(core: ModuleType) -> None:
    shared = {"sharedCounters": [{"name": "s", "counters": {"c": {"value": "1"}}}]}
    uses = [{"counterSet": "s", "counters": {"c": {"value": "1"}}}]
    typed = {"profile": {"string": "1g"}}
    devices = [
        {"name": "a", "consumesCounters": uses, "attributes": typed},
        {"name": "b", "consumesCounters": uses},
        {"name": "c"},
    ]
    full = f"{DRIVER}/profile"
    assert _slice_errors(core, shared, {"devices": devices, "partitionTypeAttribute": full}) == [
        f'{P}.slices[1].devices[1].attributes["{full}"]: must be a string attribute: '
        "the slice's partitionTypeAttribute"
    ]
    assert _slice_errors(
        core, {"devices": [{"name": "c"}], "partitionTypeAttribute": "profile"}
    ) == [
        f"{P}.slices[0].partitionTypeAttribute: must be <domain>/<name>",
        f"{P}.slices[0].partitionTypeAttribute: only allowed in a slice with devices that "
        "consume counters",
    ]
    skip = {"devices": [], "skipNodeOperations": ["NodePrepareResources", "Bogus", "Bogus"]}
    assert _slice_errors(core, skip) == [
        f"{P}.slices[0].skipNodeOperations[1]: must be one of NodePrepareResources, "
        "NodeUnprepareResources, *",
        f"{P}.slices[0].skipNodeOperations[2]: must be one of NodePrepareResources, "
        "NodeUnprepareResources, *",
        f"{P}.slices[0].skipNodeOperations[2]: duplicate",
        f"{P}.slices[0].skipNodeOperations: NodePrepareResources needs NodeUnprepareResources or *",
    ]
    assert _slice_errors(core, {"devices": [], "skipNodeOperations": ["*"]}) == []


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


def test_node_allocatable_quantities_are_canonical(core: ModuleType) -> None:
    """``deviceMultiplier: "1000m"`` is published (and stored) as ``"1"``: an unchanged
    device must not look changed."""
    resources = {"cpu": {"mapping": {"deviceMultiplier": "1000m"}, "overhead": {"perPod": "0.5"}}}
    desired, errors = core.prepare_desired(
        DRIVER, {"p": pool([{"name": "a", "nodeAllocatableResources": resources}])}, MAX_BYTES
    )
    assert errors == []
    plan = core.plan_pool(desired, "p", [], None, "node-1")
    (body,) = [json.loads(b) for b in plan.creates]
    assert body["spec"]["devices"][0]["nodeAllocatableResources"] == {
        "cpu": {"mapping": {"deviceMultiplier": "1"}, "overhead": {"perPod": "500m"}}
    }
    stored = {**body, "metadata": {**body["metadata"], "uid": "u", "resourceVersion": "1"}}
    record = core.decode_slice(json.dumps(stored).encode())
    assert core.plan_pool(desired, "p", [record], None, "node-1").updates == []


class _Dict(dict):  # type: ignore[type-arg]
    pass


class _Str(str):
    pass


class _Int(int):
    pass


def test_devices_sharing_strings_are_each_checked(core: ModuleType) -> None:
    """The same str objects in every device (the Rust core reads a str once, checks an
    attribute name once and a quantity once per list): each device still gets its errors,
    and its own canonical form."""
    bad, good, quantity = "9bad", "ok", "1000m"
    devices = [
        {"name": f"d{i}", "attributes": {bad: {"int": 1}, good: {"int": i}}} for i in range(2)
    ]
    assert _errors(core, {"p": pool(devices)}) == [
        f'{P}.devices[{i}].attributes["9bad"]: the name must be a C identifier of at most 32 '
        "characters"
        for i in range(2)
    ]
    shared = [{"name": f"d{i}", "capacity": {"m": {"value": quantity}}} for i in range(3)]
    own = [{"name": f"d{i}", "capacity": {"m": {"value": "1"}}} for i in range(3)]
    ints = [{"name": f"d{i}", "capacity": {"m": {"value": 1}}} for i in range(3)]
    desired = [
        core.prepare_desired(DRIVER, {"p": pool(d)}, MAX_BYTES)[0] for d in (shared, own, ints)
    ]
    assert desired[0].changed_pools(desired[1]) == []
    assert desired[0].changed_pools(desired[2]) == []


def test_subclasses_and_tuples_read_as_their_base_types(core: ModuleType) -> None:
    """What the API converts before the core sees it (``non_plain``) is still read alike by
    both cores when handed over directly: the same desired state as the exact types."""
    exact = {
        "name": "d",
        "attributes": {"x": {"int": 7}, "s": {"string": "v"}, "b": {"bool": True}},
        "taints": [{"key": "k", "effect": "NoSchedule"}],
    }
    other = _Dict(
        name=_Str("d"),
        attributes=_Dict(x=_Dict(int=_Int(7)), s={"string": _Str("v")}, b={"bool": True}),
        taints=(_Dict(key="k", effect="NoSchedule"),),
    )
    desired = [core.prepare_desired(DRIVER, {"p": pool([d])}, MAX_BYTES) for d in (exact, other)]
    assert desired[0][1] == desired[1][1] == []
    assert desired[0][0].changed_pools(desired[1][0]) == []
    assert _device_errors(
        core, attributes={"x": {"int": 1 << 63}, "y": {"int": _Int(1 << 63)}}
    ) == [
        f'{D}.attributes["x"].int: out of range for a 64-bit integer',
        f'{D}.attributes["y"].int: out of range for a 64-bit integer',
    ]
