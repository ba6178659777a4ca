"""The kubelet half of a DRA driver: registration with kubelet and the DRA gRPC service.

Needs the ``kubelet`` extra (``pip install resourceslice[kubelet]``: grpcio, protobuf)::

    from resourceslice import kubeletplugin

    class MyPlugin:
        def prepare_resource_claims(self, claims):      # or async def
            return {c["metadata"]["uid"]: kubeletplugin.PrepareResult(devices=[...])
                    for c in claims}

        def unprepare_resource_claims(self, claims):
            return {c.uid: None for c in claims}

    helper = kubeletplugin.start(MyPlugin(), driver="gpu.example.com", api_client=client,
                                 node_name=os.environ["NODE_NAME"])
    helper.publish_resources(resourceslice.DriverResources(pools={...}))

See docs/kubelet-plugin.md, the README's driver and ``examples/``.
"""

from __future__ import annotations

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
    ClaimRef,
    Device,
    DeviceHealth,
    HealthNotSupportedError,
    HealthReporter,
    HealthStatus,
    Plugin,
    PrepareResult,
    PrepareResults,
    UnprepareResults,
)

__all__ = [
    "DEFAULT_CDI_DIR",
    "DRA_V1",
    "DRA_V1BETA1",
    "HEALTH_V1",
    "HEALTH_V1ALPHA1",
    "KUBELET_PLUGINS_DIR",
    "KUBELET_REGISTRY_DIR",
    "AllocatedDevice",
    "AllocationResult",
    "CDISpecWriter",
    "ClaimRef",
    "ConfigError",
    "Device",
    "DeviceAllocationConfiguration",
    "DeviceHealth",
    "DeviceRequestAllocationResult",
    "HealthNotSupportedError",
    "HealthReporter",
    "HealthStatus",
    "Helper",
    "OpaqueDeviceConfiguration",
    "Plugin",
    "PrepareResult",
    "PrepareResults",
    "ResourceClaim",
    "UnprepareResults",
    "allocated_devices",
    "decode_config",
    "prepare_each",
    "rolling_update_registrar_socket",
    "start",
]
