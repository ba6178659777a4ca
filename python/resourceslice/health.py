"""How a controller is doing: what ``Controller.health()`` answers, and probes serve.

It is read from the controller's :class:`~resourceslice._observer.Observer`, which counts
what the controller did as it happens (and gives :mod:`resourceslice.metrics` its figures).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["Health"]


@dataclass(frozen=True)
class Health:
    """How a controller is doing, at the moment :meth:`Controller.health` was called.

    ``synced``: every pool of the current desired state is published as desired (what
    ``wait_synced`` waits for); ``synced_once``: that was true at least once (readiness).
    ``failing``: pool name -> the last error of its last sync, for pools whose last sync
    failed. ``informer_connected``: the last list or watch of the cluster's slices worked.
    ``alive``: the controller's threads run (liveness). ``last_sync_time``: wall-clock time
    (``time.time()``) of the last successful pool sync, None before the first.
    """

    synced: bool
    synced_once: bool
    failing: Mapping[str, str]
    informer_connected: bool
    alive: bool
    last_sync_time: float | None

    @property
    def ok(self) -> bool:
        """Alive, and nothing is failing."""
        return self.alive and not self.failing
