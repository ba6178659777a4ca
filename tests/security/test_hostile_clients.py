"""The metrics and health server under hostile clients: thousands of idle connections and a
slowloris client neither hang the probes nor pile up threads (issue 23, item 1)."""

from __future__ import annotations

import socket
import threading
import urllib.request
from collections.abc import Iterator

import pytest

import resourceslice as rs
from integration.controller_env import ControllerEnv, device, env_fixture, pools  # noqa: F401
from resourceslice import metrics
from resourceslice.testing import wait_until

pytestmark = pytest.mark.integration

IDLE_CONNECTIONS = 2000
#: The kubelet's default probe timeout (timeoutSeconds: 1): a probe slower than this fails.
PROBE_TIMEOUT = 1.0


@pytest.fixture
def idle() -> Iterator[list[socket.socket]]:
    held: list[socket.socket] = []
    yield held
    for sock in held:
        sock.close()


def connect(address: tuple[str, int]) -> socket.socket:
    return socket.create_connection(address, timeout=5)


def closed_by_server(sock: socket.socket) -> bool:
    """The server closed ``sock`` (EOF or reset) — without blocking."""
    sock.setblocking(False)
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except ConnectionError:
        return True


def test_idle_and_slowloris_clients_neither_hang_the_probes_nor_pile_up_threads(
    env: ControllerEnv, idle: list[socket.socket]
) -> None:
    limits = metrics.ServerLimits(max_connections=256, workers=4, request_timeout=3.0)
    ctrl = env.start(pools(p=rs.Pool(devices=[device(0)])))
    with metrics.serve("127.0.0.1", 0, limits) as server:
        server.add(ctrl)
        address = server.address
        # The server's loop thread runs already; its workers start on demand, at most `workers`.
        cap = threading.active_count() + limits.workers

        slowloris = connect(address)
        idle.append(slowloris)
        slowloris.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # and never the blank line
        for _ in range(IDLE_CONNECTIONS):
            idle.append(connect(address))
        assert threading.active_count() <= cap

        url = f"http://127.0.0.1:{address[1]}/livez"
        with urllib.request.urlopen(url, timeout=PROBE_TIMEOUT) as response:
            assert response.status == 200
        assert threading.active_count() <= cap
        # Past the cap, the oldest idle connections were dropped for the new ones.
        # (The loop may still be accepting the last of them from the listen backlog.)
        wait_until(
            lambda: sum(closed_by_server(s) for s in idle) >= len(idle) - limits.max_connections,
            timeout=10,
        )
        # The slowloris client gets no more than the request timeout (or is dropped sooner).
        wait_until(lambda: closed_by_server(slowloris), timeout=limits.request_timeout + 5)


def test_a_request_head_past_the_limit_is_dropped() -> None:
    limits = metrics.ServerLimits(max_request_bytes=1024)
    with metrics.serve("127.0.0.1", 0, limits) as server:
        sock = connect(server.address)
        sock.sendall(b"GET /livez HTTP/1.1\r\nX: " + b"a" * 4096)
        wait_until(lambda: closed_by_server(sock), timeout=5)
        sock.close()
