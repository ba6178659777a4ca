"""resourceslice._http on the real apiserver, with whichever ``kubernetes`` client is installed.

`make test` runs this with the newest supported client and with the oldest (.venv-oldest):
the request path takes only what every supported ApiClient has.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import kubernetes.client
import pytest
from kubernetes.client.exceptions import ApiException

import resourceslice as rs
from resourceslice import _claimwatch, _http, _kubeclient
from resourceslice._claimwatch import ClaimWatch
from resourceslice.informer import SliceInformer, field_selector
from resourceslice.store import SliceStore
from resourceslice.testing import TestCluster, wait_until

pytestmark = pytest.mark.integration

NAMESPACES = "/api/v1/namespaces"


@pytest.fixture
def client(kube_cluster: TestCluster) -> Iterator[_kubeclient.ClosingApiClient]:
    with kube_cluster.api_client("admin") as api_client:
        yield api_client


def recorded_headers(api_client: kubernetes.client.ApiClient) -> list[dict[str, str]]:
    """The headers of each request ``api_client`` sends from now on."""
    sent: list[dict[str, str]] = []
    pool_manager = api_client.rest_client.pool_manager
    send = pool_manager.request

    def recording(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        sent.append(dict(kwargs.get("headers") or {}))
        return send(method, url, *args, **kwargs)

    pool_manager.request = recording  # type: ignore[method-assign]
    return sent


def test_token_comes_from_the_refresh_hook_with_its_prefix(
    client: _kubeclient.ClosingApiClient,
) -> None:
    configuration = client.configuration
    # "Bearer <token>", under the key that this client release uses.
    token = configuration.auth_settings()["BearerToken"]["value"].split()[-1]
    refreshed: list[str] = []

    # Clients before 36 name the key "authorization", later ones "BearerToken" (and 36 looks
    # up the prefix under that name only): both are set, so this holds on every release.
    names = ("authorization", "BearerToken")

    def refresh(config: Any) -> None:
        # A kubeconfig exec plugin does this: the token is renewed just before each request.
        config.api_key = dict.fromkeys(names, token)
        refreshed.append(token)

    configuration.api_key = dict.fromkeys(names, "expired")
    configuration.api_key_prefix = dict.fromkeys(names, "Bearer")
    configuration.refresh_api_key_hook = refresh
    sent = recorded_headers(client)

    items = json.loads(_http.get_json(client, NAMESPACES))["items"]

    assert "default" in {item["metadata"]["name"] for item in items}
    assert refreshed
    assert sent[-1]["authorization"] == f"Bearer {token}"


def test_default_headers_and_cookie_are_sent(client: _kubeclient.ClosingApiClient) -> None:
    client.user_agent = "driver-under-test/1.0"
    client.set_default_header("X-Trace", "abc")  # type: ignore[no-untyped-call]
    client.cookie = "session=1"
    sent = recorded_headers(client)

    _http.get_json(client, NAMESPACES)

    assert sent[-1]["User-Agent"] == "driver-under-test/1.0"
    assert sent[-1]["X-Trace"] == "abc"
    assert sent[-1]["Cookie"] == "session=1"
    assert sent[-1]["Accept"] == "application/json"


def test_an_error_status_is_an_api_exception_with_text_body_and_headers(
    client: _kubeclient.ClosingApiClient,
) -> None:
    with pytest.raises(ApiException) as caught:
        _http.get_json(client, f"{_http.SLICES_PATH}/no-such-slice")
    exc = caught.value
    assert exc.status == 404
    assert isinstance(exc.body, str)
    assert json.loads(exc.body)["reason"] == "NotFound"
    assert exc.headers is not None
    assert exc.headers["Content-Type"] == "application/json"


def test_without_the_token_the_request_is_anonymous(client: _kubeclient.ClosingApiClient) -> None:
    client.configuration.api_key = {}
    with pytest.raises(ApiException) as caught:
        _http.get_json(client, NAMESPACES)
    assert caught.value.status == 403
    assert "system:anonymous" in json.loads(caught.value.body or "{}")["message"]


def test_query_parameters_are_encoded(client: _kubeclient.ClosingApiClient) -> None:
    name = "http-query.example.com"
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "http-query"},
        "spec": {
            "driver": name,
            "allNodes": True,
            "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
        },
    }
    created = json.loads(
        _http.send_json(client, "POST", _http.SLICES_PATH, json.dumps(body).encode())
    )
    try:
        # "=" and "," are part of the value: a selector that reached the server intact finds it.
        selector = f"spec.driver={name},spec.nodeName="
        items = json.loads(
            _http.get_json(client, _http.SLICES_PATH, [("fieldSelector", selector)])
        )["items"]
        assert [item["metadata"]["name"] for item in items] == ["http-query"]
    finally:
        meta = created["metadata"]
        options = _http.delete_options(meta["uid"], meta["resourceVersion"])
        _http.send_json(client, "DELETE", f"{_http.SLICES_PATH}/http-query", options)


def test_delete_preconditions_are_enforced(client: _kubeclient.ClosingApiClient) -> None:
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "http-precondition"},
        "spec": {
            "driver": "http-precondition.example.com",
            "allNodes": True,
            "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
        },
    }
    path = f"{_http.SLICES_PATH}/http-precondition"
    meta = json.loads(
        _http.send_json(client, "POST", _http.SLICES_PATH, json.dumps(body).encode())
    )["metadata"]
    with pytest.raises(ApiException) as caught:
        _http.send_json(client, "DELETE", path, _http.delete_options(meta["uid"], "1"))
    assert caught.value.status == 409
    _http.send_json(
        client, "DELETE", path, _http.delete_options(meta["uid"], meta["resourceVersion"])
    )
    with pytest.raises(ApiException) as gone:
        _http.get_json(client, path)
    assert gone.value.status == 404


def test_close_closes_the_connections(kube_cluster: TestCluster) -> None:
    """Clients before 37 close neither their pool nor the unread ``_preload_content=False``
    response they keep in ``last_response``: its socket outlived ``close()`` (a
    ResourceWarning in whichever later test the garbage collector found it)."""
    api_client = kube_cluster.api_client("admin")
    kubernetes.client.CoreV1Api(api_client).list_namespace(_preload_content=False)
    kept = getattr(api_client, "last_response", None)  # clients before 37 only
    api_client.close()
    assert len(api_client.rest_client.pool_manager.pools) == 0
    if kept is not None:
        assert getattr(kept, "urllib3_response", kept).closed


def test_a_request_whose_deadline_passed_during_authentication_is_not_sent(
    client: _kubeclient.ClosingApiClient,
) -> None:
    """The time left is taken after the token refresh hook ran (a kubeconfig exec plugin
    can take seconds): a deadline it used up raises without a request."""
    configuration = client.configuration
    refresh = configuration.refresh_api_key_hook
    deadline = time.monotonic() + 0.05

    def slow_refresh(config: Any) -> None:
        # A plugin that takes longer than the request's time: it returns once it has.
        wait_until(lambda: time.monotonic() > deadline, timeout=5)
        if refresh is not None:
            refresh(config)

    configuration.refresh_api_key_hook = slow_refresh
    sent = recorded_headers(client)
    with pytest.raises(rs.RequestDeadlineError):
        _http.request(client, "GET", NAMESPACES, deadline=deadline)
    assert sent == []


def test_each_phase_of_a_request_gets_a_share_of_the_time_left(
    client: _kubeclient.ClosingApiClient,
) -> None:
    """urllib3 gives its connect timeout whole to each of connect, TLS handshake and sends:
    a share each keeps their sum within the time left."""
    timeouts: list[Any] = []
    pool_manager = client.rest_client.pool_manager
    send = pool_manager.request

    def recording(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        timeouts.append(kwargs["timeout"])
        return send(method, url, *args, **kwargs)

    pool_manager.request = recording  # type: ignore[method-assign]
    _http.request(client, "GET", NAMESPACES, total=4.0)
    [timeout] = timeouts
    assert 3.5 < timeout.total <= 4.0
    assert timeout.connect_timeout == pytest.approx(timeout.total / 4)


def answers_a_write_at_once(api_client: kubernetes.client.ApiClient) -> None:
    """A write (sent once, never retried) on ``api_client`` is answered within seconds: no
    pooled connection carries it behind a watch the server is still sending."""
    name = f"after-watch-{time.monotonic_ns()}"
    path = f"{NAMESPACES}/default/configmaps"
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}
    _http.request(api_client, "POST", path, body=json.dumps(body).encode(), timeout=(5.0, 10.0))
    _http.request(api_client, "DELETE", f"{path}/{name}", timeout=(5.0, 10.0))


def test_a_watch_given_back_before_its_end_does_not_carry_the_next_request(
    client: _kubeclient.ClosingApiClient,
) -> None:
    """A watch left while the server still streams it (stopped before its first event):
    pooled as it was, the next request on its connection would wait for the watch's end
    (ResponseNotReady, or the read timeout)."""
    version = json.loads(_http.get_json(client, NAMESPACES))["metadata"]["resourceVersion"]
    query = [("watch", "true"), ("resourceVersion", version), ("timeoutSeconds", "300")]
    response = _http.request(client, "GET", NAMESPACES, query=query, stream=True)
    _http.release(response)
    answers_a_write_at_once(client)


def test_a_watch_read_to_its_end_goes_back_to_the_pool(
    client: _kubeclient.ClosingApiClient,
) -> None:
    query = [("watch", "true"), ("timeoutSeconds", "1")]
    response = _http.request(client, "GET", NAMESPACES, query=query, stream=True)
    assert list(_http.stream_lines(response))
    pool = client.rest_client.pool_manager.connection_from_url(client.configuration.host)
    _http.release(response)
    answers_a_write_at_once(client)
    assert pool.num_connections == 1  # the watch's connection, used again


class _StoppedOnArrival:
    """The lister of ``api_client``, whose watch responses arrive just after the informer's
    stop() ran: stop() found no response to shut down."""

    def __init__(self, api_client: kubernetes.client.ApiClient) -> None:
        self._lister = _http.SliceLister(api_client)
        self.informer: SliceInformer | None = None

    def list_resource_slice(self, **options: Any) -> Any:
        response = self._lister.list_resource_slice(**options)
        if options.get("watch") and self.informer is not None:
            self.informer.stop()
        return response


def test_an_informer_stopped_as_its_watch_arrives_leaves_no_watch_in_the_pool(
    client: _kubeclient.ClosingApiClient,
) -> None:
    errors: list[BaseException] = []
    api = _StoppedOnArrival(client)
    informer = SliceInformer(
        client,
        driver="stopped.example.com",
        selector=field_selector("stopped.example.com", None, True),
        store=SliceStore(),
        on_change=lambda old, new: None,
        on_error=lambda exc, what: errors.append(exc),
        api=api,
    )
    api.informer = informer
    informer.start()
    wait_until(lambda: not informer.alive, 30, describe=lambda: "the informer still runs")
    answers_a_write_at_once(client)
    assert errors == []


def test_a_claim_watch_stopped_as_its_watch_arrives_leaves_no_watch_in_the_pool(
    client: _kubeclient.ClosingApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    errors: list[BaseException] = []
    watch = ClaimWatch(
        client,
        replaced=lambda claims: None,
        changed=lambda claim: None,
        deleted=lambda claim: None,
        on_error=lambda exc, what: errors.append(exc),
    )
    send = _http.request  # what _claimwatch sends with

    def stopped_on_arrival(*args: Any, **kwargs: Any) -> Any:
        response = send(*args, **kwargs)
        if ("watch", "true") in kwargs.get("query", ()):
            watch.stop()
        return response

    monkeypatch.setattr(_claimwatch, "request", stopped_on_arrival)
    watch.start()
    wait_until(lambda: not watch.alive, 30, describe=lambda: "the claim watch still runs")
    answers_a_write_at_once(client)
    assert errors == []
