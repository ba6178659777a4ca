"""This driver's devices in a claim's allocation, each with the configuration that applies to it.

What every prepare callback does first, written once. A claim can hold devices of several
drivers, and its allocation carries configuration for several drivers; a driver prepares its
own devices with its own configuration. For each of its devices, the configuration entries
that apply are found as ``k8s.io/dynamic-resource-allocation/resourceclaim.ConfigForResult``
finds them: an entry naming no requests applies to all, else to the requests it names, a
``<request>/<subrequest>`` result being matched by its request's name too. They come in the
order of precedence Go's example driver applies: the DeviceClass's (``FromClass``) first,
then the claim's own (``FromClaim``), each in the order listed, so the last one wins.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, overload

from resourceslice.kubeletplugin.claims import DeviceRequestAllocationResult, ResourceClaim
from resourceslice.kubeletplugin.config import ConfigError, decode_config
from resourceslice.kubeletplugin.types import DeviceMetadata, PreparedDevice, PrepareResult

_C = TypeVar("_C")

#: Precedence of the configuration's sources, lowest first.
_SOURCES = ("FromClass", "FromClaim")


@dataclass(frozen=True)
class AllocatedDevice(Generic[_C]):
    """One of the driver's devices allocated in a claim: the allocation's ``result`` for it,
    and the ``configs`` that apply to it, lowest precedence first (``config``: the last)."""

    result: DeviceRequestAllocationResult
    configs: tuple[_C, ...] = ()

    @property
    def config(self) -> _C | None:
        """The configuration that wins (the claim's over the DeviceClass's); None: none."""
        return self.configs[-1] if self.configs else None

    @property
    def request(self) -> str:
        """The request it was allocated for (``<request>/<subrequest>`` for an alternative)."""
        return self.result["request"]

    @property
    def pool(self) -> str:
        return self.result["pool"]

    @property
    def name(self) -> str:
        return self.result["device"]

    @property
    def share_id(self) -> str | None:
        """The allocation's share ID, for a device allocated to several claims at once."""
        return self.result.get("shareID")

    def prepared(
        self, cdi_device_ids: Sequence[str] = (), *, metadata: DeviceMetadata | None = None
    ) -> PreparedDevice:
        """The :class:`PreparedDevice` to report for it once prepared, its share ID included;
        ``metadata``: what its request's metadata file says of it (when the helper writes
        them)."""
        return PreparedDevice(
            pool_name=self.pool,
            device_name=self.name,
            requests=[self.request],
            cdi_device_ids=cdi_device_ids,
            share_id=self.share_id,
            metadata=metadata,
        )


def _applies(requests: Sequence[str], request: str) -> bool:
    return not requests or request in requests or request.split("/")[0] in requests


@overload
def allocated_devices(
    claim: ResourceClaim, driver: str
) -> list[AllocatedDevice[dict[str, Any]]]: ...


@overload
def allocated_devices(
    claim: ResourceClaim, driver: str, config: type[_C]
) -> list[AllocatedDevice[_C]]: ...


def allocated_devices(
    claim: ResourceClaim, driver: str, config: type[Any] | None = None
) -> list[AllocatedDevice[Any]]:
    """The devices of ``driver`` allocated in ``claim``, in the allocation's order, each with
    the opaque configuration for ``driver`` that applies to it (see the module doc).

    ``config``: the driver's configuration type, a dataclass or a pydantic model
    (:func:`~resourceslice.kubeletplugin.config.decode_config`); without it, each
    configuration is its ``parameters`` as a dict. Every entry for ``driver`` is decoded,
    once, whether it applies to a device or not (as Go's example driver does): ConfigError
    names the entry that does not fit. Entries of other drivers are skipped (a request may
    be satisfied by several drivers, so a claim carries configuration for each).
    """
    allocation = claim["status"]["allocation"]["devices"]
    entries = list(enumerate(allocation.get("config") or ()))
    for i, entry in entries:
        if entry.get("source") not in _SOURCES:
            # Which would win is unknown: preparing with the wrong one is worse than failing.
            raise ConfigError(
                f"status.allocation.devices.config[{i}]: unknown source {entry.get('source')!r}"
            )
    found: list[tuple[Sequence[str], Any]] = []
    # sorted() keeps the order within a source.
    for i, entry in sorted(entries, key=lambda e: _SOURCES.index(e[1]["source"])):
        opaque = entry.get("opaque")
        # An entry without "opaque" is a kind of configuration newer than this package (the
        # API's only kind today): no driver can be told from it, as Go's helper skips it.
        if opaque is None or opaque.get("driver") != driver:
            continue
        parameters = opaque.get("parameters")
        where = f"status.allocation.devices.config[{i}].opaque.parameters"
        value = parameters if config is None else decode_config(parameters, config, where)
        found.append((entry.get("requests") or (), value))
    return [
        AllocatedDevice(
            result,
            tuple(value for requests, value in found if _applies(requests, result["request"])),
        )
        for result in allocation.get("results") or ()
        if result["driver"] == driver
    ]


def prepare_each(
    claims: Sequence[ResourceClaim],
    prepare: Callable[[ResourceClaim], Sequence[PreparedDevice] | PrepareResult],
) -> dict[str, PrepareResult]:
    """``prepare(claim)`` for each claim: its devices (or its whole :class:`PrepareResult`,
    to record ``data`` with them), or what it raised as that claim's error, the other claims
    unaffected (a configuration that does not decode fails its claim only). The results by
    claim UID, as ``prepare_resource_claims`` returns them."""
    results = {}
    for claim in claims:
        uid = claim["metadata"]["uid"]
        try:
            prepared = prepare(claim)
            if isinstance(prepared, PrepareResult):
                results[uid] = prepared
            else:
                results[uid] = PrepareResult(devices=list(prepared))
        except Exception as exc:
            results[uid] = PrepareResult(error=exc)
    return results


__all__ = ["AllocatedDevice", "allocated_devices", "prepare_each"]
