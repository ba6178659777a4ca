"""A proxy in front of the test apiserver that slows, stalls or drops chosen requests.

Killing or freezing the apiserver hits every client at once; what a publisher meets more
often is one slow answer, or one connection lost after the server read the request. The
proxy makes those, per request, for the clients that go through it::

    with FaultProxy(cluster) as proxy:
        proxy.rule = lambda method, path: Fault(reset=True) if method == "PUT" else None
        client = proxy.api_client()          # the cluster's admin, through the proxy
        ...
        proxy.forwarded("PUT")               # how many PUTs reached the server

The proxy speaks plain HTTP to its clients and TLS to the apiserver (the bearer token
passes through), so it sees where each request ends; a client sends one request at a time
on a connection (urllib3 does not pipeline), so the answer that follows a request is its.
Requests are read by ``Content-Length``; a chunked request body is not supported.
"""

from __future__ import annotations

import contextlib
import select
import socket
import ssl
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from kubernetes.client import Configuration

from resourceslice._http import ClosingApiClient

if TYPE_CHECKING:
    from resourceslice.testing.cluster import TestCluster


@dataclass(frozen=True)
class Fault:
    """What happens to one request.

    ``delay``: seconds before it is forwarded (a slow server; ``float("inf")``: never, the
    request is lost on the way). ``stall``: seconds its answer is held back after the server
    gave it (``float("inf")``: until the client gives up or the proxy closes); the server
    applied the request, a write included. ``reset``: once the server has answered, the client's
    connection is reset instead: the request was applied, the client cannot know it.
    """

    delay: float = 0.0
    stall: float = 0.0
    reset: bool = False


#: Which fault a request meets: ``rule(method, path)`` (path with its query), None for none.
Rule = Callable[[str, str], "Fault | None"]

_HEAD_END = b"\r\n\r\n"


class FaultProxy:
    """A plain-HTTP proxy on 127.0.0.1 to ``cluster``'s apiserver; see the module docs.

    ``rule`` may be changed at any time; it is asked once per request.
    """

    def __init__(self, cluster: TestCluster, rule: Rule | None = None) -> None:
        self.rule: Rule = rule or (lambda method, path: None)
        self._cluster = cluster
        upstream = urlsplit(cluster.server)
        self._upstream = (upstream.hostname or "127.0.0.1", upstream.port or 443)
        self._tls = ssl.create_default_context(cafile=str(cluster.ca_file))
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._closing = threading.Event()
        self._lock = threading.Lock()
        self._forwarded: list[tuple[str, str]] = []
        self._sockets: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._spawn(self._accept)

    # -- what tests ask ---------------------------------------------------------------------

    def forwarded(self, method: str | None = None, path_contains: str = "") -> int:
        """How many requests (of ``method``, whose path contains ``path_contains``) the
        proxy sent on to the server: what the server received, retries included."""
        with self._lock:
            return sum(
                (method is None or m == method) and path_contains in p for m, p in self._forwarded
            )

    def api_client(self, user: str = "admin") -> ClosingApiClient:
        """A client of ``user`` (as the cluster's kubeconfig has it) through the proxy."""
        # Not a copy of the kubeconfig's: its token refresh hook would load the kubeconfig
        # again, server address included. Clients before 35 name the key "authorization".
        token = self._cluster.token(user)
        configuration = Configuration(host=self.url)
        configuration.api_key = {"BearerToken": token, "authorization": token}
        configuration.api_key_prefix = {"BearerToken": "Bearer", "authorization": "Bearer"}
        return ClosingApiClient(configuration)

    def kubeconfig(self, path: str, user: str = "admin") -> str:
        """Write a kubeconfig of ``user`` through the proxy to ``path``; return the path."""
        import yaml

        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "proxy", "cluster": {"server": self.url}}],
            "users": [{"name": user, "user": {"token": self._cluster.token(user)}}],
            "contexts": [{"name": "proxy", "context": {"cluster": "proxy", "user": user}}],
            "current-context": "proxy",
        }
        with open(path, "w") as f:
            yaml.safe_dump(config, f)
        return path

    def close(self) -> None:
        """Stop: every connection through the proxy is closed, stalled answers end."""
        self._closing.set()
        with self._lock:
            sockets = [*list(self._sockets), self._listener]
        for sock in sockets:
            _close(sock)
        for thread in self._threads:
            thread.join()

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- the connections ----------------------------------------------------------------------

    def _spawn(self, target: Callable[..., None], *args: object) -> None:
        thread = threading.Thread(target=target, args=args, name="fault-proxy", daemon=True)
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()]
            self._threads.append(thread)
        thread.start()

    def _track(self, sock: socket.socket) -> bool:
        with self._lock:
            if self._closing.is_set():
                return False
            self._sockets.add(sock)
            return True

    def _accept(self) -> None:
        while not self._closing.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if not self._track(client):
                _close(client)
                return
            self._spawn(self._serve, client)

    def _serve(self, client: socket.socket) -> None:
        try:
            raw = socket.create_connection(self._upstream)
            server = self._tls.wrap_socket(raw, server_hostname=self._upstream[0])
        except OSError:
            _close(client)
            return
        if not self._track(server):
            _close(client, server)
            return
        connection = _Connection(client, server)
        self._spawn(connection.answers)
        try:
            buffered = b""
            while not self._closing.is_set():
                request, buffered = _read_request(client, buffered)
                if request is None:
                    return
                method, path = _request_line(request)
                fault = self.rule(method, path) or Fault()
                if fault.delay and self._closing.wait(_seconds(fault.delay)):
                    return
                connection.expect(fault)
                with self._lock:
                    self._forwarded.append((method, path))
                connection.send(request)
        except OSError:
            return
        finally:
            connection.close()


