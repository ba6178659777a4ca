"""Raw-bytes requests through a :class:`~resourceslice.connection.Connection` or a
``kubernetes`` ApiClient, the same on every client release.

Every request of the package goes through :func:`request`. Of an ApiClient, the generated
API methods are
not used: each release of the client's code generator behaves differently around them (the
37 client has ``param_serialize``, older ones do not; ``_preload_content=False`` returns
different objects; older ones raise ``ApiException`` through urllib3's deprecated
``getheaders()``), and they validate ``body`` as a model and ``json.dumps()`` it, so neither
passes prepared bytes through. What every supported ApiClient does have is taken instead:
the host, API key (with its prefix and refresh hook: ``Configuration.auth_settings()``),
default headers (the user agent) and cookie, and the urllib3 pool manager that the client
built with the configuration's TLS, proxy and retry settings.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypedDict
from urllib.parse import quote, urlencode

import urllib3

from resourceslice.api import RequestDeadlineError
from resourceslice.connection import ApiError, Connection, api_error

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from resourceslice.connection import Client

#: (connect, read) seconds: a hung apiserver must not stall a worker forever.
REQUEST_TIMEOUT = (10.0, 60.0)
#: The longest ``Retry-After`` honoured, in seconds.
MAX_RETRY_AFTER = 60.0
#: The one authentication scheme of the Kubernetes API spec: the generated methods ask for
#: it by this name, and ``Configuration.auth_settings()`` fills it from ``api_key``.
_AUTH_SETTING = "BearerToken"

SLICES_PATH = "/apis/resource.k8s.io/v1/resourceslices"

#: The socket operations before a request's last byte leaves that urllib3 times one by one,
#: each with the whole connect timeout (``connectionpool._make_request`` sets it once as the
#: connection's timeout): the TCP connect, the TLS handshake, the send of the head and that
#: of the body (CPython times an SSL handshake, an SSL write and a plain ``sendall`` as one
#: deadline each). Through a proxy there are up to four more: ``CONNECT`` sent and its answer
#: read, a TLS handshake with an HTTPS proxy, or SOCKS's exchanges. Not counted, so not bound:
#: the name lookup (no timeout at all), a second address of a host name (a connect timeout
#: of its own), an answer of a proxy that comes in pieces (one timeout per piece).
_DIRECT_PHASES = 4
_PROXIED_PHASES = 8


def delete_options(uid: str, resource_version: str) -> bytes:
    """A DeleteOptions body that deletes only this incarnation of an object, unchanged."""
    preconditions = {"uid": uid, "resourceVersion": resource_version}
    return json.dumps(
        {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": preconditions}
    ).encode()


def request(
    api_client: Client,
    method: str,
    path: str,
    *,
    query: Sequence[tuple[str, str]] = (),
    body: bytes | None = None,
    stream: bool = False,
    timeout: tuple[float, float] | None = None,
    total: float | None = None,
    deadline: float | None = None,
    content_type: str = "application/json",
) -> Any:
    """``method`` ``path``; the urllib3 response, or ApiError if the status is not 2xx.

    ``content_type``: the body's (a patch has its own: ``application/apply-patch+yaml``).

    With ``stream`` the body is left unread, to be read in chunks (a watch); hand the
    connection back with :func:`release`. Otherwise the body is in ``.data``.
    ``timeout``: (connect, read) seconds, by default :data:`REQUEST_TIMEOUT`. ``deadline``
    (``time.monotonic()``): the request's last byte leaves by then or it is not sent (but see
    :data:`_DIRECT_PHASES`), and it is over by then (a leader's write must be, by the end of
    its term); ``total``: the same, as seconds from this call. A deadline that passes before
    the request is sent (the token refresh took the time) raises
    :class:`RequestDeadlineError`: nothing was sent.

    A write is sent once, as client-go sends it: urllib3's default ``Retry`` would send a
    PUT or DELETE again after a lost connection or a 429/503 with ``Retry-After``, each time
    with a fresh timeout, so a write whose first copy the server already applied could land
    again after its deadline (after a successor took the Lease). Whether a write landed when
    its connection broke is unknown; the caller decides what to do next. A request with a
    deadline is not retried either, GET included: its deadline is the caller's (a Lease
    attempt, a kubelet call), and a retry would start the timeout afresh.
    """
    if total is not None:
        by = time.monotonic() + total
        deadline = by if deadline is None else min(deadline, by)
    params = list(query)
    if isinstance(api_client, Connection):
        host, headers = api_client.host, api_client.headers()
    else:
        host, headers = _client_parts(api_client, params)
    pool = pool_manager(api_client)
    headers["Accept"] = "application/json"
    if body is not None:
        headers["Content-Type"] = content_type
    url = host + path
    if params:
        url += "?" + urlencode(params)
    response: Any = pool.request(
        method,
        url,
        body=body,
        headers=headers,
        timeout=_timeout(pool, timeout, deadline, f"{method} {path}"),
        preload_content=not stream,
        # None: the client's own (configuration.retries, else urllib3's default).
        retries=None if method == "GET" and deadline is None else False,
    )
    if not 200 <= response.status <= 299:
        if response.status == 401 and isinstance(api_client, Connection):
            api_client.token_refused()
        raise _api_error(response)
    return response


def pool_manager(api_client: Client) -> Any:
    """The urllib3 pool manager that every request of ``api_client`` goes through."""
    if isinstance(api_client, Connection):
        return api_client.pool_manager
    return api_client.rest_client.pool_manager


def _client_parts(api_client: Any, params: list[tuple[str, str]]) -> tuple[str, dict[str, str]]:
    """An ApiClient's host and headers (with its token, which may go to ``params``)."""
    configuration = api_client.configuration
    headers = dict(api_client.default_headers)
    if api_client.cookie:
        headers["Cookie"] = api_client.cookie
    # May run a kubeconfig exec plugin (the client gives it no timeout): before the time
    # left is taken, so that what it spends counts against the deadline.
    auth = configuration.auth_settings().get(_AUTH_SETTING)
    if auth and auth["value"]:
        if auth["in"] == "query":
            params.append((auth["key"], auth["value"]))
        else:
            headers[auth["key"]] = auth["value"]
    return configuration.host, headers


