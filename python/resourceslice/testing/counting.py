"""Count the HTTP requests an ApiClient sends: "a restart makes 0 writes" as a test.

It wraps the client's urllib3 pool manager, the one place every request passes through
(the generated API methods, and the raw-bytes writes of the controller alike)::

    counter = RequestCounter(api_client)
    ... run the controller ...
    assert counter.writes() == {}
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any
from urllib.parse import urlsplit

import kubernetes.client

_WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class RequestCounter:
    def __init__(self, api_client: kubernetes.client.ApiClient) -> None:
        self._lock = threading.Lock()
        self._requests: list[tuple[str, str]] = []
        pool_manager = api_client.rest_client.pool_manager
        send = pool_manager.request

        def counting_request(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
            with self._lock:
                self._requests.append((method.upper(), urlsplit(url).path))
            return send(method, url, *args, **kwargs)

        pool_manager.request = counting_request  # type: ignore[method-assign]

    def requests(self) -> list[tuple[str, str]]:
        """``(method, path)`` of every request so far, in order."""
        with self._lock:
            return list(self._requests)

    def writes(self, path_contains: str = "") -> dict[str, int]:
        """Write requests by method (``{"POST": 79}``), optionally only paths with a substring."""
        with self._lock:
            return dict(
                Counter(m for m, p in self._requests if m in _WRITE_METHODS and path_contains in p)
            )

    def reset(self) -> None:
        with self._lock:
            self._requests.clear()
