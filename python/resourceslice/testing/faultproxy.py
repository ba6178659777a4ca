"""A proxy in front of the test apiserver that slows, stalls or drops chosen requests.

Killing or freezing the apiserver hits every client at once; what a publisher meets more
often is one slow answer, or one connection lost after the server read the request. The
proxy makes those, per request, for the clients that go through it::

    with FaultProxy(cluster) as proxy:
        proxy.rule = lambda method, path: Fault(reset=True) if method == "PUT" else None
        client = proxy.api_client()          # the cluster's admin, through the proxy
        ...
        proxy.forwarded("PUT")               # how many PUTs reached the server

The proxy speaks plain HTTP to its clients (or, with ``tls=True``, HTTPS with the
apiserver's own certificate, so that a new connection has the TLS handshake it has with the
apiserver) and TLS to the apiserver (the bearer token passes through), so it sees where each
request ends; a client sends one request at a time on a connection (urllib3 does not
pipeline), so the answer that follows a request is its. Requests are read by
``Content-Length``; a chunked request body is not supported.
"""

from __future__ import annotations

import contextlib
import select
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from kubernetes.client import Configuration

from resourceslice._getserver import Closing
from resourceslice._kubeclient import ClosingApiClient

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
_CONNECT = b"CONNECT "


class FaultProxy(Closing):
    """A proxy on 127.0.0.1 to ``cluster``'s apiserver; see the module docs.

    ``rule`` may be changed at any time; it is asked once per request.

    ``tls``: clients speak HTTPS to the proxy, which shows the apiserver's certificate (valid
    for 127.0.0.1, signed by the cluster's CA): at :attr:`url`, or through a ``CONNECT``
    tunnel as through an HTTPS proxy (a kubeconfig's ``proxy-url``: ``api_client(tunnel=
    True)``) that inspects what passes. :attr:`tunnel_delay` and :attr:`handshake_delay` then
    slow down each new connection.
    """

    def __init__(
        self, cluster: TestCluster, rule: Rule | None = None, *, tls: bool = False
    ) -> None:
        self.rule: Rule = rule or (lambda method, path: None)
        #: With ``tls``: seconds each new client connection waits for the proxy's side of its
        #: TLS handshake (a slow or distant server), and for the answer to its ``CONNECT`` (a
        #: slow proxy). May be changed at any time; read when a connection is made.
        self.handshake_delay = 0.0
        self.tunnel_delay = 0.0
        self._cluster = cluster
        upstream = urlsplit(cluster.server)
        self._upstream = (upstream.hostname or "127.0.0.1", upstream.port or 443)
        self._tls = ssl.create_default_context(cafile=str(cluster.ca_file))
        self._serving_tls: ssl.SSLContext | None = None
        if tls:
            self._serving_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            self._serving_tls.load_cert_chain(
                cluster.data_dir / "server.crt", cluster.data_dir / "server.key"
            )
        self._listener = socket.create_server(("127.0.0.1", 0))
        port = self._listener.getsockname()[1]
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{port}"
        #: The proxy as an HTTP proxy (``CONNECT``), with ``tls``.
        self.proxy_url = f"http://127.0.0.1:{port}"
        self._closing = threading.Event()
        self._lock = threading.Lock()
        self._forwarded: list[tuple[str, str]] = []
        self._arrived: list[tuple[str, str, float]] = []
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

    def arrivals(self, method: str | None = None, path_contains: str = "") -> list[float]:
        """When (``time.monotonic()``) each request (of ``method``, whose path contains
        ``path_contains``) had reached the proxy whole: when it would have reached a server
        with no proxy in between. A request whose client gave up before sending all of it is
        not there; one lost on the way (``delay``) is."""
        with self._lock:
            return [
                at
                for m, p, at in self._arrived
                if (method is None or m == method) and path_contains in p
            ]

    def api_client(self, user: str = "admin", *, tunnel: bool = False) -> ClosingApiClient:
        """A client of ``user`` (as the cluster's kubeconfig has it) through the proxy;
        ``tunnel`` (with ``tls``): to the apiserver's address, the proxy its HTTP proxy."""
        # Not a copy of the kubeconfig's: its token refresh hook would load the kubeconfig
        # again, server address included. Clients before 35 name the key "authorization".
        token = self._cluster.token(user)
        configuration = Configuration(host=self._cluster.server if tunnel else self.url)
        configuration.api_key = {"BearerToken": token, "authorization": token}
        configuration.api_key_prefix = {"BearerToken": "Bearer", "authorization": "Bearer"}
        if self._serving_tls is not None:
            configuration.ssl_ca_cert = str(self._cluster.ca_file)
        if tunnel:
            if self._serving_tls is None:
                raise ValueError("FaultProxy: a tunnel needs tls=True")
            configuration.proxy = self.proxy_url
            configuration.no_proxy = ""  # not bypassed for 127.0.0.1 by the environment's
        return ClosingApiClient(configuration)

    def kubeconfig(self, path: str, user: str = "admin") -> str:
        """Write a kubeconfig of ``user`` through the proxy to ``path``; return the path."""
        import yaml

        cluster: dict[str, str] = {"server": self.url}
        if self._serving_tls is not None:
            cluster["certificate-authority"] = str(self._cluster.ca_file)
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "proxy", "cluster": cluster}],
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
        if self._serving_tls is not None:
            handshaken = self._open_tls(client, self._serving_tls)
            if handshaken is None:
                return
            client = handshaken
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
                request, buffered = _read_request(connection.client_io, buffered)
                if request is None:
                    return
                method, path = _request_line(request)
                fault = self.rule(method, path) or Fault()
                with self._lock:
                    self._arrived.append((method, path, time.monotonic()))
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

    def _open_tls(self, client: socket.socket, context: ssl.SSLContext) -> ssl.SSLSocket | None:
        """A new connection's ``CONNECT``, if it begins with one, then the proxy's side of its
        TLS handshake, each after its delay; None if the client gave up or the proxy closes."""
        try:
            if client.recv(len(_CONNECT), socket.MSG_PEEK) == _CONNECT:
                head, rest = _read_request(client, b"")
                if head is None or rest:  # a client waits for the answer before its handshake
                    raise OSError("fault proxy: a bad CONNECT")
                if self.tunnel_delay and self._closing.wait(_seconds(self.tunnel_delay)):
                    raise OSError("fault proxy: closing")
                client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        except OSError:
            _close(client)
            return None
        if self.handshake_delay and self._closing.wait(_seconds(self.handshake_delay)):
            _close(client)
            return None
        # Tracked before the handshake, so that close() wakes it; a client that gave up
        # closes its end, which ends it too (the timeout: one that does neither).
        try:
            tls = context.wrap_socket(client, server_side=True, do_handshake_on_connect=False)
        except (OSError, ValueError):
            _close(client)
            return None
        if not self._track(tls):
            _close(tls)
            return None
        try:
            tls.settimeout(30.0)
            tls.do_handshake()
            tls.settimeout(None)
        except (OSError, ValueError):
            _close(tls)
            return None
        return tls


