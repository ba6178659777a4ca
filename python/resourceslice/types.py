"""Typed shapes of what a driver passes in: devices, attributes, capacity, taints, counters and
node selectors, in the REST JSON shape (camelCase, as ``kubectl get -o json`` shows them).

``TypedDict``\\s: at run time they are plain dicts, which the API accepted all along; in an
editor they complete field names, and mypy checks a driver's devices when it annotates them::

    devices: list[rs.Device] = [
        {"name": "gpu-0", "attributes": {"model": {"string": "a100"}},
         "capacity": {"memory": {"value": "80Gi"}}},
    ]

The API keeps taking any mapping of that shape and the ``kubernetes`` client's models
(``V1Device``…). Fields as in ``resource.k8s.io/v1`` of Kubernetes 1.37; which of them a
cluster keeps depends on its feature gates (see ``DroppedFieldsError``).
"""

from __future__ import annotations

from typing import Any, Literal, Protocol, TypedDict, Union

__all__ = [
    "CapacityRequestPolicy",
    "CapacityRequestPolicyRange",
    "Counter",
    "CounterSet",
    "Device",
    "DeviceAttribute",
    "DeviceCapacity",
    "DeviceCounterConsumption",
    "DeviceTaint",
    "KubernetesModel",
    "NodeAllocatableMapping",
    "NodeAllocatableOverhead",
    "NodeAllocatableResource",
    "NodeOperation",
    "NodeSelector",
    "NodeSelectorOperator",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "Quantity",
    "TaintEffect",
]

#: A quantity: ``"80Gi"``, ``"500m"``, or an integer.
Quantity = Union[str, int]

#: What a device taint does to claims that do not tolerate it.
TaintEffect = Literal["NoSchedule", "NoExecute", "None"]
#: How a node selector requirement compares the node's label (or field) with ``values``.
NodeSelectorOperator = Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
#: A node operation the kubelet may skip for a slice's devices (``Slice.skip_node_operations``).
NodeOperation = Literal["NodePrepareResources", "NodeUnprepareResources", "*"]


class KubernetesModel(Protocol):
    """A model object of the ``kubernetes`` client (``V1Device``, ``V1NodeSelector``…),
    accepted wherever the REST JSON shape is: the API converts it to that shape."""

    def to_dict(self) -> dict[str, Any]: ...


# Exactly one of the fields. ``version``: semantic versioning 2.0.0. (The functional form:
# fields named ``int`` and ``bool`` would shadow the types in a class body.)
class DeviceAttribute(TypedDict, total=False):
    int: int
    bool: bool
    string: str
    version: str
    ints: list[int]
    bools: list[bool]
    strings: list[str]
    versions: list[str]


class CapacityRequestPolicyRange(TypedDict, total=False):
    min: Quantity
    max: Quantity
    step: Quantity


class _CapacityRequestPolicyRequired(TypedDict):
    default: Quantity


class CapacityRequestPolicy(_CapacityRequestPolicyRequired, total=False):
    """How much of a capacity one allocation may take (``allowMultipleAllocations``)."""

    validValues: list[Quantity]
    validRange: CapacityRequestPolicyRange


class _DeviceCapacityRequired(TypedDict):
    value: Quantity


class DeviceCapacity(_DeviceCapacityRequired, total=False):
    requestPolicy: CapacityRequestPolicy


class _DeviceTaintRequired(TypedDict):
    key: str
    effect: TaintEffect


class DeviceTaint(_DeviceTaintRequired, total=False):
    value: str
    timeAdded: str  # set by the apiserver when absent


class Counter(TypedDict):
    value: Quantity


class _CounterSetRequired(TypedDict):
    name: str


class CounterSet(_CounterSetRequired, total=False):
    """A slice's shared counters (``Slice.shared_counters``): a DNS label and its counters."""

    counters: dict[str, Counter]


class _DeviceCounterConsumptionRequired(TypedDict):
    counterSet: str


class DeviceCounterConsumption(_DeviceCounterConsumptionRequired, total=False):
    counters: dict[str, Counter]
    compatibilityGroups: list[str]


class _NodeSelectorRequirementRequired(TypedDict):
    key: str
    operator: NodeSelectorOperator


class NodeSelectorRequirement(_NodeSelectorRequirementRequired, total=False):
    values: list[str]


class NodeSelectorTerm(TypedDict, total=False):
    matchExpressions: list[NodeSelectorRequirement]
    matchFields: list[NodeSelectorRequirement]


class NodeSelector(TypedDict):
    """A pool's or a device's node selection (``Pool.node_selector``), as in a Pod's."""

    nodeSelectorTerms: list[NodeSelectorTerm]


class NodeAllocatableMapping(TypedDict, total=False):
    capacityKey: str
    capacityMultiplier: Quantity
    deviceMultiplier: Quantity


class NodeAllocatableOverhead(TypedDict, total=False):
    perPod: Quantity
    perContainer: Quantity


class NodeAllocatableResource(TypedDict, total=False):
    mapping: NodeAllocatableMapping
    overhead: NodeAllocatableOverhead


class _DeviceRequired(TypedDict):
    name: str


class Device(_DeviceRequired, total=False):
    """One device. ``name``: a DNS label, unique in its pool; attribute and capacity names:
    C identifiers, optionally ``<domain>/``-prefixed; 32 of them together at most."""

    attributes: dict[str, DeviceAttribute]
    capacity: dict[str, DeviceCapacity]
    consumesCounters: list[DeviceCounterConsumption]
    nodeName: str
    nodeSelector: NodeSelector
    allNodes: bool
    taints: list[DeviceTaint]
    bindsToNode: bool
    bindingConditions: list[str]
    bindingFailureConditions: list[str]
    allowMultipleAllocations: bool
    nodeAllocatableResources: dict[str, NodeAllocatableResource]
