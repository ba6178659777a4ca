"""Publish a DRA driver's devices as Kubernetes ResourceSlices.

``start_controller`` keeps the driver's ResourceSlices equal to its desired devices;
see the README for an example.
"""

from __future__ import annotations

from resourceslice._backend import core_backend
from resourceslice.api import (
    ConflictingWriterError,
    DriverResources,
    DroppedFieldsError,
    Owner,
    Pool,
    Slice,
    SliceExistsError,
    Stats,
    ValidationError,
)
from resourceslice.controller import (
    Controller,
    ControllerStoppedError,
    ErrorHandler,
    start_controller,
)
from resourceslice.leaderelection import LeaderElection, LeadershipLostError

__all__ = [
    "ConflictingWriterError",
    "Controller",
    "ControllerStoppedError",
    "DriverResources",
    "DroppedFieldsError",
    "ErrorHandler",
    "LeaderElection",
    "LeadershipLostError",
    "Owner",
    "Pool",
    "Slice",
    "SliceExistsError",
    "Stats",
    "ValidationError",
    "core_backend",
    "start_controller",
]
