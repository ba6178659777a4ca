"""A driver's status of its allocated devices in a ResourceClaim: ``status.devices``.

After a claim is allocated, the driver may report, per device, ``conditions`` (``Ready``…),
driver-specific ``data`` and ``networkData`` (the interface, its IPs, its hardware address)
in the claim's ``status.devices``, a list that every driver of the claim shares.
:class:`DeviceStatusWriter` sets, replaces or clears one device's entry, keyed as the API
keys it (driver, pool, device, share ID), and never touches anything else:

- **Server-side apply, one field manager per entry.** Apply keeps what other managers own
  and removes only what this manager stops applying. A manager that applied two entries
  and then applies one has removed the other, so each entry gets a manager of its own
  (``<base>/<pool>/<device>[/<shareID>]``, the base being the driver's name, and
  ``<driver>/<node>`` for a kubelet plugin): setting one device never needs to know, read
  or rewrite the others, and two threads writing two devices of one claim cannot undo each
  other. Clearing applies nothing under that manager, which removes what it owned. The
  cost: one request and one ``managedFields`` entry per device (a claim has at most 32).
- **Conflicts are reported, never forced.** Another manager (another driver, or another
  writer of the same driver) that owns a field of the entry with another value makes the
  apiserver refuse the write: :class:`DeviceStatusConflictError` names it and the fields.
- **Checked before it is sent.** The entry is checked with the apiserver's rules
  (conditions as ``metav1.Condition``, at most 8; data a JSON object of at most 10 KiB as
  the apiserver encodes it; networkData's interfaceName, IPs in canonical CIDR form,
  hardwareAddress): a bad entry raises :class:`~resourceslice.ValidationError` naming each
  bad path, and nothing is sent. ``tests/vectors/claimstatus.json`` holds Kubernetes'
  verdicts these rules agree with.
- **Every served version.** The claim is written in the newest of ``resource.k8s.io``
  v1, v1beta2, v1beta1 the cluster serves, and returned in the v1 shape.

Permissions: ``patch`` on ``resourceclaims/status``, and, from Kubernetes 1.36
(``DRAResourceClaimGranularStatusAuthorization``), a verb on the synthetic
``resourceclaims/driver`` subresource named after the driver: ``associated-node:patch``
for a kubelet plugin writing claims allocated on its own node with its pod's service
account token, ``arbitrary-node:patch`` for any other writer (docs/security.md).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import re
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypedDict, Union
from urllib.parse import quote

from resourceslice._apiversion import ServedVersion, SliceVersion
from resourceslice._claimstatus_checks import (
    MAX_DATA_DEPTH,
    MAX_FIELD_MANAGER,
    data_size,
    device_status_problems,
)
from resourceslice._http import request
from resourceslice._names import is_driver_name
from resourceslice.api import (
    RequestDeadlineError,
    ResourceSliceError,
    ValidationError,
    _PickledByFields,
)
from resourceslice.connection import ApiError

if TYPE_CHECKING:
    from resourceslice.connection import Client


class DeviceCondition(TypedDict, total=False):
    """A ``metav1.Condition``: ``type``, ``status`` (``"True"``, ``"False"``,
    ``"Unknown"``) and ``reason`` are required; ``lastTransitionTime`` (RFC 3339) is filled
    in when absent (see :meth:`DeviceStatusWriter.set`)."""

    type: str
    status: str
    reason: str
    message: str
    lastTransitionTime: str
    observedGeneration: int


class NetworkDeviceData(TypedDict, total=False):
    """``networkData``: ``ips`` are addresses with their prefix length in canonical form
    (``"10.9.8.7/24"``, ``"2001:db8::7/64"``)."""

    interfaceName: str
    ips: list[str]
    hardwareAddress: str


class DeviceStatus(TypedDict, total=False):
    """One entry of ``status.devices``, as the API has it."""

    driver: str
    pool: str
    device: str
    shareID: str
    conditions: list[DeviceCondition]
    data: dict[str, Any]
    networkData: NetworkDeviceData


class ClaimKey(Protocol):
    """What names a claim: ``kubeletplugin.ClaimRef`` is one."""

    @property
    def namespace(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def uid(self) -> str: ...


#: A claim as a dict (``metadata.namespace``, ``metadata.name``, and ``metadata.uid`` when
#: known), or a :class:`ClaimKey`.
Claim = Union[Mapping[str, Any], ClaimKey]


class DeviceStatusConflictError(_PickledByFields, ResourceSliceError):
    """The apiserver refused the write: other field managers own fields of the entry with
    other values. ``managers`` names them, ``fields`` the fields (as the apiserver gives
    them); nothing was written. The write is never forced: whoever owns the field decides."""

    _fields = ("claim", "managers", "fields")

    def __init__(self, claim: str, managers: Sequence[str], fields: Sequence[str]) -> None:
        self.claim = claim
        self.managers = list(managers)
        self.fields = list(fields)
        owners = ", ".join(self.managers) or "another field manager"
        super().__init__(
            f"claim {claim}: status.devices is also written by {owners}: "
            + "; ".join(self.fields or ["(no field named)"])
        )


class DeviceStatusDroppedError(_PickledByFields, ResourceSliceError):
    """The apiserver accepted the write but did not store all of it: ``paths`` names what
    it dropped. ``status.devices`` needs the ``DRAResourceClaimDeviceStatus`` feature gate
    (alpha and off in Kubernetes 1.32, on from 1.33); ``shareID`` needs
    ``DRAConsumableCapacity``."""

    _fields = ("claim", "paths")

    def __init__(self, claim: str, paths: Sequence[str]) -> None:
        self.claim = claim
        self.paths = list(paths)
        super().__init__(
            f"claim {claim}: the apiserver did not store {', '.join(self.paths)} (feature "
            "gate DRAResourceClaimDeviceStatus off? It is alpha and off in Kubernetes 1.32)"
        )


# -- the writes ------------------------------------------------------------------------------

#: Characters the apply patch must not carry as they are: it is YAML, whose parser refuses
#: DEL and the C1 controls, and folds its line breaks (NEL, U+2028, U+2029) in a quoted
#: string. JSON escapes keep the body JSON and the same value in YAML.
_YAML_UNSAFE = {
    c: f"\\u{c:04x}" for c in [0x7F, *range(0x80, 0xA0), 0x2028, 0x2029, 0xFEFF, 0xFFFE, 0xFFFF]
}


def apply_patch_body(obj: Any) -> bytes:
    """``obj`` as an apply patch (``application/apply-patch+yaml``): JSON that reads the
    same as YAML."""
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return text.translate(_YAML_UNSAFE).encode()


def _claim_id(claim: Claim) -> tuple[str, str, str]:
    """(namespace, name, uid) of a claim dict or a :class:`ClaimKey` (uid may be empty)."""
    if isinstance(claim, Mapping):
        meta = claim.get("metadata") or {}
        return (
            str(meta.get("namespace") or ""),
            str(meta.get("name") or ""),
            str(meta.get("uid") or ""),
        )
    return claim.namespace, claim.name, claim.uid or ""


def _same_key(entry: Mapping[str, Any], key: Mapping[str, Any]) -> bool:
    return all(entry.get(k) == key.get(k) for k in ("driver", "pool", "device", "shareID"))


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _depth(value: Any) -> int:
    """How many objects and lists ``value`` nests (0 for a scalar); without recursion."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, Mapping):
            deepest = max(deepest, level)
            stack.extend((v, level + 1) for v in item.values())
        elif isinstance(item, (list, tuple)):
            deepest = max(deepest, level)
            stack.extend((v, level + 1) for v in item)
    return deepest


