"""Prometheus metrics of one or more controllers: needs the ``metrics`` extra (prometheus-client).

    collector = resourceslice.metrics.register(ctrl)          # the global registry
    collector = resourceslice.metrics.register(ctrl, registry=my_registry)
    collector.add(other_ctrl)                                   # one series per driver

The collector reads each controller's figures when scraped (``Controller.health()`` and
what the controller counted): nothing is updated on the controller's hot path but a few
counters. Every series has a ``driver`` label:

- ``resourceslice_writes_total{verb, outcome}``: create / update / delete requests, by
  outcome: success, conflict, not_found, invalid, throttled, rejected (other 4xx), error
  (5xx, network);
- ``resourceslice_syncs_total{result}`` and ``resourceslice_sync_duration_seconds``
  (histogram): pool syncs, success or error;
- ``resourceslice_errors_total{kind}``: errors given to the error handler, by exception class;
- ``resourceslice_queue_depth``: pools waiting to be synced now;
- ``resourceslice_pools{state}``: pools synced, pending, failing;
- ``resourceslice_published_devices``: devices of the pools published as desired;
- ``resourceslice_last_sync_timestamp_seconds``: the last successful sync (absent before);
- ``resourceslice_synced``, ``resourceslice_informer_connected``: 1 or 0;
- ``resourceslice_leader``: 1 or 0, for a controller that elects a leader (``leader_election``).

:func:`serve` serves ``/metrics`` and the health endpoints (``resourceslice publish
--metrics-address``); :func:`resourceslice.serve_health` serves the health endpoints alone,
without this extra.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Sequence

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    REGISTRY,
    CollectorRegistry,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from resourceslice._getserver import GetServer, GetServerShell, Response, ServerLimits
from resourceslice._observer import SYNC_SECONDS_BUCKETS, Snapshot
from resourceslice.controller import Controller
from resourceslice.probes import AnyController, answer

__all__ = ["ControllerCollector", "MetricsServer", "ServerLimits", "register", "serve"]

_VERBS = ("create", "update", "delete")
_POOL_STATES = ("synced", "pending", "failing")
_SYNC_RESULTS = ("success", "error")


def _sync(controller: AnyController) -> Controller:
    return controller if isinstance(controller, Controller) else controller.controller


class ControllerCollector:
    """A Prometheus collector of controllers' figures (see the module's doc)."""

    def __init__(self, controllers: Iterable[AnyController] = ()) -> None:
        self._lock = threading.Lock()
        self._controllers: list[Controller] = []
        for controller in controllers:
            self.add(controller)

    def add(self, controller: AnyController) -> None:
        """Report ``controller`` too; at most one controller per driver."""
        ctrl = _sync(controller)
        with self._lock:
            if any(c.driver == ctrl.driver for c in self._controllers):
                raise ValueError(f"a controller of driver {ctrl.driver} is reported already")
            self._controllers.append(ctrl)

    def remove(self, controller: AnyController) -> None:
        with self._lock:
            self._controllers.remove(_sync(controller))

    @property
    def controllers(self) -> list[Controller]:
        with self._lock:
            return list(self._controllers)

    def describe(self) -> Iterable[Metric]:
        """The metric names, without samples: a registry checks them for duplicates
        without a scrape."""
        return list(self._families())

    def collect(self) -> Iterable[Metric]:
        snapshots = [(c._snapshot(), _leader(c)) for c in self.controllers]
        return list(self._families(snapshots))

    def _families(self, snapshots: Sequence[tuple[Snapshot, bool | None]] = ()) -> Iterator[Metric]:
        driver = ["driver"]
        writes = CounterMetricFamily(
            "resourceslice_writes",
            "ResourceSlice write requests, by verb and outcome.",
            labels=[*driver, "verb", "outcome"],
        )
        syncs = CounterMetricFamily(
            "resourceslice_syncs", "Pool syncs, by result.", labels=[*driver, "result"]
        )
        durations = HistogramMetricFamily(
            "resourceslice_sync_duration_seconds",
            "How long pool syncs took, successful or not.",
            labels=driver,
        )
        errors = CounterMetricFamily(
            "resourceslice_errors",
            "Errors given to the error handler, by exception class.",
            labels=[*driver, "kind"],
        )
        queue = GaugeMetricFamily(
            "resourceslice_queue_depth", "Pools waiting to be synced now.", labels=driver
        )
        pools = GaugeMetricFamily(
            "resourceslice_pools",
            "Pools by state: synced, pending (not synced yet), failing (last sync failed).",
            labels=[*driver, "state"],
        )
        devices = GaugeMetricFamily(
            "resourceslice_published_devices",
            "Devices of the pools published as desired.",
            labels=driver,
        )
        last_sync = GaugeMetricFamily(
            "resourceslice_last_sync_timestamp_seconds",
            "When a pool sync last succeeded (Unix time).",
            labels=driver,
        )
        synced = GaugeMetricFamily(
            "resourceslice_synced",
            "1 when every desired pool is published as desired.",
            labels=driver,
        )
        connected = GaugeMetricFamily(
            "resourceslice_informer_connected",
            "1 when the last list or watch of the cluster's ResourceSlices worked.",
            labels=driver,
        )
        leader = GaugeMetricFamily(
            "resourceslice_leader", "1 when this replica is the elected leader.", labels=driver
        )
        for snap, is_leader in snapshots:
            d = snap.driver
            # Known label values are reported from the start at 0, so that rate() and
            # alerts see a series before the first write of its kind.
            for verb in _VERBS:
                writes.add_metric([d, verb, "success"], snap.writes.get((verb, "success"), 0))
            for (verb, outcome), n in sorted(snap.writes.items()):
                if outcome != "success":
                    writes.add_metric([d, verb, outcome], n)
            for result in _SYNC_RESULTS:
                syncs.add_metric([d, result], snap.syncs.get(result, 0))
            cumulative, buckets = 0, []
            for bound, n in zip(
                (*map(repr, SYNC_SECONDS_BUCKETS), "+Inf"), snap.sync_seconds_buckets
            ):
                cumulative += n
                buckets.append((bound, cumulative))
            durations.add_metric([d], buckets, snap.sync_seconds_sum)
            for kind, n in sorted(snap.errors.items()):
                errors.add_metric([d, kind], n)
            queue.add_metric([d], snap.queue_depth)
            for state in _POOL_STATES:
                pools.add_metric([d, state], snap.pools[state])
            devices.add_metric([d], snap.published_devices)
            if snap.health.last_sync_time is not None:
                last_sync.add_metric([d], snap.health.last_sync_time)
            synced.add_metric([d], float(snap.health.synced))
            connected.add_metric([d], float(snap.health.informer_connected))
            if is_leader is not None:
                leader.add_metric([d], float(is_leader))
        yield from (writes, syncs, durations, errors, queue, pools, devices, last_sync)
        yield from (synced, connected, leader)


def _leader(controller: Controller) -> bool | None:
    """``is_leader()`` of a controller that elects a leader; None for one that does not."""
    return None if controller.leader_election is None else controller.is_leader()


def serve(host: str, port: int, limits: ServerLimits | None = None) -> MetricsServer:
    """A :class:`MetricsServer` with a collector (``server.add(controller)``) and the metrics
    of this process (CPU, memory, file descriptors, garbage collection), on a registry of
    its own."""
    registry = CollectorRegistry()
    for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
        registry.register(collector)
    return MetricsServer(host, port, registry, register(registry=registry), limits)


def register(
    *controllers: AnyController, registry: CollectorRegistry | None = None
) -> ControllerCollector:
    """A collector of ``controllers``, registered on ``registry`` (default: the global one);
    ``add()`` more later. ``registry.unregister(collector)`` takes it off."""
    collector = ControllerCollector(controllers)
    (REGISTRY if registry is None else registry).register(collector)
    return collector


class MetricsServer(GetServerShell):
    """``/metrics`` of ``registry`` and the health of the controllers of ``collector``, over
    HTTP, in a thread.

    ``/livez``, ``/readyz``, ``/healthz``: as :func:`resourceslice.serve_health` answers
    them. Port 0 picks a free port: ``address`` says which. It listens from the start, so
    that a port in use is known before any write.
    ``limits`` bound what clients can hold (:class:`ServerLimits`): hostile or stuck clients
    neither hang the probes nor pile up threads.
    """

    def __init__(
        self,
        host: str,
        port: int,
        registry: CollectorRegistry,
        collector: ControllerCollector,
        limits: ServerLimits | None = None,
    ) -> None:
        self.collector = collector
        self._registry = registry
        self._server = GetServer(
            host, port, self._answer, limits or ServerLimits(), name="resourceslice-metrics"
        )

    def _answer(self, path: str) -> Response:
        if path == "/metrics":
            return 200, CONTENT_TYPE_LATEST, generate_latest(self._registry)
        return answer(path, self.collector.controllers)

    def add(self, controller: AnyController) -> None:
        """Report ``controller`` (its metrics and its health)."""
        self.collector.add(controller)

    @property
    def registry(self) -> CollectorRegistry:
        """What ``/metrics`` serves: register more collectors here (a kubelet plugin's
        checkpoint: ``resourceslice.kubeletplugin.metrics.register(helper, registry=...)``)."""
        return self._registry
