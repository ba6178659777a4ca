"""Binding conditions: a device the driver must attach before the pod may be bound.

A device reachable over a fabric (a GPU in a composable chassis, memory behind a CXL
switch) is not usable on the node the scheduler picked until the driver has attached it
there. Its ResourceSlice says so with ``bindingConditions`` (and ``bindingFailureConditions``,
required with them; ``bindsToNode: true`` so that the allocation names the node), which the
scheduler copies into the claim's allocation; in PreBind it then waits (polling every 5 s,
for up to its binding timeout, 10 minutes by default) until each of them is a True condition
of the device's entry in the claim's ``status.devices``. A True failure condition, or the
timeout, makes it drop the allocation and schedule the pod again (Kubernetes 1.34+,
``DRADeviceBindingConditions``: beta and on since 1.36).

:class:`BindingController` is what sets them: it watches the claims allocated from the pools
its :class:`~resourceslice.Controller` publishes, and for each device whose binding
conditions are pending it calls the driver's ``attach(claim, device)`` (plain or ``async
def``) and writes the outcome with a :class:`~resourceslice.DeviceStatusWriter`: True: the
device's binding conditions True; False or :class:`BindingFailedError`: its (first) failure
condition True. Any other exception is reported and the attach retried with backoff (the
scheduler's timeout bounds how long). It works under the controller's leader election:
only the replica holding a pool's Lease (a shard's, with ``shards``) attaches that pool's
devices, and each status write is over before that term could end.

Before it calls ``attach`` it writes the binding conditions False with reason ``Attaching``:
a replica that takes over after the leader died mid-attach sees it and calls ``attach``
again with ``device.retry`` True. ``attach`` must therefore be idempotent for one
allocation (``device.claim_uid``, ``device.allocated_at``, pool, device).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import copy
import inspect
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Union

from resourceslice._bindingclaims import (
    ATTACH_FAILED,
    ATTACHED,
    ATTACHING,
    BindingDevice,
    BindingFailedError,
    allocated_at,
    claim_key,
    conditions,
    has_binding_conditions,
    pending_devices,
)
from resourceslice._claimwatch import ClaimWatch
from resourceslice.api import ResourceSliceError
from resourceslice.claimstatus import DeviceCondition, DeviceStatusWriter
from resourceslice.connection import ApiError
from resourceslice.controller import Controller
from resourceslice.leaderelection import NotLeaderError
from resourceslice.workqueue import ExponentialBackoff, WorkQueue

if TYPE_CHECKING:
    from types import TracebackType

    from resourceslice.aio import AsyncController

log = logging.getLogger(__name__)

ErrorHandler = Callable[[BaseException, str], None]
#: A claim's allocation: namespace, name, allocationTimestamp.
_Key = tuple[str, str, str]


#: ``attach(claim, device)``: True once attached; False or BindingFailedError when it cannot
#: be; another exception for a transient failure (retried). May be an ``async def``.
AttachCallback = Callable[[dict[str, Any], BindingDevice], Union[bool, Awaitable[bool]]]


@dataclass(frozen=True)
class BindingStats:
    """``attach`` calls so far, and what they came to (``errors``: transient, retried)."""

    attaches: int = 0
    attached: int = 0
    failed: int = 0
    errors: int = 0


@dataclass
class _Attempt:
    """This process's dealings with one device of one allocation."""

    tried: bool = False
    #: The conditions to write, once ``attach`` answered, and whether they were.
    outcome: list[DeviceCondition] | None = None
    written: bool = False


def _log_error(exc: BaseException, message: str) -> None:
    log.error("%s: %s", message, exc, exc_info=exc if log.isEnabledFor(logging.DEBUG) else None)