class _Connection:
    """One client's connection and its own to the server: relays the answers, with faults.

    Requests go out on the serving thread while :meth:`answers` reads on its own, and one
    TLS connection must not be used by two threads at once (OpenSSL's rule: a read and a
    write that overlap lost a request now and then, which then never got an answer). So the
    server's socket is non-blocking and every TLS call on it holds ``_io``, never a wait.
    """

    def __init__(self, client: socket.socket, server: socket.socket) -> None:
        self._client = client
        self._server = server
        server.setblocking(False)
        self._io = threading.Lock()
        self._lock = threading.Lock()
        self._ended = threading.Event()
        self._fault = Fault()
        self._fresh = False  # the next bytes from the server begin the answer to _fault's request

    def expect(self, fault: Fault) -> None:
        with self._lock:
            self._fault = fault
            self._fresh = True

    def send(self, request: bytes) -> None:
        """Forward ``request`` to the server."""
        rest = memoryview(request)
        while rest:
            with self._io:
                try:
                    sent = self._server.send(rest)
                except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                    sent = 0
            if sent:
                rest = rest[sent:]
            elif self._ended.is_set():
                raise OSError("fault proxy: the connection ended")
            else:
                select.select([], [self._server], [], 0.05)

    def _receive(self) -> bytes:
        """The server's next bytes; b"" at the end of its connection."""
        while True:
            with self._io:
                try:
                    return self._server.recv(65536)
                except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                    pass
            if self._ended.is_set():
                return b""
            select.select([self._server], [], [], 0.05)

    def answers(self) -> None:
        try:
            while True:
                data = self._receive()
                if not data:
                    return
                with self._lock:
                    fault, fresh = self._fault, self._fresh
                    self._fresh = False
                if fresh and fault.reset:
                    self.close(reset=True)
                    return
                if fresh and fault.stall and self._ended.wait(_seconds(fault.stall)):
                    return
                self._client.sendall(data)
        except OSError:
            return
        finally:
            self.close()

    def close(self, reset: bool = False) -> None:
        """End both connections; ``reset``: the client's with a RST, not a FIN, as a
        crashed server or a dropped route would leave it."""
        with self._lock:
            if self._ended.is_set():
                return
            self._ended.set()
        if reset:
            try:
                self._client.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                )
                self._client.shutdown(socket.SHUT_RD)  # wakes the reader; sends nothing
            except OSError:
                pass
            self._client.close()
            _close(self._server)
        else:
            _close(self._client, self._server)


def _read_request(sock: socket.socket, buffered: bytes) -> tuple[bytes | None, bytes]:
    """The next whole request on ``sock`` (head and ``Content-Length`` body) and what was
    read beyond it; None at the end of the connection."""
    while _HEAD_END not in buffered:
        data = sock.recv(65536)
        if not data:
            return None, b""
        buffered += data
    head, _, rest = buffered.partition(_HEAD_END)
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
        elif name.strip().lower() == b"transfer-encoding":
            raise OSError("fault proxy: chunked request bodies are not supported")
    while len(rest) < length:
        data = sock.recv(65536)
        if not data:
            return None, b""
        rest += data
    return head + _HEAD_END + rest[:length], rest[length:]


def _seconds(wait: float) -> float | None:
    """A wait for ``Event.wait``: None for ever (it refuses an infinite timeout)."""
    return None if wait == float("inf") else wait


def _request_line(request: bytes) -> tuple[str, str]:
    method, path, _ = request.split(b"\r\n", 1)[0].decode("latin-1").split(" ", 2)
    return method, path


def _close(*sockets: socket.socket) -> None:
    """Shut down, then close: a shutdown wakes a thread blocked reading the socket (or in
    ``accept()``), a close alone does not."""
    for sock in sockets:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()
