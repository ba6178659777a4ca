"""The ``resource.k8s.io`` version a cluster serves, and ResourceSlices converted to and from it.

The core plans, decodes and compares ResourceSlices in the shape of ``resource.k8s.io/v1``.
Clusters before Kubernetes 1.34 have no v1: 1.33 serves v1beta2, 1.32 only v1beta1. Like Go's
``k8s.io/dynamic-resource-allocation/client`` (its draclient), :class:`ResourceSliceAPI`
uses the newest of v1, v1beta2 and v1beta1 that the cluster serves, and converts at the edge:
v1 bodies into that version for writes, that version's objects into v1 for what the store
decodes. Unlike the draclient, which tries each version in turn until one answers, it asks
the API group which versions are served: once, on first use, and again after a request got
404 (the cluster was upgraded or downgraded, or the version was switched off).

Fields the served version does not have are sent as they are: the apiserver drops what it
does not know (as it drops fields of a feature gate that is off), the stored object comes
back without them, and the controller reports :class:`~resourceslice.DroppedFieldsError`
and does not write that pool again for the same desired state. Where dropping would leave
an object the apiserver rejects (a list-typed attribute left without a value, a slice
without any node selection) or the release has a rule of its own (1.33 wants a device's
counter sets in the device's own slice, which v1 forbids), the write is refused before it
is sent, with a :class:`~resourceslice.ValidationError` that names the fields and the
release: the pool is retried with backoff like any failed sync, but no request is made.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from resourceslice._http import (
    SliceLister,
    delete_options,
    get_json,
    request,
    send_json,
)
from resourceslice.api import RequestDeadlineError, ResourceSliceError, ValidationError
from resourceslice.connection import ApiError

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from resourceslice._http import ListOptions
    from resourceslice.connection import Client

log = logging.getLogger(__name__)

GROUP = "resource.k8s.io"
#: Most preferred first, as the draclient's order.
VERSIONS = ("v1", "v1beta2", "v1beta1")

_T = TypeVar("_T")


class NoResourceAPIError(RuntimeError, ResourceSliceError):
    """The cluster serves none of the ``resource.k8s.io`` versions this package speaks."""

    def __init__(self, served: list[str]) -> None:
        self.served = served
        super().__init__(
            f"the cluster serves none of {GROUP} {', '.join(VERSIONS)} (served: "
            f"{', '.join(served) or 'none'}); before Kubernetes 1.34, DRA needs the "
            "DynamicResourceAllocation feature gate and "
            f"--runtime-config={GROUP}/v1beta1=true (1.32) or /v1beta2=true (1.33)"
        )


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def _flatten_device(device: Any) -> Any:
    """A v1beta1 device (``{"name", "basic": {...}}``) in the v1 shape (the fields inline)."""
    if not isinstance(device, dict) or "basic" not in device:
        return device
    flat = {key: value for key, value in device.items() if key != "basic"}
    basic = device["basic"]
    if isinstance(basic, dict):
        flat.update(basic)
    return flat


def _wrap_device(device: Any) -> Any:
    """A v1 device in the v1beta1 shape: everything but the name goes into ``basic``."""
    if not isinstance(device, dict):
        return device
    return {
        "name": device.get("name"),
        "basic": {key: value for key, value in device.items() if key != "name"},
    }


#: The fields of a v1beta1 DeviceRequest that v1 (and v1beta2) moved under ``exactly``.
_EXACT_REQUEST_FIELDS = (
    "deviceClassName",
    "selectors",
    "allocationMode",
    "count",
    "adminAccess",
    "tolerations",
    "capacity",
    "derivedAttributes",
)


def _is_set(value: Any) -> bool:
    """Whether a v1beta1 request field holds a value (Go's test: not its zero value; a
    ``false`` adminAccess is a value, an empty deviceClassName is not)."""
    if value is None or value == "":
        return False
    return not (type(value) is int and value == 0)


def _nest_request(request: Any) -> Any:
    """A v1beta1 DeviceRequest in the v1 shape: its inline fields under ``exactly`` (when any
    is set, as Go's conversion: a ``firstAvailable`` request has none)."""
    if not isinstance(request, dict):
        return request
    exact = {k: request[k] for k in _EXACT_REQUEST_FIELDS if _is_set(request.get(k))}
    nested = {k: v for k, v in request.items() if k not in _EXACT_REQUEST_FIELDS}
    if exact:
        nested["exactly"] = exact
    return nested


def _map_devices(obj: Any, convert: Callable[[Any], Any]) -> None:
    spec = obj.get("spec") if isinstance(obj, dict) else None
    if isinstance(spec, dict) and isinstance(spec.get("devices"), list):
        spec["devices"] = [convert(device) for device in spec["devices"]]


_LIST_VALUES = ("ints", "bools", "strings", "versions")


def _inexpressible(obj: Any, release: tuple[int, int]) -> list[str]:
    """What a v1 ResourceSlice has that a cluster of ``release`` (before 1.34) would reject.

    Only what the apiserver would answer with 422 once it dropped the fields it does not
    know; fields whose loss leaves a valid object are left to DroppedFieldsError.
    """
    spec = obj.get("spec") if isinstance(obj, dict) else None
    if not isinstance(spec, dict):
        return []
    where = f"Kubernetes {release[0]}.{release[1]}"
    problems = []
    if release < (1, 33) and spec.get("perDeviceNodeSelection"):
        problems.append(f"spec.perDeviceNodeSelection: needs Kubernetes 1.33 or later, not {where}")
    own_sets = {c.get("name") for c in spec.get("sharedCounters") or () if isinstance(c, dict)}
    for i, device in enumerate(spec.get("devices") or ()):
        if not isinstance(device, dict):
            continue
        for name, attribute in sorted((device.get("attributes") or {}).items()):
            if isinstance(attribute, dict) and any(k in attribute for k in _LIST_VALUES):
                problems.append(
                    f"spec.devices[{i}].attributes[{name!r}]: list-typed values need "
                    f"Kubernetes 1.36 or later, not {where}"
                )
        consumed = [c for c in device.get("consumesCounters") or () if isinstance(c, dict)]
        if release == (1, 33) and any(c.get("counterSet") not in own_sets for c in consumed):
            problems.append(
                f"spec.devices[{i}].consumesCounters: {where} wants the counter sets a device "
                "consumes in the device's own ResourceSlice; resource.k8s.io/v1 (which this "
                "package follows) wants them in slices of their own"
            )
    return problems


@dataclass(frozen=True)
class SliceVersion:
    """One served version of ResourceSlices: its paths and the conversions from and to v1;
    and of the ResourceClaims the kubelet plugin reads (:meth:`claim_to_v1`).

    Besides the wrapping of v1beta1's devices, the versions' JSON differs only in
    ``apiVersion`` (which the core does not read) and in fields that older releases lack
    (left to the apiserver, see the module doc): v1beta1's ``spec.nodeName`` and
    ``spec.allNodes`` are plain values where v1 has optional ones, which only changes
    whether an empty value is written, and the core writes none.
    """

    version: str
    #: The cluster's Kubernetes ``(major, minor)`` where it matters: releases without v1.
    release: tuple[int, int] | None = None

    @property
    def api_version(self) -> str:
        return f"{GROUP}/{self.version}"

    @property
    def path(self) -> str:
        return f"/apis/{GROUP}/{self.version}/resourceslices"

    def to_served(self, body: bytes) -> bytes:
        """A v1 ResourceSlice body as this version's body.

        ValidationError for what this release would reject (see :func:`_inexpressible`).
        """
        if self.version == "v1":
            return body
        obj = json.loads(body)
        if self.release is not None:
            problems = _inexpressible(obj, self.release)
            if problems:
                name = obj.get("metadata", {}).get("name", "")
                raise ValidationError([f"ResourceSlice {name!r}: {p}" for p in problems])
        obj["apiVersion"] = self.api_version
        if self.version == "v1beta1":
            _map_devices(obj, _wrap_device)
        return _dumps(obj)

    def object_to_v1(self, data: bytes) -> bytes:
        """A ResourceSlice, or a list of them, of this version as v1 (for the core to decode)."""
        if self.version != "v1beta1":
            return data  # the same shape; only apiVersion differs
        obj = json.loads(data)
        items = obj.get("items") if isinstance(obj, dict) else None
        for item in items if isinstance(items, list) else [obj]:
            _map_devices(item, _flatten_device)
        return _dumps(obj)

    def claim_to_v1(self, claim: dict[str, Any]) -> dict[str, Any]:
        """A ResourceClaim of this version, decoded, as v1 (changed in place; returned).

        v1beta2 claims are v1's but for ``apiVersion``; v1beta1 requests have the fields of
        an exact request inline. Older releases lack some fields, which are then absent.
        """
        claim["apiVersion"] = f"{GROUP}/v1"
        if self.version == "v1beta1":
            devices = (claim.get("spec") or {}).get("devices")
            if isinstance(devices, dict) and isinstance(devices.get("requests"), list):
                devices["requests"] = [_nest_request(r) for r in devices["requests"]]
        return claim

    def event_to_v1(self, line: bytes) -> bytes:
        """One watch event line of this version as v1."""
        if self.version != "v1beta1":
            return line
        event = json.loads(line)
        if isinstance(event, dict):
            _map_devices(event.get("object"), _flatten_device)
        return _dumps(event)


def _no_budget() -> None:
    return None


def _no_outcome(answered: bool) -> None:
    return None


class ServedVersion:
    """The newest ``resource.k8s.io`` version the cluster serves, asked once and again after
    a 404: for slices (:class:`ResourceSliceAPI`) and for claims (the kubelet plugin, the
    claim status writer), one group, one answer. Thread-safe."""

    def __init__(self, api_client: Client) -> None:
        self._client = api_client
        self._lock = threading.Lock()
        self._current: SliceVersion | None = None

    def current(self, total: float | None = None) -> SliceVersion:
        """The version in use, discovered from the cluster the first time; ``total``: at
        most that many seconds for the discovery (then sent once), as the request it serves
        has (a kubelet call's claim read)."""
        with self._lock:
            if self._current is not None:
                return self._current
        found = self._discover(total)
        with self._lock:
            if self._current != found:
                log.info("using %s for ResourceSlices", found.api_version)
            self._current = found
        return found

    def forget(self, version: SliceVersion) -> None:
        """After a 404 in ``version``: the next request asks the cluster again."""
        with self._lock:
            if self._current == version:
                self._current = None

    def _get(self, path: str, total: float | None) -> Any:
        return json.loads(request(self._client, "GET", path, total=total).data)

    def _discover(self, total: float | None) -> SliceVersion:
        deadline = None if total is None else time.monotonic() + total
        try:
            group = self._get(f"/apis/{GROUP}", total)
        except ApiError as exc:
            if exc.status == 404:  # the whole group is off
                raise NoResourceAPIError([]) from exc
            raise
        served = [entry.get("version", "") for entry in group.get("versions") or ()]
        for version in VERSIONS:
            if version in served:
                # Without v1 the cluster is older than 1.34: its release says what it lacks.
                if "v1" in served:
                    return SliceVersion(version, None)
                left = None if deadline is None else deadline - time.monotonic()
                return SliceVersion(version, self._release(left))
        raise NoResourceAPIError(served)

    def _release(self, total: float | None) -> tuple[int, int] | None:
        info = self._get("/version", total)
        # minor may carry a suffix ("33+" on some distributions).
        major, minor = (re.match(r"\d*", str(info.get(k, ""))) for k in ("major", "minor"))
        if not (major and major.group() and minor and minor.group()):
            return None
        return (int(major.group()), int(minor.group()))


class ResourceSliceAPI:
    """ResourceSlice requests in the newest version the cluster serves, with v1 bodies.

    Thread-safe: the informer and the controller's workers share one. ``write_budget``, if
    given, is asked just before each write is sent for the seconds it may take at most
    (a leader's writes end before its lease could pass to another replica); it raises to
    stop the write. ``write_ended(answered)`` is told when a write given a budget is over,
    and whether its outcome is known: the server answered it, or it was not sent at all
    (else the write may still commit: the leader then does not hand its Lease straight to a
    successor).
    """

    def __init__(
        self,
        api_client: Client,
        write_budget: Callable[[], float | None] | None = None,
        write_ended: Callable[[bool], None] | None = None,
    ) -> None:
        self._client = api_client
        self._write_budget = write_budget or _no_budget
        self._write_ended = write_ended or _no_outcome
        self._served = ServedVersion(api_client)

    def current(self, total: float | None = None) -> SliceVersion:
        """:meth:`ServedVersion.current`."""
        return self._served.current(total)

    def forget(self, version: SliceVersion) -> None:
        """:meth:`ServedVersion.forget`."""
        self._served.forget(version)

    def _call(self, version: SliceVersion, request: Callable[[], _T]) -> _T:
        try:
            return request()
        except ApiError as exc:
            if exc.status == 404:
                self.forget(version)
            raise

    def _write(self, version: SliceVersion, send: Callable[[float | None], bytes]) -> bytes:
        """``send(deadline)`` once, by the write budget's deadline; its outcome told."""
        budget = self._write_budget()
        # One deadline, fixed as the budget is granted: what comes before the request leaves
        # (the body's conversion, the token refresh) is spent from it, not added to it.
        deadline = None if budget is None else time.monotonic() + budget
        answered = False
        try:
            data = self._call(version, lambda: send(deadline))
            answered = True
            return data
        except (ApiError, RequestDeadlineError):
            # Answered, or not sent because the deadline passed first: either way nothing of
            # it can land later, so the leader may hand its Lease over.
            answered = True
            raise
        finally:
            if budget is not None:
                self._write_ended(answered)

    # -- the requests the controller, the informer and the CLI make ------------------------

    def create(self, body: bytes) -> bytes:
        """POST a v1 body; the stored object as v1."""
        v = self.current()
        data = self._write(
            v, lambda deadline: send_json(self._client, "POST", v.path, v.to_served(body), deadline)
        )
        return v.object_to_v1(data)

    def update(self, name: str, body: bytes) -> bytes:
        """PUT a v1 body; the stored object as v1."""
        v = self.current()
        data = self._write(
            v,
            lambda deadline: send_json(
                self._client, "PUT", f"{v.path}/{name}", v.to_served(body), deadline
            ),
        )
        return v.object_to_v1(data)

    def get(self, name: str) -> bytes:
        """GET one slice; the stored object as v1 (ApiError 404 when there is none)."""
        v = self.current()
        data = self._call(v, lambda: get_json(self._client, f"{v.path}/{name}"))
        return v.object_to_v1(data)

    def delete(self, name: str, uid: str, resource_version: str) -> bytes:
        """DELETE with preconditions; the object as v1 as the server answered (a finalizer
        keeps it, with ``deletionTimestamp`` set); ApiError as the server answered (404
        included)."""
        v = self.current()
        options = delete_options(uid, resource_version)
        data = self._write(
            v,
            lambda deadline: send_json(
                self._client, "DELETE", f"{v.path}/{name}", options, deadline
            ),
        )
        return v.object_to_v1(data)

    def list(self, field_selector: str) -> bytes:
        """The list (a ``ResourceSliceList``) as v1, read whole (the CLI, tests)."""
        v = self.current()
        data = self._call(
            v, lambda: get_json(self._client, v.path, [("fieldSelector", field_selector)])
        )
        return v.object_to_v1(data)

    def list_resource_slice(self, **options: Unpack[ListOptions]) -> Any:
        """:class:`~resourceslice._http.SliceLister`'s list or watch, in the served version.

        The informer's ``api``: the streamed response, whose chunks are v1 (a v1beta1 one is
        converted as it is read: the whole list, or each watch event line).
        """
        v = self.current()
        response = self._call(
            v, lambda: SliceLister(self._client, v.path).list_resource_slice(**options)
        )
        if v.version != "v1beta1":
            return response  # the same JSON as v1 but for apiVersion
        return _ConvertedResponse(response, v, options.get("watch", False))


class _ConvertedResponse:
    """A streamed v1beta1 response whose ``stream()`` gives v1 JSON.

    A list is converted whole (v1beta1 lists exist only on clusters before 1.34, which the
    chunked decoding's memory bound was not made for); a watch line by line as it arrives.
    ``isclosed``, ``release_conn``, ``close``, ``shutdown`` (the informer's stop) go to the
    response.
    """

    def __init__(self, response: Any, version: SliceVersion, watch: bool) -> None:
        self._response = response
        self._version = version
        self._watch = watch

    def __getattr__(self, name: str) -> Any:
        return getattr(self._response, name)

    def stream(self, amount: int) -> Iterator[bytes]:
        if not self._watch:
            yield self._version.object_to_v1(b"".join(self._response.stream(amount)))
            return
        pending = bytearray()
        for chunk in self._response.stream(amount):
            pending += chunk
            *lines, rest = bytes(pending).split(b"\n")
            pending = bytearray(rest)
            converted = [self._version.event_to_v1(line) for line in lines if line.strip()]
            if converted:
                yield b"\n".join(converted) + b"\n"
        if pending.strip():
            yield self._version.event_to_v1(bytes(pending))
