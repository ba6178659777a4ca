"""The kubelet half of a DRA driver: registration with kubelet and the DRA gRPC service.

Needs the ``kubelet`` extra (grpcio, protobuf; docs/install.md)::

    from resourceslice import kubeletplugin

    class MyPlugin:
        def prepare_resource_claims(self, claims):      # or async def
            return kubeletplugin.prepare_each(claims, self.prepare_claim)

        def prepare_claim(self, claim):                 # a v1 ResourceClaim (TypedDict)
            devices = kubeletplugin.allocated_devices(claim, DRIVER, MyConfig)
            return [d.prepared(cdi_device_ids=[...]) for d in devices]   # d.config: MyConfig

        def unprepare_resource_claims(self, claims):  # c.record: what prepare recorded
            return {c.uid: None for c in claims}

    helper = kubeletplugin.start(MyPlugin(), driver="gpu.example.com", api_client=client,
                                 node_name=os.environ["NODE_NAME"])
    helper.publish_resources(resourceslice.DriverResources(pools={...}))

Which thread runs what:

- ``prepare_resource_claims`` / ``unprepare_resource_claims``: a plain function on a gRPC
  thread (one call at a time with ``serialize``); a coroutine function on the event loop:
  ``start(loop=...)``, else the loop running where ``start()`` was called (``async with
  kubeletplugin.start(...)`` in the driver's coroutine), else a thread with a loop of the
  helper's own. The gRPC thread waits for it, until kubelet's deadline.
- ``watch_health``: a plain iterator on the gRPC thread of the stream, an async one on that
  same event loop.
- ``error_handler``: a plain function, on the thread that saw the error (a gRPC thread, the
  controller's worker).

``async with`` stops the helper on a thread at its end, so the loop goes on serving the calls
in flight meanwhile.

The helper keeps a checkpoint of the claims the driver prepared (``helper.checkpoint``,
:mod:`~resourceslice.kubeletplugin.prepared`): a repeated prepare is answered from it, and
unprepare gets what prepare recorded. With ``device_metadata``, each prepared request gets a
metadata file in its containers (:mod:`~resourceslice.kubeletplugin.metadata`). See
docs/kubelet-plugin.md, the README's driver and ``examples/``.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

from resourceslice.kubeletplugin.allocation import AllocatedDevice, allocated_devices, prepare_each
from resourceslice.kubeletplugin.cdi import DEFAULT_CDI_DIR, CDISpecWriter
from resourceslice.kubeletplugin.claims import (
    AllocationResult,
    DeviceAllocationConfiguration,
    DeviceRequestAllocationResult,
    OpaqueDeviceConfiguration,
    ResourceClaim,
)
from resourceslice.kubeletplugin.config import ConfigError, decode_config
from resourceslice.kubeletplugin.helper import Helper, start
from resourceslice.kubeletplugin.interceptors import Handler, Interceptor, InterceptorFunction
from resourceslice.kubeletplugin.metadata import METADATA_V1ALPHA1, METADATA_V1BETA1
from resourceslice.kubeletplugin.prepared import Checkpoint, CheckpointStats
from resourceslice.kubeletplugin.reconcile import Reconciliation
from resourceslice.kubeletplugin.registration import (
    DRA_V1,
    DRA_V1BETA1,
    HEALTH_V1,
    HEALTH_V1ALPHA1,
    KUBELET_PLUGINS_DIR,
    KUBELET_REGISTRY_DIR,
    rolling_update_registrar_socket,
)
from resourceslice.kubeletplugin.types import (
    ClaimRecord,
    ClaimRef,
    DeviceHealth,
    DeviceMetadata,
    HealthNotSupportedError,
    HealthReporter,
    HealthStatus,
    Plugin,
    PreparedDevice,
    PrepareResult,
    PrepareResults,
    UnprepareResults,
)

if TYPE_CHECKING:
    #: Deprecated: :class:`PreparedDevice` (``resourceslice.Device`` is a published device).
    Device = PreparedDevice

__all__ = [
    "DEFAULT_CDI_DIR",
    "DRA_V1",
    "DRA_V1BETA1",
    "HEALTH_V1",
    "HEALTH_V1ALPHA1",
    "KUBELET_PLUGINS_DIR",
    "KUBELET_REGISTRY_DIR",
    "METADATA_V1ALPHA1",
    "METADATA_V1BETA1",
    "AllocatedDevice",
    "AllocationResult",
    "CDISpecWriter",
    "Checkpoint",
    "CheckpointStats",
    "ClaimRecord",
    "ClaimRef",
    "ConfigError",
    "DeviceAllocationConfiguration",
    "DeviceHealth",
    "DeviceMetadata",
    "DeviceRequestAllocationResult",
    "Handler",
    "HealthNotSupportedError",
    "HealthReporter",
    "HealthStatus",
    "Helper",
    "Interceptor",
    "InterceptorFunction",
    "OpaqueDeviceConfiguration",
    "Plugin",
    "PrepareResult",
    "PrepareResults",
    "PreparedDevice",
    "Reconciliation",
    "ResourceClaim",
    "UnprepareResults",
    "allocated_devices",
    "decode_config",
    "prepare_each",
    "rolling_update_registrar_socket",
    "start",
]


def __getattr__(name: str) -> Any:
    # The old name of PreparedDevice, which read as resourceslice.Device (a published
    # device): it still works, and says so once per place it is used.
    if name == "Device":
        warnings.warn(
            "resourceslice.kubeletplugin.PreparedDevice is deprecated: it is "
            "resourceslice.kubeletplugin.PreparedDevice (resourceslice.Device is a published "
            "device); see CHANGELOG.md",
            DeprecationWarning,
            stacklevel=2,
        )
        return PreparedDevice
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
