"""What a driver's kubelet plugin gives and gets: the callbacks and their results."""

from __future__ import annotations

import copy
import enum
from collections.abc import AsyncIterator, Awaitable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, Union

from resourceslice.api import ResourceSliceError
from resourceslice.kubeletplugin.claims import ResourceClaim

if TYPE_CHECKING:
    from resourceslice.claimstatus import NetworkDeviceData
    from resourceslice.types import DeviceAttribute


@dataclass(frozen=True)
class ClaimRef:
    """A claim kubelet names in a call: enough to find it, and its UID to tell it apart from
    a claim of the same name that replaced it.

    ``record``: in ``unprepare_resource_claims``, what the checkpoint recorded when the claim
    was prepared (its devices and the driver's ``data``), also after a restart; None when
    nothing is recorded (the checkpoint is off, or the claim was never prepared here).
    """

    namespace: str
    name: str
    uid: str
    record: ClaimRecord | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class DeviceMetadata:
    """What the containers using a device are told about it in their metadata file, when the
    helper writes them (``start(..., device_metadata=...)``; KEP-5304), as Go's
    ``kubeletplugin.DeviceMetadata``.

    ``attributes``: as a ResourceSlice's device has them (``{"model": {"string": "H100"}}``,
    keys qualified or in the driver's domain), best all those the slice publishes, and any
    known only at run time. ``network_data``: the interface's name, addresses and hardware
    address, as a claim's ``status.devices[].networkData`` (often known only once the pod's
    sandbox exists: then given later, to ``Helper.update_request_metadata``).
    """

    attributes: Mapping[str, DeviceAttribute] = field(default_factory=dict)
    network_data: NetworkDeviceData | None = None


@dataclass
class PreparedDevice:
    """One allocated device the plugin prepared for a claim (what kubelet is told of it:
    ``resourceslice.Device``, by contrast, is a device a ResourceSlice publishes).

    ``requests``: the claim's requests the device was allocated for (subrequests,
    ``req/sub``, are reported as their request); empty means all of them.
    ``cdi_device_ids``: what the container runtime injects (see :class:`CDISpecWriter`).
    ``share_id``: the allocation's share ID for devices allocated to several claims at once
    (``allowMultipleAllocations``); only ``v1.DRAPlugin`` carries it.
    ``metadata``: what goes into its requests' metadata files, when the helper writes them
    (ignored otherwise); the checkpoint does not record it (the files outlive the process).
    """

    pool_name: str
    device_name: str
    requests: Sequence[str] = ()
    cdi_device_ids: Sequence[str] = ()
    share_id: str | None = None
    metadata: DeviceMetadata | None = None


@dataclass
class PrepareResult:
    """The outcome for one claim: its devices, or an error (then the devices are ignored).

    ``data``: what the driver wants back at unprepare (a partition's ID, an interface's
    name), any JSON value; the checkpoint records it with the devices, and
    ``unprepare_resource_claims`` finds it in ``ClaimRef.record.data``.
    """

    devices: Sequence[PreparedDevice] = field(default_factory=list)
    error: str | BaseException | None = None
    data: Any = None


@dataclass(frozen=True)
class ClaimRecord:
    """What the checkpoint recorded for a claim once the driver prepared it.

    ``devices`` and ``data`` are the driver's :class:`PrepareResult`; ``cdi_specs`` the CDI
    specs :class:`CDISpecWriter` wrote for the claim during that prepare (file path: spec),
    which the helper restores when they are gone; ``allocation`` a digest of the claim's
    allocation of this driver's devices (another allocation is another preparation);
    ``prepared_at``: when it was recorded (Unix seconds).
    """

    uid: str
    namespace: str
    name: str
    devices: tuple[PreparedDevice, ...] = ()
    data: Any = None
    cdi_specs: Mapping[str, Any] = field(default_factory=dict)
    allocation: str = ""
    prepared_at: float = 0.0

    def result(self) -> PrepareResult:
        """The recorded result, as the driver's prepare returned it (fresh copies)."""
        return PrepareResult(
            devices=[
                PreparedDevice(
                    pool_name=d.pool_name,
                    device_name=d.device_name,
                    requests=list(d.requests),
                    cdi_device_ids=list(d.cdi_device_ids),
                    share_id=d.share_id,
                )
                for d in self.devices
            ],
            data=copy.deepcopy(self.data),
        )


PrepareResults = Mapping[str, PrepareResult]
#: Per claim UID: None when unprepared, else what went wrong.
UnprepareResults = Mapping[str, Union[str, BaseException, None]]


class HealthStatus(str, enum.Enum):
    UNKNOWN = "UNKNOWN"
    HEALTHY = "HEALTHY"
    UNHEALTHY = "UNHEALTHY"


@dataclass
class DeviceHealth:
    """A device's health as the plugin last saw it.

    ``last_updated``: Unix seconds (0: not given). ``timeout_seconds``: how long kubelet
    keeps the status without a newer report before it considers it unknown (0: kubelet's
    default of 30 s), so a plugin re-reports within it.
    """

    pool_name: str
    device_name: str
    health: HealthStatus
    last_updated: int = 0
    timeout_seconds: int = 0
    message: str = ""


class Plugin(Protocol):
    """The driver's side: what kubelet asks of it, through :func:`start`'s helper.

    Each method may be a plain function or a coroutine function (``async def``); coroutines
    run on the helper's event loop (the ``loop`` given to :func:`start`, else the loop running
    where it was called, else one of its own). Claims come as ``resource.k8s.io/v1`` on every
    cluster; :func:`~resourceslice.kubeletplugin.allocated_devices` picks the driver's devices
    of one, with their configuration, and :func:`~resourceslice.kubeletplugin.prepare_each`
    turns a per-claim function into these results.
    The helper serialises the calls (see ``serialize``), fetches the claims and checks that
    each still has the UID kubelet named, so a callback sees only allocated claims that exist.
    An exception from a callback fails every claim of the call, with its message as each
    claim's error; the plugin keeps serving.
    """

    def prepare_resource_claims(
        self, claims: list[ResourceClaim]
    ) -> PrepareResults | Awaitable[PrepareResults]:
        """Prepare the claims' devices (idempotent: kubelet repeats calls); results by UID."""
        ...

    def unprepare_resource_claims(
        self, claims: list[ClaimRef]
    ) -> UnprepareResults | Awaitable[UnprepareResults]:
        """Undo prepare (idempotent; the claims may be gone from the API already)."""
        ...


class HealthNotSupportedError(ResourceSliceError):
    """Raised by ``watch_health()``: this driver (or this node's devices) reports no health.

    kubelet is answered ``UNIMPLEMENTED`` and stops watching, as with Go's
    ``ErrHealthNotSupported``.
    """


class HealthReporter(Protocol):
    """Optional, beside :class:`Plugin`: a plugin with ``watch_health`` offers kubelet the
    health service, and kubelet reads it for as long as the plugin is registered.

    Each report is the whole list of devices whose health is known. ``watch_health()`` is
    called once per stream, and kubelet opens a new stream after each reconnect; when
    kubelet goes away the iterator is closed (an asynchronous one at once, a plain one when
    it yields next). Raise :class:`HealthNotSupportedError` to decline; any other exception
    fails the stream with the error, which the error handler also hears of.
    """

    def watch_health(
        self,
    ) -> Iterator[Sequence[DeviceHealth]] | AsyncIterator[Sequence[DeviceHealth]]: ...
