"""The health service: the plugin's ``watch_health()`` reports, streamed to kubelet.

One stream per kubelet connection; kubelet opens a new one after each reconnect. What a
stream does at its end matters as much as what it sends, as Go's helper has it:

- kubelet gone (or the helper stopping): the plugin's iterator is closed, so that the next
  stream's is the only one left. An asynchronous iterator's pending ``await`` is cancelled
  at once; a plain one is closed when it yields next (no thread can interrupt Python code
  blocked in another thread), so it should yield now and then.
- ``watch_health()`` raised :class:`HealthNotSupportedError`: ``UNIMPLEMENTED``, which
  tells kubelet to stop watching (Go: ``ErrHealthNotSupported``).
- it raised anything else: the stream fails with ``UNKNOWN`` and the error, and the error
  handler hears of it; ending with OK would tell kubelet all was well.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

import grpc

from resourceslice._errortext import describe_error
from resourceslice.kubeletplugin._pb import (
    health_v1_pb2,
    health_v1_pb2_grpc,
    health_v1alpha1_pb2_grpc,
)
from resourceslice.kubeletplugin.callbacks import Iteration
from resourceslice.kubeletplugin.types import DeviceHealth, HealthNotSupportedError


class HealthSource(Protocol):
    """What the health service asks of the helper."""

    def offers_health(self) -> bool: ...

    def health_reports(self) -> Iteration[Sequence[DeviceHealth]]: ...

    def report_error(self, exc: BaseException, message: str) -> None: ...


class _Done:
    """The pump's last word: how the plugin's iterator ended (None: it ran out)."""

    def __init__(self, error: BaseException | None = None) -> None:
        self.error = error


def health_servicer(source: HealthSource, pb: Any) -> Any:
    """A servicer of ``pb``'s ``DRAResourceHealth`` (v1 or v1alpha1) over ``source``."""
    base = (
        health_v1_pb2_grpc.DRAResourceHealthServicer
        if pb is health_v1_pb2
        else health_v1alpha1_pb2_grpc.DRAResourceHealthServicer
    )

    def watch(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        if not source.offers_health():
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "the driver reports no health")
        # The plugin's iterator runs in a thread of its own, which may block between
        # reports for as long as it likes: the stream ends as soon as kubelet goes away or
        # the helper stops, without waiting for the iterator's next report.
        reports: queue.Queue[Sequence[DeviceHealth] | _Done] = queue.Queue()
        iteration = source.health_reports()

        def end() -> None:
            iteration.cancel()
            reports.put(_Done())

        if not context.add_callback(end):
            # The RPC is over already (kubelet hung up while watch_health() set up), and grpc
            # never calls a callback added after: the stream would wait for the driver's
            # next report, holding a gRPC worker meanwhile.
            end()

        def pump() -> None:
            error: BaseException | None = None
            try:
                for report in iteration:
                    reports.put(report)
            except HealthNotSupportedError as exc:
                error = exc
            except Exception as exc:
                error = exc
                source.report_error(exc, "watch_health failed")
            finally:
                try:
                    iteration.close()
                finally:
                    reports.put(_Done(error))

        threading.Thread(target=pump, name="kubeletplugin-health", daemon=True).start()
        try:
            while True:
                report = reports.get()
                if isinstance(report, _Done):
                    break
                yield _response(pb, report)
        finally:
            iteration.cancel()  # the stream ends for whatever reason: so does the pump
        if isinstance(report.error, HealthNotSupportedError):
            context.abort(grpc.StatusCode.UNIMPLEMENTED, str(report.error))
        if report.error is not None:
            context.abort(
                grpc.StatusCode.UNKNOWN,
                f"watch_health failed: {describe_error(report.error)}",
            )

    servicer = type("Health", (base,), {"NodeWatchResources": staticmethod(watch)})
    return servicer()


def _response(pb: Any, report: Sequence[DeviceHealth]) -> Any:
    return pb.NodeWatchResourcesResponse(
        devices=[
            pb.DeviceHealth(
                device=pb.DeviceIdentifier(pool_name=d.pool_name, device_name=d.device_name),
                health=pb.HealthStatus.Value(d.health.value),
                last_updated_time=d.last_updated,
                health_check_timeout_seconds=d.timeout_seconds,
                message=d.message,
            )
            for d in report
        ]
    )