def _timeout(
    pool_manager: Any, timeout: tuple[float, float] | None, deadline: float | None, what: str
) -> urllib3.Timeout:
    """urllib3's timeout of a request over by ``deadline``, from the time left now, when all
    that comes before the send is done; RequestDeadlineError if none is left."""
    connect, read = timeout or REQUEST_TIMEOUT
    if deadline is None:
        return urllib3.Timeout(connect=connect, read=read)
    left = deadline - time.monotonic()
    if left <= 0:
        raise RequestDeadlineError(f"{what}: not sent, its deadline passed {-left:.3f}s ago")
    # urllib3 gives each phase before the request's last byte leaves the whole connect
    # timeout, not what is left of the total (see _DIRECT_PHASES): so each gets an equal
    # share of what is left, and all of them, slow as they may be, end by the deadline. The
    # read gets the rest: urllib3 counts the total from the start of the connect.
    proxied = getattr(pool_manager, "proxy", None) or getattr(pool_manager, "proxy_url", None)
    phases = _PROXIED_PHASES if proxied else _DIRECT_PHASES
    return urllib3.Timeout(connect=min(connect, left / phases), read=read, total=left)


class _ListSelector(TypedDict):
    field_selector: str


class ListOptions(_ListSelector, total=False):
    """The keywords of a list or watch of ResourceSlices, typed once for every
    ``list_resource_slice``: :class:`SliceLister`'s, which sends them,
    :class:`~resourceslice._apiversion.ResourceSliceAPI`'s, which hands them on in the served
    version, and the informer's :class:`~resourceslice.informer.ListApi`.

    Those of the generated ``ResourceV1Api.list_resource_slice`` (``watch`` and
    ``allow_watch_bookmarks`` default to false, the others to None: not sent), and
    ``timeout``: the request's (connect, read) seconds.
    """

    watch: bool
    allow_watch_bookmarks: bool
    resource_version: str | None
    timeout_seconds: int | None
    timeout: tuple[float, float] | None