class BindingController:
    """Attaches the devices with binding conditions of ``controller``'s pools, and sets the
    conditions (see the module's doc), from its construction until :meth:`stop`.

    ``controller``: the driver's running :class:`~resourceslice.Controller` (or
    :class:`resourceslice.aio.AsyncController`): its API client, driver, pools and leader
    election are this helper's. ``attach(claim, device)``: see :data:`AttachCallback`;
    ``claim`` is the claim (v1, a copy), ``device`` a :class:`BindingDevice`. ``workers``:
    attaches run at once (one claim's devices one after the other). ``loop``: where an
    ``async def`` attach runs: by default the running loop when constructed in a
    coroutine, else a thread with a loop of its own. ``error_handler(exc, message)``: failed
    attaches and writes, the watch's errors (default: logged).
    """

    def __init__(
        self,
        controller: Controller | AsyncController,
        *,
        attach: AttachCallback,
        workers: int = 4,
        error_handler: ErrorHandler | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        ctrl = controller if isinstance(controller, Controller) else controller.controller
        client = ctrl._client
        if client is None:
            raise ValueError("the controller is inactive (no API client): nothing to attach")
        if workers < 1:
            raise ValueError(f"workers must be at least 1, not {workers}")
        self._ctrl = ctrl
        self._driver = ctrl.driver
        self._attach = attach
        self._error_handler = error_handler or _log_error
        if loop is None:
            with contextlib.suppress(RuntimeError):
                loop = asyncio.get_running_loop()
        self._loop = loop
        self._own_loop: tuple[asyncio.AbstractEventLoop, threading.Thread] | None = None
        self._status = DeviceStatusWriter(client, driver=self._driver)
        self._lock = threading.Lock()
        self._claims: dict[tuple[str, str], dict[str, Any]] = {}
        # By claim uid, then (allocatedAt, pool, device, shareID).
        self._attempts: dict[str, dict[tuple[str, str, str, str], _Attempt]] = {}
        self._counts = {"attaches": 0, "attached": 0, "failed": 0, "errors": 0}
        self._in_flight: set[concurrent.futures.Future[Any]] = set()
        self._stopping = threading.Event()
        # Keyed by allocation (namespace, name, allocatedAt): an attach that hangs holds its
        # own allocation's key, never the claim's next allocation (the scheduler's timeout
        # dropped the first).
        self._queue: WorkQueue[_Key] = WorkQueue(backoff=ExponentialBackoff(0.5, 30.0))
        self._watch = ClaimWatch(
            client,
            replaced=self._replaced,
            changed=self._changed,
            deleted=self._deleted,
            on_error=self._report,
        )
        self._workers = [
            threading.Thread(target=self._work, name=f"resourceslice-binding-{i}", daemon=True)
            for i in range(workers)
        ]
        ctrl._add_leadership_listener(self._on_leadership)
        self._watch.start()
        for worker in self._workers:
            worker.start()

    # -- public ---------------------------------------------------------------------------

    def stats(self) -> BindingStats:
        with self._lock:
            return BindingStats(**self._counts)

    def wait_synced(self, timeout: float | None = None) -> bool:
        """Whether the first list of the claims is in (waiting up to ``timeout``)."""
        return self._watch.wait_synced(timeout)

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until no claim is queued, waiting for a retry, or being worked on."""
        return self.wait_synced(timeout) and self._queue.wait_idle(timeout)

    def stop(self) -> None:
        """Stop watching and attaching; returns once no status write is in flight. An
        ``async def`` attach under way is cancelled; a plain one is waited for (its outcome
        is not written). Stop this before the controller whose Lease it writes under."""
        self._stopping.set()
        self._ctrl._remove_leadership_listener(self._on_leadership)
        self._queue.shutdown()
        self._watch.stop()
        with self._lock:
            in_flight = list(self._in_flight)
        for future in in_flight:
            future.cancel()
        current = threading.current_thread()
        for worker in self._workers:
            if worker is not current:
                worker.join()
        if self._own_loop is not None:
            own, thread = self._own_loop
            own.call_soon_threadsafe(own.stop)
            thread.join()
            own.close()

    def __enter__(self) -> BindingController:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def __aenter__(self) -> BindingController:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # In a thread: an async attach being waited for runs on this loop.
        await asyncio.get_running_loop().run_in_executor(None, self.stop)

    # -- the claims -----------------------------------------------------------------------

    def _relevant(self, claim: Mapping[str, Any]) -> bool:
        return has_binding_conditions(claim, self._driver)

    def _pending(self, claim: Mapping[str, Any]) -> list[BindingDevice]:
        return pending_devices(claim, self._driver, self._ctrl._publishes)

    def _replaced(self, claims: list[dict[str, Any]]) -> None:
        kept = {claim_key(c): c for c in claims if self._relevant(c)}
        with self._lock:
            gone = [c for k, c in self._claims.items() if k not in kept]
            self._claims = kept
        for claim in gone:
            self._forget(claim, None)
        for claim in kept.values():
            self._forget(claim, allocated_at(claim))
            if self._pending(claim):
                self._queue.add(_work_key(claim))

    def _changed(self, claim: dict[str, Any]) -> None:
        key = claim_key(claim)
        if not self._relevant(claim):
            self._deleted(claim)
            return
        with self._lock:
            self._claims[key] = claim
        self._forget(claim, allocated_at(claim))
        if self._pending(claim):
            self._queue.add(_work_key(claim))

    def _deleted(self, claim: dict[str, Any]) -> None:
        with self._lock:
            self._claims.pop(claim_key(claim), None)
        self._forget(claim, None)

    def _forget(self, claim: Mapping[str, Any], keep: str | None) -> None:
        """Drop this process's attempts of the claim but those of allocation ``keep``."""
        uid = str(claim.get("metadata", {}).get("uid") or "")
        with self._lock:
            attempts = self._attempts.get(uid)
            if attempts is None:
                return
            for k in [k for k in attempts if k[0] != keep]:
                del attempts[k]
            if not attempts:
                del self._attempts[uid]

    def _on_leadership(self, leading: bool, covers: Callable[[str], bool] | None) -> None:
        if not leading:
            return  # writes are refused from now on; attaches under way finish
        with self._lock:
            claims = list(self._claims.values())
        for claim in claims:
            if any(covers is None or covers(d.pool) for d in self._pending(claim)):
                self._queue.add(_work_key(claim))

    # -- the work -------------------------------------------------------------------------

    def _work(self) -> None:
        while True:
            key = self._queue.get()
            if key is None:
                return
            try:
                self._sync(key)
            except (KeyboardInterrupt, SystemExit):
                raise
            except NotLeaderError:
                pass  # the Lease was lost meanwhile: taking it back queues the claim again
            except BaseException as exc:
                if not self._stopping.is_set():
                    with self._lock:
                        self._counts["errors"] += 1
                    self._report(exc, f"binding conditions of claim {key[0]}/{key[1]}")
                    self._queue.add_rate_limited(key)
            else:
                self._queue.forget(key)
            finally:
                self._queue.done(key)

    def _sync(self, key: _Key) -> None:
        with self._lock:
            claim = self._claims.get(key[:2])
        if claim is None or allocated_at(claim) != key[2]:
            return  # allocated anew (another key) or no more
        for device in self._pending(claim):
            if self._stopping.is_set() or not self._ctrl._holds(device.pool):
                return  # a standby: taking the pool's Lease queues the claim again
            attempt = self._attempt(device)
            if attempt.outcome is None:
                if not device.retry:
                    self._write(claim, device, conditions(device, ATTACHING, None))
                retry = device.retry or attempt.tried
                attempt.tried = True
                attempt.outcome = self._call_attach(claim, replace(device, retry=retry))
            with self._lock:
                current = self._claims.get(key[:2])
            if current is None or not any(
                d.same_allocation(device) for d in self._pending(current)
            ):
                # Deallocated meanwhile (the scheduler gave up), or done: nothing to write.
                log.info("%s/%s: %s/%s is no longer pending", *key[:2], device.pool, device.device)
                continue
            if not attempt.written:  # else the watch has not shown it yet
                self._write(current, device, attempt.outcome)
                attempt.written = True

    def _attempt(self, device: BindingDevice) -> _Attempt:
        with self._lock:
            attempts = self._attempts.setdefault(device.claim_uid, {})
            key = (device.allocated_at, device.pool, device.device, device.share_id or "")
            return attempts.setdefault(key, _Attempt())

    def _call_attach(
        self, claim: Mapping[str, Any], device: BindingDevice
    ) -> list[DeviceCondition]:
        """``attach``'s outcome as the conditions to write; raises what it raised but
        BindingFailedError (an outcome)."""
        with self._lock:
            self._counts["attaches"] += 1
        failed: BindingFailedError | None = None
        try:
            attached = self._resolve(self._attach(copy.deepcopy(dict(claim)), device))
        except BindingFailedError as exc:
            failed = exc
        else:
            if attached is False:
                failed = BindingFailedError("attach failed")
            elif attached is not True:
                raise TypeError(f"attach returned {attached!r}, not True or False")
        with self._lock:
            self._counts["attached" if failed is None else "failed"] += 1
        if failed is None:
            return conditions(device, ATTACHED, None)
        return conditions(device, failed.reason, failed)

    def _resolve(self, value: bool | Awaitable[bool]) -> bool:
        """``value``, or what it resolves to on the loop of ``async def`` attaches."""
        if not inspect.isawaitable(value):
            return value

        async def wait() -> bool:
            return await value

        future = asyncio.run_coroutine_threadsafe(wait(), self._callback_loop())
        with self._lock:
            self._in_flight.add(future)
        if self._stopping.is_set():
            future.cancel()
        try:
            return future.result()
        except concurrent.futures.CancelledError:
            raise NotLeaderError("stopped during an attach") from None
        finally:
            with self._lock:
                self._in_flight.discard(future)

    def _callback_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is not None:
            return self._loop
        with self._lock:
            if self._own_loop is None:
                own = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=own.run_forever, name="resourceslice-binding-loop", daemon=True
                )
                thread.start()
                self._own_loop = (own, thread)
            return self._own_loop[0]

    def _write(
        self, claim: Mapping[str, Any], device: BindingDevice, wanted: list[DeviceCondition]
    ) -> None:
        """The device's entry, under the pool's Lease: over before its term could end."""
        if self._stopping.is_set():
            raise NotLeaderError("stopped")
        budget = self._ctrl._lease_budget(device.pool)
        deadline = None if budget is None else time.monotonic() + budget
        answered = False
        try:
            self._status.set(
                claim,
                pool=device.pool,
                device=device.device,
                share_id=device.share_id,
                conditions=wanted,
                deadline=deadline,
            )
            answered = True
        except (ApiError, ResourceSliceError):
            answered = True  # refused, or not sent: nothing of it can land later
            raise
        finally:
            if budget is not None:
                self._ctrl._lease_write_ended(device.pool, answered)

    def _report(self, exc: BaseException, message: str) -> None:
        try:
            self._error_handler(exc, message)
        except Exception:
            log.exception("the error handler failed")


def _work_key(claim: Mapping[str, Any]) -> _Key:
    return (*claim_key(claim), allocated_at(claim) or "")


#: Constructing a :class:`BindingController` starts it.
start_binding_controller = BindingController

__all__ = [
    "ATTACHED",
    "ATTACHING",
    "ATTACH_FAILED",
    "AttachCallback",
    "BindingController",
    "BindingDevice",
    "BindingFailedError",
    "BindingStats",
    "start_binding_controller",
]
