"""A call's deadline, or the lack of one, in the plugin alone: no kubelet, no apiserver.

The calls come over the plugin's socket from a gRPC client of the test's own (unprepare
reads no claim), or go straight to the pieces: the callback loop, the health servicer.
A coroutine callback that kubelet gave up on before it started never starts, and the call
ends at its deadline with the locks free, however busy the driver's loop; a call without a
deadline (a tool, a test, another client of the socket) is served like any other; a health
stream whose RPC ended before the servicer got to it ends too.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import os
import threading
import time
from collections.abc import AsyncIterator, Coroutine, Iterator, Sequence
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import kubernetes.client
import pytest

from resourceslice import kubeletplugin
from resourceslice.kubeletplugin._pb import (
    dra_v1_pb2,
    dra_v1_pb2_grpc,
    health_v1_pb2,
    health_v1_pb2_grpc,
)
from resourceslice.kubeletplugin.callbacks import CallbackLoop, Iteration
from resourceslice.kubeletplugin.healthstream import health_servicer
from resourceslice.kubeletplugin.serialize import open_locked
from resourceslice.kubeletplugin.service import deadline_of
from resourceslice.testing import wait_until

DRIVER = "gpu.example.com"

#: Long enough for any answer the fixed code gives on a loaded machine; the faults never
#: answer (the driver's coroutines here wait until told).
GENEROUS = 10.0


class Blocked:
    """An event loop kept busy by a callback of its own until :meth:`release`: a driver's
    loop running something that does not yield."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._release = threading.Event()
        blocking = threading.Event()

        def block() -> None:
            blocking.set()
            self._release.wait(60)

        loop.call_soon_threadsafe(block)
        assert blocking.wait(GENEROUS)

    def release(self) -> None:
        self._release.set()


