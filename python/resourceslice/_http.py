"""Raw-bytes requests through a ``kubernetes`` ApiClient.

The client's generated methods validate ``body`` as a model, and its REST layer
``json.dumps()`` every JSON body, so neither passes prepared bytes through. Request bodies
here are the core's canonical JSON, sent as-is: the URL, default headers and authentication
come from the ApiClient (``param_serialize``), the bytes go to its urllib3 pool manager.
"""

from __future__ import annotations

from typing import Any

import urllib3
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException
from kubernetes.client.rest import RESTResponse

#: (connect, read) seconds: a hung apiserver must not stall a worker forever.
REQUEST_TIMEOUT = (10.0, 60.0)
#: The longest ``Retry-After`` honoured, in seconds.
MAX_RETRY_AFTER = 60.0


def send_json(api_client: ApiClient, method: str, path: str, body: bytes) -> bytes:
    """``method`` ``path`` with JSON ``body``; the response body, or ApiException if not 2xx."""
    _, url, headers, _, _ = api_client.param_serialize(
        method=method,
        resource_path=path,
        header_params={"Content-Type": "application/json", "Accept": "application/json"},
        auth_settings=["BearerToken"],
    )
    response: Any = api_client.rest_client.pool_manager.request(
        method,
        url,
        body=body,
        headers=headers,
        timeout=urllib3.Timeout(connect=REQUEST_TIMEOUT[0], read=REQUEST_TIMEOUT[1]),
        preload_content=True,
    )
    if not 200 <= response.status <= 299:
        wrapped: Any = RESTResponse(response)
        wrapped.read()
        text = wrapped.data.decode("utf-8", "replace") if wrapped.data else None
        raise ApiException.from_response(http_resp=wrapped, body=text, data=None)
    data: bytes = response.data
    return data


def retry_after(exc: BaseException) -> float:
    """Seconds an overloaded apiserver asked us to wait (429/503 ``Retry-After``), else 0.

    Capped, so a bogus header cannot park a pool for hours.
    """
    if not isinstance(exc, ApiException) or exc.status not in (429, 503) or not exc.headers:
        return 0.0
    try:
        seconds = float(exc.headers.get("Retry-After", 0))
    except (TypeError, ValueError):
        return 0.0
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)


def read_body(response: Any) -> bytes:
    """All of a ``_preload_content=False`` response, and its connection back to the pool."""
    try:
        data: bytes = response.read()
    finally:
        response.release_conn()
    return data
