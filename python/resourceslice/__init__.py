"""Publish a DRA driver's devices as Kubernetes ResourceSlices.

``start_controller`` keeps the driver's ResourceSlices equal to its desired devices;
see the README for an example.
"""

from __future__ import annotations

from resourceslice._backend import core_backend
from resourceslice._poolfile import load_resources
from resourceslice._version import VERSION
from resourceslice.api import (
    ConflictingWriterError,
    DriverResources,
    DroppedFieldsError,
    Owner,
    Pool,
    RequestDeadlineError,
    ResourceSliceError,
    Slice,
    SliceExistsError,
    Stats,
    ValidationError,
)
from resourceslice.binding import (
    AttachCallback,
    BindingController,
    BindingDevice,
    BindingFailedError,
    BindingStats,
    start_binding_controller,
)
from resourceslice.claimstatus import (
    DeviceStatusConflictError,
    DeviceStatusDroppedError,
    DeviceStatusWriter,
)
from resourceslice.connection import ApiError, ConfigError, Connection, connect
from resourceslice.controller import (
    Controller,
    ControllerOptions,
    ControllerStoppedError,
    ErrorHandler,
    start_controller,
)
from resourceslice.devicetaintrules import (
    DeviceTaintRuleConflictError,
    DeviceTaintRuleExistsError,
    DeviceTaintRules,
    DeviceTaintSelector,
    NoDeviceTaintRuleAPIError,
)
from resourceslice.health import Health
from resourceslice.leaderelection import LeaderElection, LeadershipLostError
from resourceslice.preview import plan, validate
from resourceslice.probes import HealthServer, ServerLimits, serve_health
from resourceslice.types import (
    CapacityRequestPolicy,
    CapacityRequestPolicyRange,
    Counter,
    CounterSet,
    Device,
    DeviceAttribute,
    DeviceCapacity,
    DeviceCounterConsumption,
    DeviceTaint,
    KubernetesModel,
    NodeAllocatableMapping,
    NodeAllocatableOverhead,
    NodeAllocatableResource,
    NodeOperation,
    NodeSelector,
    NodeSelectorOperator,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    Quantity,
    TaintEffect,
)

__version__ = VERSION

__all__ = [
    "ApiError",
    "AttachCallback",
    "BindingController",
    "BindingDevice",
    "BindingFailedError",
    "BindingStats",
    "CapacityRequestPolicy",
    "CapacityRequestPolicyRange",
    "ConfigError",
    "ConflictingWriterError",
    "Connection",
    "Controller",
    "ControllerOptions",
    "ControllerStoppedError",
    "Counter",
    "CounterSet",
    "Device",
    "DeviceAttribute",
    "DeviceCapacity",
    "DeviceCounterConsumption",
    "DeviceStatusConflictError",
    "DeviceStatusDroppedError",
    "DeviceStatusWriter",
    "DeviceTaint",
    "DeviceTaintRuleConflictError",
    "DeviceTaintRuleExistsError",
    "DeviceTaintRules",
    "DeviceTaintSelector",
    "DriverResources",
    "DroppedFieldsError",
    "ErrorHandler",
    "Health",
    "HealthServer",
    "KubernetesModel",
    "LeaderElection",
    "LeadershipLostError",
    "NoDeviceTaintRuleAPIError",
    "NodeAllocatableMapping",
    "NodeAllocatableOverhead",
    "NodeAllocatableResource",
    "NodeOperation",
    "NodeSelector",
    "NodeSelectorOperator",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "Owner",
    "Pool",
    "Quantity",
    "RequestDeadlineError",
    "ResourceSliceError",
    "ServerLimits",
    "Slice",
    "SliceExistsError",
    "Stats",
    "TaintEffect",
    "ValidationError",
    "connect",
    "core_backend",
    "load_resources",
    "plan",
    "serve_health",
    "start_binding_controller",
    "start_controller",
    "validate",
]
