"""Where a driver's coroutine callbacks run: its own event loop, or a thread with one of ours."""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Iterator
from typing import Generic, TypeVar, cast

_T = TypeVar("_T")


class CallbackLoop:
    """Where coroutine callbacks run: the driver's event loop, or a thread with one of ours."""

    def __init__(self, loop: asyncio.AbstractEventLoop | None) -> None:
        self._loop = loop
        self._own: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._closed = False

    def get(self) -> asyncio.AbstractEventLoop:
        if self._loop is not None:
            return self._loop
        with self._lock:
            if self._closed:
                raise RuntimeError("the kubelet plugin is stopped")
            if self._own is None:
                own = asyncio.new_event_loop()
                self._thread = threading.Thread(
                    target=own.run_forever, name="kubeletplugin-loop", daemon=True
                )
                self._thread.start()
                self._own = own
            return self._own

    def resolve(self, value: _T | Awaitable[_T], deadline: float | None = None) -> _T:
        """``value`` itself, or what it resolves to when it is awaitable.

        ``deadline`` (``time.monotonic()``): kubelet's, of the call this serves. An awaitable
        the loop has not started by then never starts: this raises TimeoutError at once,
        however busy the loop. One started is cancelled, and waited for until it has ended
        (so that what it held, the serialization lock above all, is free once this raises
        TimeoutError).
        """
        if not inspect.isawaitable(value):
            return value
        # Whether the awaitable started is decided once, under ``guard``: by its task's first
        # step on the loop, or by the deadline. A cancel sent to the loop at the deadline
        # cannot decide it: it may run before that first step (the task was just queued, or
        # the loop is busy), find nothing to cancel, and the call would wait for all of it.
        guard = threading.Lock()
        started: list[asyncio.Task[_T]] = []
        abandoned = False
        pending: concurrent.futures.Future[_T] = concurrent.futures.Future()

        async def run() -> _T:
            with guard:
                if abandoned:
                    raise asyncio.CancelledError
                started.append(cast("asyncio.Task[_T]", asyncio.current_task()))
            return await value

        def settle(task: asyncio.Task[_T]) -> None:
            if task.cancelled():
                pending.cancel()
            elif (error := task.exception()) is not None:
                pending.set_exception(error)
            else:
                pending.set_result(task.result())

        def begin() -> None:
            # Abandoned already: no task is made, so none is left pending (nor a coroutine
            # unawaited) should the loop stop before it ran.
            with guard:
                if abandoned:
                    return
            try:
                task = loop.create_task(run())
            except BaseException as exc:
                pending.set_exception(exc)
                raise
            task.add_done_callback(settle)

        loop = self.get()
        loop.call_soon_threadsafe(begin)
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            return pending.result(left)
        except concurrent.futures.TimeoutError:
            pass
        with guard:
            abandoned = not started
        if abandoned:
            # Not started, so nothing of it ran: nothing to wait for (the loop may be busy for
            # long), and closed, it never will run.
            if inspect.iscoroutine(value):
                value.close()
            raise TimeoutError("kubelet's deadline passed before the callback started")
        loop.call_soon_threadsafe(started[0].cancel)
        try:
            return pending.result()  # it may have finished meanwhile
        except concurrent.futures.CancelledError:
            raise TimeoutError("kubelet's deadline passed: the callback was cancelled") from None

    def close(self) -> None:
        with self._lock:
            self._closed = True
            own, thread = self._own, self._thread
            self._own = self._thread = None
        if own is not None and thread is not None:
            own.call_soon_threadsafe(own.stop)
            thread.join()
            own.close()


class Iteration(Generic[_T]):
    """A plain iterator over a driver's plain or asynchronous one, that another thread can
    cancel: :meth:`cancel` ends an asynchronous iterator's pending ``await`` at once, a
    plain one's at its next item (a thread blocked in Python code cannot be interrupted).
    :meth:`close` closes the driver's iterator, on the thread that iterated it."""

    def __init__(self, loop: CallbackLoop, items: Iterator[_T] | AsyncIterator[_T]) -> None:
        self._loop = loop
        self._items = items
        self._lock = threading.Lock()
        # The task awaiting the asynchronous iterator's next item, while there is one.
        self._task: asyncio.Task[_T] | None = None
        self._cancelled = False

    def __iter__(self) -> Iteration[_T]:
        return self

    def __next__(self) -> _T:
        with self._lock:
            if self._cancelled:
                raise StopIteration
        if not hasattr(self._items, "__anext__"):
            return next(self._items)
        agen = cast(AsyncIterator[_T], self._items)

        async def next_item() -> _T:
            task = asyncio.current_task()
            with self._lock:
                self._task = cast("asyncio.Task[_T]", task)
                if self._cancelled and task is not None:
                    task.cancel()
            try:
                return await agen.__anext__()
            finally:
                with self._lock:
                    self._task = None

        # The task is cancelled in the loop, and this waits until it has ended: the driver's
        # generator is then finished, and closing it cannot find it still running.
        pending = asyncio.run_coroutine_threadsafe(next_item(), self._loop.get())
        try:
            return pending.result()
        except (StopAsyncIteration, concurrent.futures.CancelledError):
            raise StopIteration from None

    def cancel(self) -> None:
        with self._lock:
            self._cancelled = True
            task = self._task
        if task is not None:
            task.get_loop().call_soon_threadsafe(task.cancel)

    def close(self) -> None:
        aclose = getattr(self._items, "aclose", None)
        if aclose is not None:
            asyncio.run_coroutine_threadsafe(aclose(), self._loop.get()).result()
            return
        close = getattr(self._items, "close", None)
        if close is not None:
            close()