def _as_json(value: Any) -> Any:
    """``value`` with its mappings as dicts and its tuples as lists: what json.dumps
    writes (nested at most MAX_DATA_DEPTH and a few levels, checked before)."""
    if isinstance(value, Mapping):
        return {key: _as_json(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_as_json(item) for item in value]
    return value


def _timed(
    claim: Claim, key: Mapping[str, Any], conditions: Sequence[Mapping[str, Any]]
) -> list[Any]:
    """Copies of the conditions, each with a ``lastTransitionTime``: as the claim's entry
    has it for the same type and status, else now (the status changed)."""
    current: dict[Any, Mapping[str, Any]] = {}
    if isinstance(claim, Mapping):
        for entry in (claim.get("status") or {}).get("devices") or ():
            if isinstance(entry, Mapping) and _same_key(entry, key):
                for old in entry.get("conditions") or ():
                    if isinstance(old, Mapping):
                        current[old.get("type")] = old
    now = _now()
    out: list[Any] = []
    for condition in conditions:
        if not isinstance(condition, Mapping):
            out.append(condition)  # the checks refuse it
            continue
        copied = dict(condition)
        if copied.get("lastTransitionTime") is None:
            old = current.get(copied.get("type"))
            kept = old.get("lastTransitionTime") if old is not None else None
            unchanged = old is not None and old.get("status") == copied.get("status")
            copied["lastTransitionTime"] = kept if unchanged and kept else now
        out.append(copied)
    return out


def _conflict(exc: ApiError) -> tuple[list[str], list[str]]:
    """The managers and fields a 409 of server-side apply names."""
    try:
        causes = (json.loads(exc.body or "{}").get("details") or {}).get("causes") or []
    except ValueError:
        causes = []
    managers: list[str] = []
    fields: list[str] = []
    for cause in causes:
        found = re.match(r'conflict with "([^"]*)"', str(cause.get("message", "")))
        if found and found.group(1) not in managers:
            managers.append(found.group(1))
        if cause.get("field"):
            fields.append(str(cause["field"]))
    return managers, fields


class DeviceStatusWriter:
    """Writes a driver's entries of ``status.devices`` (see the module doc).

    ``driver``: the driver whose devices these are. ``node_name``: for a kubelet plugin,
    its node (the field managers say which node wrote an entry). ``field_manager``: the base
    of the managers' names instead of ``<driver>`` or ``<driver>/<node>``; writers that
    share a base (a Deployment's replicas, a DaemonSet pod and its successor) may replace
    each other's entries, other bases conflict. Thread-safe.
    """

    def __init__(
        self,
        api_client: Client,
        *,
        driver: str,
        node_name: str | None = None,
        field_manager: str | None = None,
    ) -> None:
        if not is_driver_name(driver) or driver != driver.lower():
            raise ValueError(f"driver {driver!r}: must be a DNS subdomain in lower case")
        base = field_manager or (f"{driver}/{node_name}" if node_name else driver)
        if not base.isprintable() or not base.isascii():
            raise ValueError(f"field manager {base!r}: must be printable ASCII")
        self.driver = driver
        self.base = base
        self._client = api_client
        self._served = ServedVersion(api_client)

    def field_manager(self, pool: str, device: str, share_id: str | None = None) -> str:
        """The field manager of one entry: ``<base>/<pool>/<device>[/<shareID>]``; a name
        over the apiserver's 128 characters is cut, and ends with a hash of the whole."""
        name = f"{self.base}/{pool}/{device}" + (f"/{share_id}" if share_id else "")
        if len(name) <= MAX_FIELD_MANAGER:
            return name
        digest = hashlib.sha256(name.encode()).hexdigest()[:16]
        return f"{name[: MAX_FIELD_MANAGER - 17]}~{digest}"

    def set(
        self,
        claim: Claim,
        *,
        pool: str,
        device: str,
        share_id: str | None = None,
        conditions: Sequence[DeviceCondition] = (),
        data: Mapping[str, Any] | None = None,
        network_data: NetworkDeviceData | None = None,
        deadline: float | None = None,
    ) -> dict[str, Any]:
        """Set the entry of ``pool``/``device`` (and ``share_id``) in ``claim`` to what is
        given here, as this writer's: what it set before and omits now is removed; what
        other managers own stays. Returns the claim as stored, in the v1 shape.

        A condition without ``lastTransitionTime`` gets the one ``claim`` (a dict) has for
        its type when the status is unchanged, else now: the time the status changed.
        ``claim``'s ``metadata.uid``, when known, must still be the claim's (a claim
        replaced by one of the same name is not written: ApiError 422).

        Raises ValidationError (nothing sent) for an entry the apiserver would refuse,
        DeviceStatusConflictError when another manager owns a field of it with another
        value, DeviceStatusDroppedError when the apiserver did not store it, ApiError
        for the rest (404: no such claim; 422: the device is not allocated in the claim).

        ``deadline`` (``time.monotonic()``): the write is over by then, or not sent at all
        (:class:`~resourceslice.RequestDeadlineError`): a leader's write must end with its
        term (:mod:`resourceslice.binding` writes so).
        """
        namespace, name, uid = _claim_id(claim)
        entry: dict[str, Any] = self._key(pool, device, share_id)
        if conditions:
            entry["conditions"] = _timed(claim, entry, conditions)
        if data is not None:
            entry["data"] = data
        if network_data is not None:
            entry["networkData"] = network_data
        self._refuse(None, namespace, name, entry)  # before any request
        version = self._version(deadline)
        self._refuse(version, namespace, name, entry)
        sent = _as_json(entry)
        stored = self._apply(version, namespace, name, uid, sent, sent, deadline)
        self._check_stored(f"{namespace}/{name}", stored, sent)
        return stored

    def clear(
        self,
        claim: Claim,
        *,
        pool: str,
        device: str,
        share_id: str | None = None,
        deadline: float | None = None,
    ) -> dict[str, Any]:
        """Remove this writer's entry of ``pool``/``device`` (and ``share_id``) from
        ``claim``: what it set is removed, what other managers own stays (an entry that is
        not this writer's is left as it is). Returns the claim as stored, in the v1 shape.
        ValidationError for a key no entry can have (nothing sent). The apiserver removes
        the entries of a deallocated claim itself. ``deadline``: as :meth:`set`'s."""
        namespace, name, uid = _claim_id(claim)
        key = self._key(pool, device, share_id)
        self._refuse(None, namespace, name, key)
        version = self._version(deadline)
        self._refuse(version, namespace, name, key)
        return self._apply(version, namespace, name, uid, key, None, deadline)

    def _version(self, deadline: float | None) -> SliceVersion:
        """The served version; its discovery, when due, by ``deadline``."""
        if deadline is None:
            return self._served.current()
        left = deadline - time.monotonic()
        if left <= 0:
            raise RequestDeadlineError("a device status write: its deadline passed")
        return self._served.current(total=left)

    def _key(self, pool: str, device: str, share_id: str | None) -> dict[str, Any]:
        key: dict[str, Any] = {"driver": self.driver, "pool": pool, "device": device}
        if share_id is not None:
            key["shareID"] = share_id
        return key

    def _refuse(
        self, version: SliceVersion | None, namespace: str, name: str, entry: Mapping[str, Any]
    ) -> None:
        """ValidationError for what the apiserver would refuse in ``entry`` (or this
        library's limits); with ``version``, for what its release lacks."""
        if version is None:
            problems = device_status_problems(entry)
            if not (namespace and name):
                problems.append("claim: its metadata.namespace and metadata.name are required")
            if _depth(entry.get("data")) > MAX_DATA_DEPTH:
                problems.append(
                    f"data: nested more than {MAX_DATA_DEPTH} levels deep (a limit of this "
                    "library: the claim is read back with Python's json, which recurses)"
                )
        elif "shareID" in entry and version.release is not None and version.release < (1, 34):
            major, minor = version.release
            problems = [f"shareID: needs Kubernetes 1.34 or later, not {major}.{minor}"]
        else:
            problems = []
        if problems:
            where = f"{entry.get('driver')}/{entry.get('pool')}/{entry.get('device')}"
            raise ValidationError(
                problems, summary=f"invalid status of device {where} for claim {namespace}/{name}"
            )

    def _apply(
        self,
        version: SliceVersion,
        namespace: str,
        name: str,
        uid: str,
        key: Mapping[str, Any],
        entry: Mapping[str, Any] | None,
        deadline: float | None = None,
    ) -> dict[str, Any]:
        """Apply ``entry`` (None: no entry) as the field manager of ``key``'s entry."""
        meta = {"name": name, "namespace": namespace, **({"uid": uid} if uid else {})}
        body: dict[str, Any] = {
            "apiVersion": version.api_version,
            "kind": "ResourceClaim",
            "metadata": meta,
        }
        if entry is not None:
            body["status"] = {"devices": [entry]}
        path = (
            f"/apis/{version.api_version}/namespaces/{quote(namespace, safe='')}"
            f"/resourceclaims/{quote(name, safe='')}/status"
        )
        manager = self.field_manager(key["pool"], key["device"], key.get("shareID"))
        try:
            response = request(
                self._client,
                "PATCH",
                path,
                query=[("fieldManager", manager)],
                body=apply_patch_body(body),
                content_type="application/apply-patch+yaml",
                deadline=deadline,
            )
        except ApiError as exc:
            if exc.status == 404:
                self._served.forget(version)
            if exc.status == 409:
                managers, fields = _conflict(exc)
                raise DeviceStatusConflictError(f"{namespace}/{name}", managers, fields) from exc
            raise
        stored: dict[str, Any] = version.claim_to_v1(json.loads(response.data))
        return stored

    @staticmethod
    def _check_stored(claim: str, stored: Mapping[str, Any], sent: Mapping[str, Any]) -> None:
        """DeviceStatusDroppedError when the stored claim lacks what was sent."""
        found = [
            e
            for e in (stored.get("status") or {}).get("devices") or ()
            if isinstance(e, Mapping) and _same_key(e, sent)
        ]
        if not found:
            raise DeviceStatusDroppedError(claim, ["status.devices"])
        dropped = [
            f"status.devices[].{key}"
            for key in ("conditions", "data", "networkData")
            if key in sent and sent[key] and not found[0].get(key)
        ]
        if dropped:
            raise DeviceStatusDroppedError(claim, dropped)


__all__ = [
    "Claim",
    "ClaimKey",
    "DeviceCondition",
    "DeviceStatus",
    "DeviceStatusConflictError",
    "DeviceStatusDroppedError",
    "DeviceStatusWriter",
    "NetworkDeviceData",
    "apply_patch_body",
    "data_size",
    "device_status_problems",
]
