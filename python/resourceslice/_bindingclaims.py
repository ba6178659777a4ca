"""What a claim says about binding conditions, and what :mod:`resourceslice.binding` writes
back: which of a driver's allocated devices wait to be attached, and the conditions of each
outcome. Pure functions of the claim (as kube-scheduler's ``isClaimReadyForBinding`` reads
it: every binding condition True, or one failure condition True, settles a device)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from resourceslice.api import ResourceSliceError, _PickledByFields
from resourceslice.claimstatus import DeviceCondition

#: The reason of the binding conditions while ``attach`` runs: how a successor tells a retry.
ATTACHING = "Attaching"
ATTACHED = "Attached"
ATTACH_FAILED = "AttachFailed"


@dataclass(frozen=True)
class BindingDevice:
    """A device of a claim whose binding conditions are pending: what ``attach`` attaches."""

    namespace: str
    #: The claim's name and uid.
    claim: str
    claim_uid: str
    driver: str
    pool: str
    device: str
    request: str
    share_id: str | None
    #: The node the scheduler picked (the allocation's node, for a device with
    #: ``bindsToNode``), or None when the allocation names no single node.
    node: str | None
    binding_conditions: tuple[str, ...]
    binding_failure_conditions: tuple[str, ...]
    #: The allocation's ``allocationTimestamp``: with ``claim_uid``, pool and device, it
    #: names this allocation; a new one of the same claim (after a failure or the timeout)
    #: is a new attach, not a retry.
    allocated_at: str
    #: An earlier ``attach`` of this allocation may have begun: here (it raised), or in a
    #: replica that died or lost its Lease (the conditions say ``Attaching``).
    retry: bool = False

    def same_allocation(self, other: BindingDevice) -> bool:
        """The same device of the same allocation, whatever ``retry`` says."""
        return replace(self, retry=False) == replace(other, retry=False)


class BindingFailedError(_PickledByFields, RuntimeError, ResourceSliceError):
    """Raised by ``attach``: the device cannot be attached. Its failure ``condition`` (the
    first of the device's by default) becomes True with ``reason`` and the message, and the
    scheduler allocates the claim again. Returning False does the same with the defaults."""

    _fields = ("message", "reason", "condition")

    def __init__(
        self, message: str, reason: str = ATTACH_FAILED, condition: str | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason
        self.condition = condition


def claim_key(claim: Mapping[str, Any]) -> tuple[str, str]:
    meta = claim.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def allocated_at(claim: Mapping[str, Any]) -> str | None:
    """The allocation's timestamp ("" without one), None when the claim is not allocated."""
    allocation = (claim.get("status") or {}).get("allocation")
    return None if not allocation else str(allocation.get("allocationTimestamp") or "")


def has_binding_conditions(claim: Mapping[str, Any], driver: str) -> bool:
    """Whether a device of ``driver`` was allocated with binding conditions."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    results = (allocation.get("devices") or {}).get("results") or ()
    return any(r.get("driver") == driver and r.get("bindingConditions") for r in results)


def allocated_node(allocation: Mapping[str, Any]) -> str | None:
    """The single node an allocation's selector names (``metadata.name In [node]``)."""
    terms = (allocation.get("nodeSelector") or {}).get("nodeSelectorTerms") or []
    if len(terms) != 1:
        return None
    for field in terms[0].get("matchFields") or ():
        values = field.get("values") or []
        if field.get("key") == "metadata.name" and field.get("operator") == "In":
            return str(values[0]) if len(values) == 1 else None
    return None


def pending_devices(
    claim: Mapping[str, Any], driver: str, publishes: Callable[[str], bool]
) -> list[BindingDevice]:
    """The claim's devices of ``driver`` in the pools ``publishes`` selects whose binding
    conditions are neither all True nor failed, while a consumer waits for them (the
    scheduler in PreBind has the pod in ``reservedFor``)."""
    meta = claim.get("metadata") or {}
    status = claim.get("status") or {}
    allocation = status.get("allocation")
    if not allocation or not status.get("reservedFor") or meta.get("deletionTimestamp"):
        return []
    entries = {
        (e.get("driver"), e.get("pool"), e.get("device"), e.get("shareID")): {
            c.get("type"): c for c in e.get("conditions") or ()
        }
        for e in status.get("devices") or ()
    }
    found = []
    for result in (allocation.get("devices") or {}).get("results") or ():
        wanted = tuple(result.get("bindingConditions") or ())
        if result.get("driver") != driver or not wanted or not publishes(result["pool"]):
            continue
        conditions = entries.get((driver, result["pool"], result["device"], result.get("shareID")))
        conditions = conditions or {}
        failures = tuple(result.get("bindingFailureConditions") or ())
        if any(conditions.get(t, {}).get("status") == "True" for t in failures):
            continue
        if all(conditions.get(t, {}).get("status") == "True" for t in wanted):
            continue
        found.append(
            BindingDevice(
                namespace=str(meta.get("namespace") or ""),
                claim=str(meta.get("name") or ""),
                claim_uid=str(meta.get("uid") or ""),
                driver=driver,
                pool=result["pool"],
                device=result["device"],
                request=str(result.get("request") or ""),
                share_id=result.get("shareID"),
                node=allocated_node(allocation),
                binding_conditions=wanted,
                binding_failure_conditions=failures,
                allocated_at=str(allocation.get("allocationTimestamp") or ""),
                retry=any(conditions.get(t, {}).get("reason") == ATTACHING for t in wanted),
            )
        )
    return found


def conditions(
    device: BindingDevice, reason: str, failed: BindingFailedError | None = None
) -> list[DeviceCondition]:
    """The device's conditions: its binding conditions False while attaching (``reason``
    ATTACHING), True once attached; for a ``failed`` attach, False, and its failure
    condition True."""
    where = f" to node {device.node}" if device.node else ""
    if reason == ATTACHING:
        status, message = "False", f"attaching{where}"
    elif failed is None:
        status, message = "True", f"attached{where}"
    else:
        status, message = "False", failed.message
    found: list[DeviceCondition] = [
        {"type": t, "status": status, "reason": reason, "message": message}
        for t in device.binding_conditions
    ]
    if failed is not None:
        chosen = failed.condition or next(iter(device.binding_failure_conditions), "")
        if chosen:
            found.append({"type": chosen, "status": "True", "reason": reason, "message": message})
    return found
