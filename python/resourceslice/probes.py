"""``/healthz``, ``/livez`` and ``/readyz`` for a driver process, with no dependency:
:func:`serve_health`.

Every driver that runs in a Pod needs probes; not every one wants Prometheus. The answers
are those of :class:`resourceslice.metrics.MetricsServer` (which serves them next to
``/metrics``, with the ``metrics`` extra), from the same function, :func:`answer`.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Union

from resourceslice._getserver import GetServer, GetServerShell, Response, ServerLimits
from resourceslice.controller import Controller
from resourceslice.health import Health

if TYPE_CHECKING:
    from resourceslice.aio import AsyncController

__all__ = ["HealthServer", "ServerLimits", "serve_health"]

#: A controller, blocking or asyncio: both tell their driver and their health at once.
AnyController = Union[Controller, "AsyncController"]

#: What each probe requires of every controller.
_CHECKS: dict[str, Callable[[Health], bool]] = {
    "/livez": lambda h: h.alive,
    "/readyz": lambda h: h.synced_once,
    "/healthz": lambda h: h.alive and h.synced_once,
}


def answer(path: str, controllers: Sequence[AnyController]) -> Response:
    """The answer to a probe of ``path``, from the health of ``controllers``.

    ``/livez``: 200 while every controller's threads run. ``/readyz``: 200 once each
    published every desired pool (synced once; a later failure shows in ``failing`` and the
    metrics, and does not take a replica out of service). ``/healthz``: both. The body is
    their health as JSON, by driver; 503 without a controller; 404 for any other path.
    """
    check = _CHECKS.get(path)
    if check is None:
        return 404, "text/plain; charset=utf-8", b"not found\n"
    healths = {c.driver: c.health() for c in controllers}
    body = {driver: _health_json(h) for driver, h in healths.items()}
    ok = bool(healths) and all(check(h) for h in healths.values())
    return 200 if ok else 503, "application/json", json.dumps(body, indent=2).encode() + b"\n"


class HealthServer(GetServerShell):
    """The probes of :func:`answer` for the controllers added, over HTTP, in a thread.

    Port 0 picks a free port: ``address`` says which. It listens from the start, so that a
    port in use is known before any write. ``limits`` bound what clients can hold
    (:class:`ServerLimits`): hostile or stuck clients neither hang the probes nor pile up
    threads.
    """

    def __init__(
        self,
        host: str,
        port: int,
        controllers: Iterable[AnyController] = (),
        limits: ServerLimits | None = None,
    ) -> None:
        self._lock = threading.Lock()
        self._controllers = list(controllers)
        self._server = GetServer(
            host, port, self._answer, limits or ServerLimits(), name="resourceslice-health"
        )

    def _answer(self, path: str) -> Response:
        with self._lock:
            controllers = list(self._controllers)
        return answer(path, controllers)

    def add(self, controller: AnyController) -> None:
        """Report ``controller`` too: each probe requires it of every controller."""
        with self._lock:
            self._controllers.append(controller)

    def remove(self, controller: AnyController) -> None:
        with self._lock:
            self._controllers.remove(controller)


def serve_health(
    host: str, port: int, *controllers: AnyController, limits: ServerLimits | None = None
) -> HealthServer:
    """``/healthz``, ``/livez`` and ``/readyz`` of ``controllers`` (``add()`` more later) on
    ``host:port``, until ``close()`` (or the end of a ``with`` block). No extra is needed:
    ``resourceslice.metrics.serve`` serves the same probes next to ``/metrics``.

    A Pod's probes: ``livenessProbe: {httpGet: {path: /livez, port: PORT}}``, and
    ``/readyz`` for readiness (not for a standby replica under leader election: it never
    syncs while another leads)."""
    return HealthServer(host, port, controllers, limits)


def _health_json(health: Health) -> dict[str, Any]:
    return {
        "alive": health.alive,
        "synced": health.synced,
        "syncedOnce": health.synced_once,
        "informerConnected": health.informer_connected,
        "lastSyncTime": health.last_sync_time,
        "failing": dict(health.failing),
    }
