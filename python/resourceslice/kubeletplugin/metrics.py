"""Prometheus metrics of kubelet plugins' checkpoints (the ``metrics`` extra: prometheus-client).

    from resourceslice.kubeletplugin import metrics
    metrics.register(helper)                              # the global registry
    metrics.register(helper, registry=server.registry)    # a resourceslice.metrics.serve()'s

The collector reads each helper's :meth:`~resourceslice.kubeletplugin.Checkpoint.stats` when
scraped. Every series has a ``driver`` label:

- ``resourceslice_checkpoint_claims``: claims recorded now;
- ``resourceslice_checkpoint_usable``: 0 while the file cannot be used (another version's:
  every prepare and unprepare fails), else 1;
- ``resourceslice_checkpoint_prepares_total{source}``: claims prepared, answered from the
  checkpoint (``checkpoint``) or by the driver and then recorded (``driver``);
- ``resourceslice_checkpoint_unprepares_total``: records removed once the driver unprepared
  their claim;
- ``resourceslice_checkpoint_reallocated_total``: recorded claims found allocated anew;
- ``resourceslice_checkpoint_write_errors_total``: writes of the file that failed;
- ``resourceslice_checkpoint_set_aside_total``: unreadable files set aside (records lost);
- ``resourceslice_checkpoint_reconciled_total{action}``: what starts put right:
  ``cdi_spec_restored``, ``cdi_spec_removed``, ``claim_unprepared`` (a recorded claim gone),
  ``claim_unprepare_failed``, ``claim_unchecked`` (its claim could not be read).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator

from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from resourceslice.kubeletplugin.helper import Helper
from resourceslice.kubeletplugin.prepared import CheckpointStats

__all__ = ["CheckpointCollector", "register"]

_RECONCILED = (
    ("cdi_spec_restored", "cdi_specs_restored"),
    ("cdi_spec_removed", "cdi_specs_removed"),
    ("claim_unprepared", "claims_unprepared"),
    ("claim_unprepare_failed", "claims_unprepare_failed"),
    ("claim_unchecked", "claims_unchecked"),
)


class CheckpointCollector:
    """A Prometheus collector of kubelet plugins' checkpoints (see the module's doc)."""

    def __init__(self, helpers: Iterable[Helper] = ()) -> None:
        self._lock = threading.Lock()
        self._helpers: list[Helper] = []
        for helper in helpers:
            self.add(helper)

    def add(self, helper: Helper) -> None:
        """Report ``helper``'s checkpoint too; one helper per driver."""
        if helper.checkpoint is None:
            raise ValueError(f"the kubelet plugin of {helper.driver} keeps no checkpoint")
        with self._lock:
            if any(h.driver == helper.driver for h in self._helpers):
                raise ValueError(f"a kubelet plugin of driver {helper.driver} is reported already")
            self._helpers.append(helper)

    def remove(self, helper: Helper) -> None:
        with self._lock:
            self._helpers.remove(helper)

    def describe(self) -> Iterable[Metric]:
        return list(self._families([]))

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            helpers = list(self._helpers)
        return list(
            self._families([(h.driver, h.checkpoint.stats()) for h in helpers if h.checkpoint])
        )

    def _families(self, stats: list[tuple[str, CheckpointStats]]) -> Iterator[Metric]:
        driver = ["driver"]
        claims = GaugeMetricFamily(
            "resourceslice_checkpoint_claims", "Claims recorded in the checkpoint.", labels=driver
        )
        usable = GaugeMetricFamily(
            "resourceslice_checkpoint_usable",
            "0 while the checkpoint cannot be used (prepare and unprepare fail), else 1.",
            labels=driver,
        )
        prepares = CounterMetricFamily(
            "resourceslice_checkpoint_prepares",
            "Claims prepared: answered from the checkpoint, or by the driver and recorded.",
            labels=[*driver, "source"],
        )
        unprepares = CounterMetricFamily(
            "resourceslice_checkpoint_unprepares",
            "Records removed once the driver unprepared their claim.",
            labels=driver,
        )
        reallocated = CounterMetricFamily(
            "resourceslice_checkpoint_reallocated",
            "Recorded claims found allocated anew (unprepared, then prepared again).",
            labels=driver,
        )
        write_errors = CounterMetricFamily(
            "resourceslice_checkpoint_write_errors",
            "Writes of the checkpoint that failed.",
            labels=driver,
        )
        set_aside = CounterMetricFamily(
            "resourceslice_checkpoint_set_aside",
            "Unreadable checkpoints set aside (their records lost).",
            labels=driver,
        )
        reconciled = CounterMetricFamily(
            "resourceslice_checkpoint_reconciled",
            "What starts put right, by action.",
            labels=[*driver, "action"],
        )
        for name, s in stats:
            claims.add_metric([name], s.records)
            usable.add_metric([name], float(s.usable))
            prepares.add_metric([name, "checkpoint"], s.answered)
            prepares.add_metric([name, "driver"], s.recorded)
            unprepares.add_metric([name], s.removed)
            reallocated.add_metric([name], s.reallocated)
            write_errors.add_metric([name], s.write_errors)
            set_aside.add_metric([name], s.set_aside)
            for action, attribute in _RECONCILED:
                reconciled.add_metric([name, action], getattr(s, attribute))
        yield from (claims, usable, prepares, unprepares, reallocated, write_errors, set_aside)
        yield reconciled


def register(*helpers: Helper, registry: CollectorRegistry | None = None) -> CheckpointCollector:
    """A collector of ``helpers``' checkpoints, registered on ``registry`` (default: the
    global one); ``add()`` more later."""
    collector = CheckpointCollector(helpers)
    (REGISTRY if registry is None else registry).register(collector)
    return collector
