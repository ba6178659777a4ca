"""Publish a DRA driver's devices as Kubernetes ResourceSlices.

``start_controller`` keeps the driver's ResourceSlices equal to its desired devices;
see the README for an example.
"""

from __future__ import annotations

from resourceslice._backend import core_backend

__all__ = ["core_backend"]
