"""The ResourceClaim a driver's ``prepare_resource_claims`` gets, typed: ``resource.k8s.io/v1``.

The keys are those of the REST JSON (camelCase, as ``kubectl get -o json`` shows them), so a
claim is the dict the apiserver sent, and mypy checks what a driver reads from it. The helper
hands every claim over in the v1 shape whatever version the cluster serves (1.32 serves only
v1beta1, 1.33 v1beta2), as Go's helper hands its drivers ``resourceapi.ResourceClaim`` of v1.

Keys marked required are those an allocated claim always has (the apiserver writes them, or
the helper checked them: a claim without ``status.allocation`` never reaches the driver); the
others are absent when empty (Go's ``omitempty``): read them with ``.get``. Fields a driver
rarely reads (selectors, constraints, tolerations, conditions) stay plain dicts.
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict

AllocationConfigSource = Literal["FromClass", "FromClaim"]
DeviceAllocationMode = Literal["ExactCount", "All"]


class _ObjectMetaRequired(TypedDict):
    name: str
    namespace: str
    uid: str


class ObjectMeta(_ObjectMetaRequired, total=False):
    """The claim's metadata; ``name``, ``namespace`` and ``uid`` always set."""

    resourceVersion: str
    generation: int
    creationTimestamp: str
    labels: dict[str, str]
    annotations: dict[str, str]
    ownerReferences: list[dict[str, Any]]
    finalizers: list[str]


class OpaqueDeviceConfiguration(TypedDict):
    """Configuration for ``driver`` in a format the driver defines: ``parameters`` is any JSON
    object (by convention with ``apiVersion`` and ``kind``)."""

    driver: str
    parameters: dict[str, Any]


class DeviceClaimConfiguration(TypedDict, total=False):
    """A claim's ``spec.devices.config`` entry: for ``requests`` (none: all of them)."""

    requests: list[str]
    opaque: OpaqueDeviceConfiguration


class _ExactDeviceRequestRequired(TypedDict):
    deviceClassName: str


class ExactDeviceRequest(_ExactDeviceRequestRequired, total=False):
    """A request for devices of one class (v1beta1 had these fields inline in the request)."""

    selectors: list[dict[str, Any]]
    allocationMode: DeviceAllocationMode
    count: int
    adminAccess: bool
    tolerations: list[dict[str, Any]]
    capacity: dict[str, Any]
    derivedAttributes: list[dict[str, Any]]


class _DeviceSubRequestRequired(TypedDict):
    name: str
    deviceClassName: str


class DeviceSubRequest(_DeviceSubRequestRequired, total=False):
    """One alternative of a ``firstAvailable`` request; results name it ``<request>/<name>``."""

    selectors: list[dict[str, Any]]
    allocationMode: DeviceAllocationMode
    count: int
    tolerations: list[dict[str, Any]]
    capacity: dict[str, Any]
    derivedAttributes: list[dict[str, Any]]


class _DeviceRequestRequired(TypedDict):
    name: str


class DeviceRequest(_DeviceRequestRequired, total=False):
    """One request of the claim: ``exactly`` one kind of device, or the ``firstAvailable`` of
    several alternatives."""

    exactly: ExactDeviceRequest
    firstAvailable: list[DeviceSubRequest]


class DeviceClaim(TypedDict, total=False):
    requests: list[DeviceRequest]
    constraints: list[dict[str, Any]]
    config: list[DeviceClaimConfiguration]


class ResourceClaimSpec(TypedDict):
    devices: DeviceClaim


class _DeviceRequestAllocationResultRequired(TypedDict):
    request: str
    driver: str
    pool: str
    device: str


class DeviceRequestAllocationResult(_DeviceRequestAllocationResultRequired, total=False):
    """One allocated device: ``request`` is the request's name, or ``<request>/<subrequest>``
    for an alternative of ``firstAvailable``; ``shareID`` is set for a device allocated to
    several claims at once (``allowMultipleAllocations``)."""

    adminAccess: bool
    tolerations: list[dict[str, Any]]
    bindingConditions: list[str]
    bindingFailureConditions: list[str]
    shareID: str
    consumedCapacity: dict[str, str]
    skipNodeOperations: list[str]


class _DeviceAllocationConfigurationRequired(TypedDict):
    source: AllocationConfigSource


class DeviceAllocationConfiguration(_DeviceAllocationConfigurationRequired, total=False):
    """Configuration the allocation carries: a DeviceClass's (``FromClass``) or the claim's
    (``FromClaim``), for ``requests`` (none: all of them)."""

    requests: list[str]
    opaque: OpaqueDeviceConfiguration


class DeviceAllocationResult(TypedDict, total=False):
    results: list[DeviceRequestAllocationResult]
    config: list[DeviceAllocationConfiguration]


class _AllocationResultRequired(TypedDict):
    devices: DeviceAllocationResult


class AllocationResult(_AllocationResultRequired, total=False):
    nodeSelector: dict[str, Any]
    allocationTimestamp: str


class _AllocatedDeviceStatusRequired(TypedDict):
    driver: str
    pool: str
    device: str


class AllocatedDeviceStatus(_AllocatedDeviceStatusRequired, total=False):
    """What a driver reported about a device in ``status.devices``."""

    shareID: str
    conditions: list[dict[str, Any]]
    data: dict[str, Any]
    networkData: dict[str, Any]


class _ResourceClaimStatusRequired(TypedDict):
    allocation: AllocationResult


class ResourceClaimStatus(_ResourceClaimStatusRequired, total=False):
    reservedFor: list[dict[str, Any]]
    devices: list[AllocatedDeviceStatus]


class ResourceClaim(TypedDict):
    """An allocated ResourceClaim, as the helper hands it to the driver (v1)."""

    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: ResourceClaimSpec
    status: ResourceClaimStatus


__all__ = [
    "AllocatedDeviceStatus",
    "AllocationConfigSource",
    "AllocationResult",
    "DeviceAllocationConfiguration",
    "DeviceAllocationMode",
    "DeviceAllocationResult",
    "DeviceClaim",
    "DeviceClaimConfiguration",
    "DeviceRequest",
    "DeviceRequestAllocationResult",
    "DeviceSubRequest",
    "ExactDeviceRequest",
    "ObjectMeta",
    "OpaqueDeviceConfiguration",
    "ResourceClaim",
    "ResourceClaimSpec",
    "ResourceClaimStatus",
]
