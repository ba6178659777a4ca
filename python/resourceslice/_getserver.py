"""A small HTTP server of GET requests that holds under hostile clients: ``/metrics`` and the
probes of :class:`resourceslice.metrics.MetricsServer`.

``http.server.ThreadingHTTPServer`` gives each connection a thread and waits on it forever:
clients that connect and send nothing (or a byte a minute) pile up threads until the pod's
pids limit is reached, and the kubelet's probes hang behind them. Here one event-loop thread
holds every connection while it sends its request, with a deadline for the whole request
head, and a cap on open connections that drops the oldest idle one first, so that a probe
that just connected gets in. Only a complete request reaches the few worker threads that
build the answers (the metrics read the controllers, which may take a lock for a moment).
One request per connection (``Connection: close``): probes and scrapers need no more.
"""

from __future__ import annotations

import asyncio
import http
import socket
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from types import TracebackType

__all__ = ["Closing", "GetServer", "GetServerShell", "ServerLimits"]

_Self = TypeVar("_Self", bound="Closing")

#: What a handler answers for a path: status, content type, body.
Response = tuple[int, str, bytes]


#: Connections the kernel queues before the loop accepts them.
LISTEN_BACKLOG = 1024


@dataclass(frozen=True)
class ServerLimits:
    """What a :class:`GetServer` lets its clients hold.

    ``max_connections``: connections open at once; the oldest that has not finished its
    request is dropped for a new one (the new one, if every other is past its request), so
    that a burst of idle connections leaves at most this many open. ``workers``: threads
    that build answers, so the server runs ``workers + 1`` threads at most.
    ``request_timeout``: seconds for a client to send its whole request head, and again to
    take the answer. ``max_request_bytes``: the largest request head read.
    """

    max_connections: int = 256
    workers: int = 4
    request_timeout: float = 10.0
    max_request_bytes: int = 8192


class GetServer:
    """Serves ``handle(path)`` to GET (and HEAD) requests on ``host:port``, in a thread.

    It listens from the start (an ``OSError`` for a port in use comes from the constructor).
    """

    def __init__(
        self,
        host: str,
        port: int,
        handle: Callable[[str], Response],
        limits: ServerLimits,
        *,
        name: str,
    ) -> None:
        self._handle = handle
        self._limits = limits
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        # A full backlog makes a probe's connect wait for a SYN retry (a second or more):
        # the loop accepts as fast as it can, and the queue absorbs a burst meanwhile.
        self._socket = socket.create_server((host, port), family=family, backlog=LISTEN_BACKLOG)
        self._executor = ThreadPoolExecutor(limits.workers, thread_name_prefix=f"{name}-worker")
        self._loop = asyncio.new_event_loop()
        # Every connection's task until it ends, dropped ones too: close() waits for them.
        self._tasks: set[asyncio.Task[None]] = set()
        # Connections open and not dropped: what max_connections caps.
        self._open: set[asyncio.Task[None]] = set()
        # Those still sending their request, oldest first (dicts keep insertion order).
        self._reading: dict[asyncio.Task[None], asyncio.StreamWriter] = {}
        self._server: asyncio.base_events.Server | None = None
        started = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(started,), name=name, daemon=True)
        self._thread.start()
        started.wait()

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._socket.getsockname()[:2]
        return str(host), int(port)

    def _run(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            # The backlog again: start_server listens on the socket anew, with 100 by default.
            asyncio.start_server(
                self._client,
                sock=self._socket,
                limit=self._limits.max_request_bytes,
                backlog=LISTEN_BACKLOG,
            )
        )
        started.set()
        self._loop.run_forever()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._open.add(task)
        self._reading[task] = writer
        if len(self._open) > self._limits.max_connections:
            # The oldest idle connection is the likeliest to be hostile; a probe has just
            # connected and sends its request at once. (This one, if every other connection
            # is past its request.)
            self._drop(next(iter(self._reading)))
        try:
            timeout = self._limits.request_timeout
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
            finally:
                self._reading.pop(task, None)
            method, path = _request_line(head)
            if method not in ("GET", "HEAD"):
                status, content_type, body = 405, "text/plain; charset=utf-8", b"GET only\n"
            else:
                status, content_type, body = await self._loop.run_in_executor(
                    self._executor, self._handle, path
                )
            writer.write(_response(status, content_type, body, with_body=method != "HEAD"))
            await asyncio.wait_for(writer.drain(), timeout)
        except (
            asyncio.TimeoutError,
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            ValueError,  # readuntil past the limit, or a request line that is not one
            ConnectionError,
        ):
            pass  # a client that does not speak HTTP in time gets nothing
        except asyncio.CancelledError:
            # Dropped for a newer connection, or by close(): the task ends as if it returned.
            # Python 3.11 and 3.12 log an ERROR for a client task that ends cancelled (their
            # streams call its exception(), which raises), for each connection dropped.
            pass
        finally:
            self._tasks.discard(task)
            self._open.discard(task)
            writer.transport.abort()

    def _drop(self, task: asyncio.Task[None]) -> None:
        """Closes the connection of ``task``, which is still reading its request, at once.

        It leaves the bookkeeping now, not when its task next runs: in a burst, the loop
        starts many new connections before any dropped one runs again, and each of them must
        count the drops before it and drop the next oldest, not the same one again (which
        let a burst of 2,000 against a cap of 256 hold ~1,960 open until their timeout).
        """
        writer = self._reading.pop(task)
        self._open.discard(task)
        writer.transport.abort()  # the socket closes at the loop's next turn
        task.cancel()  # and a request already buffered is not answered

    def close(self) -> None:
        """Stops listening, drops every connection, and waits for the threads to end."""
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()
        self._executor.shutdown(wait=True)

    async def _stop(self) -> None:
        assert self._server is not None
        self._server.close()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._server.wait_closed()


class Closing:
    """A server whose ``with`` block ends with its :meth:`close`, which a subclass defines."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self: _Self) -> _Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class GetServerShell(Closing):
    """The shell of a server that answers through a :class:`GetServer` (``self._server``,
    set by the subclass): the probes', the metrics'. Its user sees where it listens, and
    closes it (or leaves a ``with`` block)."""

    _server: GetServer

    @property
    def address(self) -> tuple[str, int]:
        return self._server.address

    def close(self) -> None:
        """Stops listening; returns once its threads ended."""
        self._server.close()


def _request_line(head: bytes) -> tuple[str, str]:
    """The method and the path (query string dropped) of a request head."""
    line = head.split(b"\r\n", 1)[0].decode("latin-1")
    parts = line.split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        raise ValueError(f"not an HTTP request line: {line[:80]!r}")
    return parts[0], parts[1].split("?", 1)[0]


def _response(status: int, content_type: str, body: bytes, *, with_body: bool) -> bytes:
    head = (
        f"HTTP/1.1 {status} {http.HTTPStatus(status).phrase}\r\n"
        f"Content-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode("latin-1")
    return head + body if with_body else head
