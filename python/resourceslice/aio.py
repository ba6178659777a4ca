"""The controller for asyncio drivers: the same controller, awaited instead of blocked on.

An asyncio driver (kopf, kr8s, lightkube, ``kubernetes.aio``, a ``grpc.aio`` kubelet plugin)
must not block its event loop. The controller's work already runs in its own threads (the
informer, the workers); what the driver calls could block: ``update()`` validates and
prepares the whole device list (tens of milliseconds for 10,000 devices), ``stop()`` waits
for a write in flight, ``wait_synced()`` waits for the cluster. Here each runs off the loop:

    async with resourceslice.aio.start_controller(driver="gpu.example.com", ...) as ctrl:
        await ctrl.update(resources)
        await ctrl.wait_synced(timeout=30)

The keywords are :func:`resourceslice.start_controller`'s (typed once, in
:class:`AsyncControllerOptions`). Without ``api_client`` the client comes from kubectl's
kubeconfig order (``KUBECONFIG``, ``~/.kube/config``) or the in-cluster service account, and
is closed by :meth:`AsyncController.stop`. The error handler may be an ``async def``: it is
awaited on the loop that started the controller, one error at a time, in the order they came
(docs/threads.md says which thread runs each callback).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
import threading
from collections.abc import Awaitable, Callable, Generator, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

from resourceslice.api import DriverResources, Stats
from resourceslice.claimstatus import DeviceStatusWriter
from resourceslice.connection import Connection, connect
from resourceslice.controller import (
    Controller,
    ControllerOptions,
    ControllerStoppedError,
    ErrorHandler,
    _CommonOptions,
)
from resourceslice.controller import start_controller as _start_sync
from resourceslice.health import Health
from resourceslice.leaderelection import LeaderElection

if TYPE_CHECKING:
    from types import TracebackType

    from typing_extensions import Unpack

    from resourceslice._kubeclient import ClosingApiClient
    from resourceslice.claimstatus import Claim, DeviceCondition, NetworkDeviceData
    from resourceslice.connection import Client
    from resourceslice.types import Device, KubernetesModel

__all__ = [
    "AsyncController",
    "AsyncControllerOptions",
    "AsyncDeviceStatusWriter",
    "AsyncErrorHandler",
    "StartingController",
    "start_controller",
]

log = logging.getLogger("resourceslice")

T = TypeVar("T")

#: An ``async def handler(exc, message)``: awaited on the loop that started the controller.
AsyncErrorHandler = Callable[[BaseException, str], Awaitable[None]]


class AsyncControllerOptions(_CommonOptions, total=False):
    """The keywords of :func:`start_controller` besides ``api_client``, ``kubeconfig`` and
    ``context``: :class:`resourceslice.ControllerOptions`, with an error handler that may be
    a coroutine function."""

    error_handler: ErrorHandler | AsyncErrorHandler | None


class AsyncController:
    """A running :class:`resourceslice.Controller`, driven from an event loop."""

    def __init__(
        self,
        controller: Controller,
        own_client: Connection | ClosingApiClient | None,
        handler: _HandlerOnLoop | None = None,
    ) -> None:
        self._controller = controller
        self._own_client = own_client
        self._handler = handler
        # One thread, so that updates take effect in the order they were awaited (two
        # updates in the default executor could finish the wrong way round), and stop()
        # comes after the updates before it.
        self._calls = ThreadPoolExecutor(1, thread_name_prefix="resourceslice-aio")
        self._stopped = False

    @property
    def controller(self) -> Controller:
        """The controller itself: for what does not block (``stats()``, ``running``) and
        for :mod:`resourceslice.metrics`."""
        return self._controller

    async def update(self, resources: DriverResources) -> None:
        """:meth:`Controller.update`, with the validation and preparation in a thread.

        ``resources`` is copied before this returns: do not change it while awaiting. A
        cancelled update still takes effect (it cannot be taken back half-way).
        """
        if self._stopped:
            raise ControllerStoppedError("the controller was stopped; start a new one")
        await self._call(self._controller.update, resources)

    async def update_devices(
        self,
        pool: str,
        upsert: Sequence[Device | KubernetesModel] = (),
        remove: Iterable[str] = (),
    ) -> None:
        """:meth:`Controller.update_devices`, with the validation in a thread; like
        :meth:`update`, a cancelled call still takes effect."""
        if self._stopped:
            raise ControllerStoppedError("the controller was stopped; start a new one")
        await self._call(self._controller.update_devices, pool, list(upsert), list(remove))

    async def wait_synced(self, timeout: float | None = None) -> bool:
        """:meth:`Controller.wait_synced`, without blocking the loop."""
        return await _in_thread(self._controller.wait_synced, timeout)

    async def wait_idle(self, timeout: float | None = None) -> bool:
        """:meth:`Controller.wait_idle`, without blocking the loop."""
        return await _in_thread(self._controller.wait_idle, timeout)

    def stats(self) -> Stats:
        return self._controller.stats()

    def health(self) -> Health:
        return self._controller.health()

    @property
    def running(self) -> bool:
        return self._controller.running

    @property
    def driver(self) -> str:
        return self._controller.driver

    @property
    def leader_election(self) -> LeaderElection | None:
        """:attr:`Controller.leader_election`."""
        return self._controller.leader_election

    def is_leader(self) -> bool:
        """:meth:`Controller.is_leader` (it does not block)."""
        return self._controller.is_leader()

    async def stop(self) -> None:
        """:meth:`Controller.stop` (waits for a write in flight, off the loop); then closes
        the client if this module made it. The slices stay."""
        if self._stopped:
            return
        self._stopped = True
        await self._call(self._controller.stop)
        self._calls.shutdown(wait=False)
        if self._own_client is not None:
            self._own_client.close()
        if self._handler is not None:
            await self._handler.drain()

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._calls, fn, *args)

    async def __aenter__(self) -> AsyncController:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()


class StartingController:
    """What :func:`start_controller` returns: awaited, or entered with ``async with``."""

    def __init__(
        self,
        api_client: Client,
        options: AsyncControllerOptions,
        own_client: Connection | ClosingApiClient | None,
    ) -> None:
        self._api_client = api_client
        self._options = options
        self._own_client = own_client
        self._started: AsyncController | None = None

    async def _run(self) -> AsyncController:
        given = self._options.get("error_handler")
        handler = None if given is None else _HandlerOnLoop(given, asyncio.get_running_loop())
        options: ControllerOptions = {**self._options, "error_handler": handler}
        try:
            # The first desired state is validated and prepared like an update's.
            controller = await _in_thread(
                functools.partial(_start_sync, self._api_client, **options)
            )
        except BaseException:
            if self._own_client is not None:
                self._own_client.close()
            if handler is not None:
                await handler.drain()
            raise
        return AsyncController(controller, self._own_client, handler)

    def __await__(self) -> Generator[Any, None, AsyncController]:
        return self._run().__await__()

    async def __aenter__(self) -> AsyncController:
        self._started = await self._run()
        return self._started

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._started is not None:
            await self._started.stop()


class _HandlerOnLoop:
    """The driver's error handler, called by the controller's threads: what it returns, when
    awaitable (an ``async def`` handler's coroutine), is awaited on ``loop``.

    One task awaits them one after the other, in the order the errors were reported: a
    handler that counts, backs off or writes to a stream needs no lock of its own, and
    sees a pool's errors in the order they happened. The controller's thread does not wait
    for it: a handler that awaits something slow must not hold up syncs and watches.
    """

    def __init__(self, handler: ErrorHandler | AsyncErrorHandler, loop: asyncio.AbstractEventLoop):
        self._handler = handler
        self._loop = loop
        self._pending: asyncio.Queue[Awaitable[None] | None] = asyncio.Queue()
        self._awaiting = loop.create_task(self._await_in_order())

    def __call__(self, exc: BaseException, message: str) -> None:
        result = self._handler(exc, message)
        if not inspect.isawaitable(result):
            return  # a plain function: it ran here, in the controller's thread
        try:
            self._loop.call_soon_threadsafe(self._pending.put_nowait, result)
        except RuntimeError:  # the loop was closed: no one is left to await it
            if inspect.iscoroutine(result):
                result.close()
            log.error("%s: %s (the event loop of the error handler is closed)", message, exc)

    async def _await_in_order(self) -> None:
        while True:
            awaitable = await self._pending.get()
            if awaitable is None:
                return
            try:
                await awaitable
            except Exception:
                log.exception("the error handler failed")

    async def drain(self) -> None:
        """Awaits the handlers of the errors reported so far, then ends; for after the
        controller stopped (it reports no more). The end is queued by ``call_soon``, behind
        the errors the controller's threads queued before (the loop runs its callbacks in
        the order they came), not ahead of those not yet delivered."""
        self._loop.call_soon(self._pending.put_nowait, None)
        if asyncio.current_task() is not self._awaiting:  # a handler that stops the controller
            await self._awaiting


def start_controller(
    api_client: Client | None = None,
    *,
    kubeconfig: str | None = None,
    context: str | None = None,
    **options: Unpack[AsyncControllerOptions],
) -> StartingController:
    """Start a controller (``options``: the keywords of :func:`resourceslice.start_controller`,
    ``driver`` among them) without blocking the event loop.

    ``ctrl = await start_controller(...)``, or ``async with start_controller(...) as ctrl``
    (stopped on exit). ``api_client`` None: a client of ``kubeconfig`` (kubectl's order when
    None, then the in-cluster config) and ``context``, closed when the controller stops;
    the kubeconfig is read here, so a missing one raises
    :class:`~resourceslice.connection.ConfigError` at once. ``error_handler`` may be a
    coroutine function: it is awaited on the loop that awaits the start, one error after
    the other; a plain function runs in the controller's thread that met the error, as
    with the blocking controller.
    """
    own_client = None
    if api_client is None:
        api_client = own_client = connect(kubeconfig, context)
    elif kubeconfig is not None or context is not None:
        raise TypeError("kubeconfig and context are for when no api_client is given")
    return StartingController(api_client, options, own_client)


async def _in_thread(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in a thread of its own, awaited.

    For calls that may wait long (``wait_synced(None)``): in the loop's default executor
    they would hold its few threads, and behind the controller's own executor they would
    hold up updates. A cancelled await leaves the thread to finish; every such wait ends
    when the controller stops.
    """
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()

    def settle(outcome: Callable[[], None]) -> None:
        if not done.done():  # cancelled meanwhile
            outcome()

    def run() -> None:
        try:
            result = fn(*args)
        except BaseException as exc:
            report = functools.partial(settle, functools.partial(done.set_exception, exc))
        else:
            report = functools.partial(settle, functools.partial(done.set_result, result))
        with contextlib.suppress(RuntimeError):  # the loop was closed meanwhile
            loop.call_soon_threadsafe(report)

    threading.Thread(target=run, name="resourceslice-aio-wait", daemon=True).start()
    return await done