class SliceLister:
    """List and watch of ResourceSlices, the informer's view of the API: raw responses."""

    def __init__(self, api_client: Client, path: str = SLICES_PATH) -> None:
        self._client = api_client
        self._path = path

    def list_resource_slice(self, **options: Unpack[ListOptions]) -> Any:
        """The streamed response (read it, then :func:`release` it), or ApiError."""
        query = [("fieldSelector", options["field_selector"])]
        if options.get("watch", False):
            query.append(("watch", "true"))
        if options.get("allow_watch_bookmarks", False):
            query.append(("allowWatchBookmarks", "true"))
        resource_version = options.get("resource_version")
        if resource_version is not None:
            query.append(("resourceVersion", resource_version))
        timeout_seconds = options.get("timeout_seconds")
        if timeout_seconds is not None:
            query.append(("timeoutSeconds", str(timeout_seconds)))
        return request(
            self._client,
            "GET",
            self._path,
            query=query,
            stream=True,
            timeout=options.get("timeout"),
        )


def stream_lines(response: Any) -> Iterator[bytes]:
    """The non-blank lines of a streamed response (a watch: one JSON event a line), each as
    soon as it is whole."""
    pending = bytearray()
    for chunk in response.stream(65536):
        pending += chunk
        start = 0
        while (end := pending.find(b"\n", start)) >= 0:
            line = bytes(pending[start:end])
            start = end + 1
            if line.strip():
                yield line
        del pending[:start]


def release(response: Any) -> None:
    """Done with a streamed response: its connection back to the pool when the body was read
    to its end, else closed.

    urllib3's ``release_conn()`` pools a connection as it is. One whose watch the server is
    still sending (a watch left early: stopped, or an event that could not be applied) would
    carry the client's next request behind that stream: the server reads it only when the
    watch ends, minutes later, and the request fails (ResponseNotReady) or times out.
    """
    if not response.isclosed():
        response.close()
    response.release_conn()


def send_json(
    api_client: Client, method: str, path: str, body: bytes, deadline: float | None = None
) -> bytes:
    """``method`` ``path`` with JSON ``body``; the response body, or ApiError if not 2xx.

    ``deadline`` (``time.monotonic()``): see :func:`request`.
    """
    data: bytes = request(api_client, method, path, body=body, deadline=deadline).data
    return data


def get_json(api_client: Client, path: str, query: Sequence[tuple[str, str]] = ()) -> bytes:
    """GET ``path``; the response body, or ApiError if not 2xx."""
    data: bytes = request(api_client, "GET", path, query=query).data
    return data


def node_uid(api_client: Client, name: str) -> str:
    """The uid of Node ``name`` (ApiError 404 if there is none): the ownerReference of a
    Node owner's slices must name it."""
    node = json.loads(get_json(api_client, f"/api/v1/nodes/{quote(name, safe='')}"))
    return str(node["metadata"]["uid"])


def _api_error(response: Any) -> ApiError:
    """The error of a failed response (also the client's ApiException when ``kubernetes`` is
    loaded), built the same way on every release: ``body`` as text and ``headers`` a
    mapping, as the newest client fills them; the body is read and the connection returned
    to the pool."""
    try:
        data = response.data or b""
    finally:
        response.release_conn()
    body = data.decode("utf-8", "replace") if data else None
    return api_error(response.status, response.reason, body, response.headers)


def retry_after(exc: BaseException) -> float:
    """Seconds an overloaded apiserver asked us to wait (429/503 ``Retry-After``), else 0.

    Capped, so a bogus header cannot park a pool for hours.
    """
    if not isinstance(exc, ApiError) or exc.status not in (429, 503) or not exc.headers:
        return 0.0
    try:
        seconds = float(exc.headers.get("Retry-After", 0))
    except (TypeError, ValueError):
        return 0.0
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)
