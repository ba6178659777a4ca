"""Count the HTTP requests a client sends: "a restart makes 0 writes" as a test.

It wraps the client's urllib3 pool manager, the one place every request passes through
(the generated API methods, and the raw-bytes writes of the controller alike)::

    counter = RequestCounter(api_client)
    ... run the controller ...
    assert counter.writes() == {}
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from resourceslice._http import pool_manager

if TYPE_CHECKING:
    from resourceslice.connection import Client

_WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


@dataclass
class _Request:
    method: str
    path: str
    status: int | None = None  # None while unanswered, or when no answer came (refused, timeout)


class RequestCounter:
    def __init__(self, api_client: Client) -> None:
        self._lock = threading.Lock()
        self._requests: list[_Request] = []
        # Write requests sent and not yet answered (or failed), and the most there were.
        self._in_flight = 0
        self._peak = 0
        pool = pool_manager(api_client)
        send = pool.request

        def counting_request(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
            request = _Request(method.upper(), urlsplit(url).path)
            write = request.method in _WRITE_METHODS
            with self._lock:
                self._requests.append(request)
                if write:
                    self._in_flight += 1
                    self._peak = max(self._peak, self._in_flight)
            try:
                response = send(method, url, *args, **kwargs)
            finally:
                if write:
                    with self._lock:
                        self._in_flight -= 1
            request.status = response.status
            return response

        pool.request = counting_request

    def requests(self) -> list[tuple[str, str]]:
        """``(method, path)`` of every request so far, in order."""
        with self._lock:
            return [(r.method, r.path) for r in self._requests]

    def writes(self, path_contains: str = "", answered: bool = False) -> dict[str, int]:
        """Write requests by method (``{"POST": 79}``), optionally only paths with a substring.

        ``answered``: only those the server answered (a refused connection wrote nothing).
        """
        with self._lock:
            return dict(
                Counter(
                    r.method
                    for r in self._requests
                    if r.method in _WRITE_METHODS
                    and path_contains in r.path
                    and (r.status is not None or not answered)
                )
            )

    def statuses(self, method: str) -> dict[int | None, int]:
        """How many ``method`` requests got each status (None: no answer)."""
        with self._lock:
            return dict(Counter(r.status for r in self._requests if r.method == method))

    def peak_writes_in_flight(self) -> int:
        """The most write requests that were sent and not yet answered at one time."""
        with self._lock:
            return self._peak

    def reset(self) -> None:
        with self._lock:
            self._requests.clear()
            self._peak = self._in_flight