class AsyncDeviceStatusWriter:
    """:class:`~resourceslice.DeviceStatusWriter` for asyncio drivers: each write is a
    request to the apiserver, made in the loop's default executor and awaited, so the loop
    runs meanwhile. ``writer`` is the blocking writer it uses (the same field managers)."""

    def __init__(
        self,
        api_client: Client,
        *,
        driver: str,
        node_name: str | None = None,
        field_manager: str | None = None,
    ) -> None:
        self.writer = DeviceStatusWriter(
            api_client, driver=driver, node_name=node_name, field_manager=field_manager
        )

    async def set(
        self,
        claim: Claim,
        *,
        pool: str,
        device: str,
        share_id: str | None = None,
        conditions: Sequence[DeviceCondition] = (),
        data: Mapping[str, Any] | None = None,
        network_data: NetworkDeviceData | None = None,
    ) -> dict[str, Any]:
        """:meth:`resourceslice.DeviceStatusWriter.set`, awaited."""
        call = functools.partial(
            self.writer.set,
            claim,
            pool=pool,
            device=device,
            share_id=share_id,
            conditions=conditions,
            data=data,
            network_data=network_data,
        )
        return await asyncio.get_running_loop().run_in_executor(None, call)

    async def clear(
        self, claim: Claim, *, pool: str, device: str, share_id: str | None = None
    ) -> dict[str, Any]:
        """:meth:`resourceslice.DeviceStatusWriter.clear`, awaited."""
        call = functools.partial(
            self.writer.clear, claim, pool=pool, device=device, share_id=share_id
        )
        return await asyncio.get_running_loop().run_in_executor(None, call)