class _Shared:
    """A TLS socket that one thread reads while another writes to it.

    One TLS connection must not be used by two threads at once (OpenSSL's rule: a read and a
    write that overlap lost a request now and then, which then never got an answer). So the
    socket is non-blocking and every TLS call on it holds ``_io``, never a wait. ``ended``:
    the connection is over, stop waiting.
    """

    def __init__(self, sock: ssl.SSLSocket, ended: threading.Event) -> None:
        self._sock = sock
        sock.setblocking(False)
        self._io = threading.Lock()
        self._ended = ended

    def sendall(self, data: bytes) -> None:
        rest = memoryview(data)
        while rest:
            with self._io:
                try:
                    sent = self._sock.send(rest)
                except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                    sent = 0
            if sent:
                rest = rest[sent:]
            elif self._ended.is_set():
                raise OSError("fault proxy: the connection ended")
            else:
                _wait([], [self._sock])

    def recv(self, size: int) -> bytes:
        """The next bytes; b"" at the end of the connection."""
        while True:
            with self._io:
                try:
                    return self._sock.recv(size)
                except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                    pass
            if self._ended.is_set():
                return b""
            _wait([self._sock], [])


def _wait(read: list[socket.socket], write: list[socket.socket]) -> None:
    """A short wait for a socket to be ready; none once it was closed (then the next call
    on it says so)."""
    with contextlib.suppress(OSError, ValueError):
        select.select(read, write, [], 0.05)


class _Connection:
    """One client's connection and its own to the server: relays the answers, with faults.

    Requests go out on the serving thread while :meth:`answers` reads on its own, so a TLS
    socket of the two is used through :class:`_Shared`; ``client_io`` is the client's, for
    the serving thread to read requests from.
    """

    def __init__(self, client: socket.socket, server: ssl.SSLSocket) -> None:
        self._client = client
        self._lock = threading.Lock()
        self._ended = threading.Event()
        self._server = server
        self._server_io = _Shared(server, self._ended)
        self.client_io: socket.socket | _Shared = (
            _Shared(client, self._ended) if isinstance(client, ssl.SSLSocket) else client
        )
        self._fault = Fault()
        self._fresh = False  # the next bytes from the server begin the answer to _fault's request

    def expect(self, fault: Fault) -> None:
        with self._lock:
            self._fault = fault
            self._fresh = True

    def send(self, request: bytes) -> None:
        """Forward ``request`` to the server."""
        self._server_io.sendall(request)

    def answers(self) -> None:
        try:
            while True:
                data = self._server_io.recv(65536)
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
                self.client_io.sendall(data)
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


def _read_request(sock: socket.socket | _Shared, buffered: bytes) -> tuple[bytes | None, bytes]:
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