class Driver:
    """Coroutine callbacks that wait until cancelled; records which ran, and which ended."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.ran: list[str] = []
        self.ended: list[str] = []

    async def wait_forever(self, name: str) -> str:
        self.ran.append(name)
        self.entered.set()
        try:
            await asyncio.Event().wait()
        finally:
            self.ended.append(name)
        return name


def resolve_in_thread(
    loop: CallbackLoop, value: Coroutine[Any, Any, str], deadline: float
) -> concurrent.futures.Future[str]:
    """``loop.resolve(value, deadline)`` on a thread of its own (a gRPC worker's part): its
    outcome, which the test waits for with a timeout of its own."""
    outcome: concurrent.futures.Future[str] = concurrent.futures.Future()

    def run() -> None:
        try:
            outcome.set_result(loop.resolve(value, deadline))
        except BaseException as exc:
            outcome.set_exception(exc)

    threading.Thread(target=run, name="test-resolve", daemon=True).start()
    return outcome


@pytest.fixture
def callback_loop() -> Iterator[CallbackLoop]:
    loop = CallbackLoop(None)
    try:
        yield loop
    finally:
        loop.close()


def test_a_deadline_passed_at_the_call_ends_it(callback_loop: CallbackLoop) -> None:
    """Deadline 0: the loop may or may not have started the coroutine when the deadline is
    found passed; either way the call ends at once (it waited for the driver's coroutine
    to end by itself, 3.0 s for one of 3 s), and the coroutine is over."""
    driver = Driver()
    coroutine = driver.wait_forever("late")
    outcome = resolve_in_thread(callback_loop, coroutine, time.monotonic())
    assert isinstance(outcome.exception(GENEROUS), TimeoutError)
    assert inspect.getcoroutinestate(coroutine) == inspect.CORO_CLOSED
    assert driver.ran == driver.ended  # not started, or cancelled and ended


def test_a_coroutine_not_started_by_the_deadline_never_starts(callback_loop: CallbackLoop) -> None:
    """The driver's loop is busy past the deadline: the call ends at the deadline, while the
    loop is still busy, and the coroutine never runs, then or later (it used to start once
    the loop was free and run to its end, the call waiting for it)."""
    driver = Driver()
    blocked = Blocked(callback_loop.get())
    try:
        coroutine = driver.wait_forever("late")
        outcome = resolve_in_thread(callback_loop, coroutine, time.monotonic() + 0.3)
        assert isinstance(outcome.exception(GENEROUS), TimeoutError)
        assert inspect.getcoroutinestate(coroutine) == inspect.CORO_CLOSED
    finally:
        blocked.release()
    # Whatever the loop had queued for the call has run once this has.
    asyncio.run_coroutine_threadsafe(asyncio.sleep(0), callback_loop.get()).result(GENEROUS)
    assert driver.ran == []


def test_a_coroutine_started_is_cancelled_and_waited_for(callback_loop: CallbackLoop) -> None:
    """Started before the deadline: cancelled at it, and the call ends once the coroutine
    has (its ``finally`` ran: what it held is free)."""
    driver = Driver()
    outcome = resolve_in_thread(
        callback_loop, driver.wait_forever("started"), time.monotonic() + 2.0
    )
    assert driver.entered.wait(GENEROUS)
    assert isinstance(outcome.exception(GENEROUS), TimeoutError)
    assert driver.ended == ["started"]


# -- calls over the plugin's socket ---------------------------------------------------------


class Unpreparing:
    """Unprepares every claim; ``asynchronous``: as a coroutine, which for a claim named
    ``slow`` waits until ``stop``. Records the claims of each call it got to."""

    def __init__(self, asynchronous: bool = False) -> None:
        self.calls: list[list[str]] = []
        self.asynchronous = asynchronous
        self.stop = threading.Event()

    def prepare_resource_claims(self, claims: Sequence[Any]) -> dict[str, Any]:
        raise AssertionError("no claim is prepared here")

    def unprepare_resource_claims(self, claims: Sequence[kubeletplugin.ClaimRef]) -> Any:
        if self.asynchronous:
            return self._unprepare(claims)
        self.calls.append([c.name for c in claims])
        return {c.uid: None for c in claims}

    async def _unprepare(
        self, claims: Sequence[kubeletplugin.ClaimRef]
    ) -> dict[str, BaseException | None]:
        self.calls.append([c.name for c in claims])
        while any(c.name == "slow" for c in claims) and not self.stop.is_set():
            await asyncio.sleep(0.01)
        return {c.uid: None for c in claims}


class Served:
    """A helper serving ``plugin`` from ``node_dir`` (a rolling update's: the file lock too),
    and what its error handler got."""

    def __init__(self, node_dir: Path, plugin: Unpreparing, **kwargs: Any) -> None:
        (node_dir / "registry").mkdir()
        self.errors: list[tuple[BaseException, str]] = []
        self.lock_file = node_dir / "data" / "serialize.lock"
        with kubernetes.client.ApiClient() as client:  # never called: unprepare reads nothing
            self.helper = kubeletplugin.start(
                plugin,
                driver=DRIVER,
                api_client=client,
                registrar_dir=str(node_dir / "registry"),
                plugin_data_dir=str(node_dir / "data"),
                rolling_update_uid="4d1e6a0c-test",
                error_handler=lambda exc, message: self.errors.append((exc, message)),
                **kwargs,
            )

    def unprepare(self, name: str, timeout: float | None) -> str:
        """Unprepare claim ``name`` (uid ``name``): its error text; ``timeout`` None sends
        the call without a deadline."""
        with grpc.insecure_channel(f"unix://{self.helper.plugin_socket_path}") as channel:
            stub = dra_v1_pb2_grpc.DRAPluginStub(channel)
            claim = dra_v1_pb2.Claim(namespace="default", name=name, uid=name)
            answer = stub.NodeUnprepareResources(
                dra_v1_pb2.NodeUnprepareResourcesRequest(claims=[claim]), timeout=timeout
            )
        return str(answer.claims[name].error)


def test_a_call_given_up_before_its_coroutine_started_frees_the_locks(node_dir: Path) -> None:
    """The driver's loop is busy past kubelet's deadline: the call ends at the deadline with
    both locks free, while the loop is still busy (it used to hold them until the loop was
    free and the driver's coroutine had run to its end), and the driver never sees it."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="test-driver-loop", daemon=True)
    thread.start()
    plugin = Unpreparing(asynchronous=True)
    served = Served(node_dir, plugin, loop=loop)
    try:
        blocked = Blocked(loop)
        try:
            try:
                assert served.unprepare("slow", timeout=0.5) != ""
            except grpc.RpcError as exc:  # kubelet stopped waiting first
                assert exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED
            wait_until(lambda: served.errors, timeout=GENEROUS)
            [(error, message)] = served.errors
            assert isinstance(error, TimeoutError)
            assert message == "unprepare_resource_claims failed"
            # The file lock is free (another instance's wait would get it), loop still busy.
            os.close(open_locked(served.lock_file, time.monotonic() + GENEROUS))
        finally:
            blocked.release()
        # The thread lock is free too: the next call is served.
        assert served.unprepare("next", timeout=GENEROUS) == ""
        assert plugin.calls == [["next"]]
    finally:
        plugin.stop.set()
        served.helper.stop()
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()


@pytest.mark.parametrize("asynchronous", [False, True], ids=["plain", "async"])
def test_a_call_without_a_deadline_is_served(node_dir: Path, asynchronous: bool) -> None:
    """gRPC gives a call without a deadline ~9.2e18 s remaining, not None: the lock wait
    failed with OverflowError, and so every prepare and unprepare with ``serialize`` on."""
    plugin = Unpreparing(asynchronous)
    served = Served(node_dir, plugin)
    try:
        assert served.unprepare("a", timeout=None) == ""
    finally:
        served.helper.stop()
    assert served.errors == []
    assert plugin.calls == [["a"]]


class Context:
    """What ``deadline_of`` asks of a gRPC servicer context."""

    def __init__(self, remaining: float | None) -> None:
        self.remaining = remaining

    def time_remaining(self) -> float | None:
        return self.remaining


def test_deadline_of_a_call() -> None:
    # What grpc's server answers for a call without a deadline (its infinite future).
    assert deadline_of(Context(9.223372036854776e18)) is None
    assert deadline_of(Context(None)) is None  # as grpc documents it
    before = time.monotonic()
    deadline = deadline_of(Context(120.0))
    assert deadline is not None and before + 120.0 <= deadline <= time.monotonic() + 120.0


# -- health streams -------------------------------------------------------------------------


HEALTHY = kubeletplugin.HealthStatus.HEALTHY


class LateHealth:
    """A health source whose first ``health_reports()`` returns only once its stream's RPC
    is over (a driver's ``watch_health()`` that takes a while to set up; the client hung
    up meanwhile), with an iterator that reports nothing until ``stop``. Later streams get
    one report at once."""

    def __init__(self, loop: CallbackLoop) -> None:
        self.loop = loop
        self.contexts: list[grpc.ServicerContext] = []
        self.asked = threading.Event()
        self.stop = threading.Event()

    def offers_health(self) -> bool:
        return True

    def health_reports(self) -> Iteration[Sequence[kubeletplugin.DeviceHealth]]:
        if self.asked.is_set():
            return Iteration(self.loop, iter([[kubeletplugin.DeviceHealth("p", "d", HEALTHY)]]))
        self.asked.set()
        wait_until(lambda: not self.contexts[0].is_active(), timeout=GENEROUS)
        return Iteration(self.loop, self._quiet())

    async def _quiet(self) -> AsyncIterator[Sequence[kubeletplugin.DeviceHealth]]:
        while not self.stop.is_set():  # no report: the devices stay as they are
            await asyncio.sleep(0.01)
        return
        yield  # an async generator, as drivers write them

    def report_error(self, exc: BaseException, message: str) -> None:
        raise AssertionError(f"{message}: {exc}")


def test_a_health_stream_over_before_it_started_ends(callback_loop: CallbackLoop) -> None:
    """gRPC calls no callback added after the RPC ended (``add_callback`` answers False):
    the stream's handler used to wait for the driver's next report, holding a gRPC worker
    (here the only one, so the next stream was never served)."""
    source = LateHealth(callback_loop)
    watch = health_servicer(source, health_v1_pb2)
    ended = threading.Event()

    class Servicer(health_v1_pb2_grpc.DRAResourceHealthServicer):
        def NodeWatchResources(self, request: Any, context: Any) -> Iterator[Any]:
            source.contexts.append(context)
            try:
                yield from watch.NodeWatchResources(request, context)
            finally:
                ended.set()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    health_v1_pb2_grpc.add_DRAResourceHealthServicer_to_server(Servicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        stub = health_v1_pb2_grpc.DRAResourceHealthStub(channel)
        first = stub.NodeWatchResources(health_v1_pb2.NodeWatchResourcesRequest())
        assert source.asked.wait(GENEROUS)
        first.cancel()
        assert ended.wait(GENEROUS), "the stream's handler still waits for a report"
        second = stub.NodeWatchResources(
            health_v1_pb2.NodeWatchResourcesRequest(), timeout=GENEROUS
        )
        assert [d.device.device_name for d in next(second).devices] == ["d"]
        second.cancel()
    finally:
        source.stop.set()  # what the handler may still wait for ends
        ended.wait(GENEROUS)
        channel.close()
        server.stop(grace=None).wait()
