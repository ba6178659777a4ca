"""A driver's one source of device health, fed to both places it matters (docs/health.md):
the cluster, as a device taint (kube-scheduler and the device-taint eviction controller act on
it), and kubelet, as the plugin's health stream (kubelet writes it into the pods' status)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Callable

import resourceslice as rs
from resourceslice import kubeletplugin
from support.chain import EnvDriver

#: The taint an unhealthy device gets: pods that do not tolerate it are evicted.
TAINT_KEY = "gpu.e2e.example.com/unhealthy"
HEALTHY = kubeletplugin.HealthStatus.HEALTHY
UNHEALTHY = kubeletplugin.HealthStatus.UNHEALTHY
#: How often the stream repeats itself without a change (kubelet forgets a device's health
#: after 30 s without a report).
REPEAT = 10.0

#: Publishes a device's taint: (device, reason) when it turned unhealthy, (device, None)
#: when it is healthy again.
Taint = Callable[[str, "str | None"], None]


def taint(reason: str) -> rs.DeviceTaint:
    """The taint of an unhealthy device; ``reason`` (a label value: ``xid-79``) its value."""
    return {"key": TAINT_KEY, "value": reason, "effect": "NoExecute"}


class HealthSource:
    """The health of one pool's devices. :meth:`set` publishes each change through
    ``publish`` (set before the first change) and wakes every open health stream
    (:meth:`watch_health`)."""

    def __init__(self, pool: str, devices: Sequence[str]) -> None:
        self.pool = pool
        self.publish: Taint | None = None
        self._cond = threading.Condition()
        self._health = {d: HEALTHY for d in devices}
        self._messages = {d: "" for d in devices}
        self._changes = 0
        self._closed = False
        #: When each device last turned unhealthy (time.time()), for the bench.
        self.unhealthy_at: dict[str, float] = {}

    def set(self, device: str, healthy: bool, reason: str = "", message: str = "") -> None:
        """``reason``: the taint's value (a label value); ``message``: for kubelet."""
        status = (
            kubeletplugin.HealthStatus.HEALTHY if healthy else kubeletplugin.HealthStatus.UNHEALTHY
        )
        with self._cond:
            if self._health[device] == status:
                return
            self._health[device] = status
            self._messages[device] = message
            self._changes += 1
            if not healthy:
                self.unhealthy_at[device] = time.time()
            self._cond.notify_all()
        assert self.publish is not None
        self.publish(device, None if healthy else reason)

    def watch_health(self) -> Iterator[list[kubeletplugin.DeviceHealth]]:
        """The plugin's health stream: every device's health, at once and after each change
        (and every REPEAT seconds), until :meth:`close`."""
        seen = [-1]  # the number of changes last reported
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._closed or self._changes != seen[0], REPEAT)
                if self._closed:
                    return
                seen[0] = self._changes
                now = int(time.time())
                report = [
                    kubeletplugin.DeviceHealth(
                        self.pool, device, status, last_updated=now, message=self._messages[device]
                    )
                    for device, status in sorted(self._health.items())
                ]
            yield report

    def close(self) -> None:
        """End the streams (before the plugin stops)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()


class HealthDriver(EnvDriver):
    """The end-to-end tests' plugin, with the health stream of a :class:`HealthSource`."""

    def __init__(self, driver: str, cdi_dir: Path, health: HealthSource) -> None:
        super().__init__(driver, cdi_dir)
        self.health = health

    def watch_health(self) -> Iterator[list[kubeletplugin.DeviceHealth]]:
        return self.health.watch_health()


def slice_taints(controller: rs.Controller, pool: str) -> Taint:
    """Taints in the pool's own ResourceSlices: the device (published as its name alone)
    written again with or without it."""

    def publish(device: str, reason: str | None) -> None:
        changed: dict[str, Any] = {"name": device}
        if reason is not None:
            changed["taints"] = [taint(reason)]
        controller.update_devices(pool, upsert=[changed])

    return publish


def rule_name(pool: str, device: str) -> str:
    return f"{pool}-{device}-unhealthy"


def rule_taints(rules: rs.DeviceTaintRules, pool: str) -> Taint:
    """Taints as DeviceTaintRules, one per device, named after it."""

    def publish(device: str, reason: str | None) -> None:
        if reason is None:
            rules.remove(rule_name(pool, device))
        else:
            rules.set(rule_name(pool, device), (pool, device), taint(reason))

    return publish
