"""A leader's write, and a Lease request, reach the server by their deadline or not at all.

What a request does after its deadline is granted counts against it: the token refresh of a
kubeconfig exec credential plugin (run with no timeout, before every request once its
credential expired) and, on a new connection, the connect, the TLS handshake and the send.
The session's real apiserver sits behind :class:`~resourceslice.testing.faultproxy.FaultProxy`,
which notes when each request has reached it whole: when it would have reached the server.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import kubernetes.client
import pytest
import yaml

import resourceslice as rs
from resourceslice import _http, _kubeclient
from resourceslice._apiversion import ResourceSliceAPI
from resourceslice._http import pool_manager
from resourceslice.leaderelection import LeaderElector
from resourceslice.testing import TestCluster
from resourceslice.testing.faultproxy import FaultProxy

pytestmark = [pytest.mark.integration, pytest.mark.fault]

NAMESPACE = "default"
DRIVER = "deadline.example.com"
SHORT = {"lease_duration": 3.0, "renew_deadline": 2.0, "retry_period": 0.5}
#: How much later than the deadline the proxy may note a request that the client sent on
#: time: the proxy's thread may be scheduled late on a loaded machine.
MARGIN = 0.25

#: A kubeconfig exec credential plugin. It sleeps for the seconds in ``$1/delay`` (if there
#: is such a file), then prints an ExecCredential that has already expired, so the client
#: runs the plugin again in ``Configuration.auth_settings()`` before every request.
PLUGIN = """#!/bin/sh
if [ -f "$1/delay" ]; then sleep "$(cat "$1/delay")"; fi
printf '{"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
 "status": {"token": "%s", "expirationTimestamp": "2000-01-01T00:00:00Z"}}' "$PLUGIN_TOKEN"
"""


class ExecPlugin:
    """A kubeconfig through ``proxy`` whose user's token comes from :data:`PLUGIN`."""

    def __init__(self, directory: Path, cluster: TestCluster, proxy: FaultProxy) -> None:
        self._dir = directory
        script = directory / "token-plugin"
        script.write_text(PLUGIN)
        script.chmod(0o755)
        user = {
            "exec": {
                "apiVersion": "client.authentication.k8s.io/v1",
                "command": str(script),
                "args": [str(directory)],
                "env": [{"name": "PLUGIN_TOKEN", "value": cluster.token("admin")}],
                "interactiveMode": "Never",
            }
        }
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "proxy", "cluster": {"server": proxy.url}}],
            "users": [{"name": "exec", "user": user}],
            "contexts": [{"name": "proxy", "context": {"cluster": "proxy", "user": "exec"}}],
            "current-context": "proxy",
        }
        self.kubeconfig = directory / "kubeconfig"
        self.kubeconfig.write_text(yaml.safe_dump(config))

    def client(self) -> _kubeclient.ClosingApiClient:
        return _kubeclient.kubeconfig_client(str(self.kubeconfig))

    def slow(self, seconds: float) -> None:
        """Each run of the plugin from now on takes ``seconds`` (0: none)."""
        delay = self._dir / "delay"
        if seconds:
            delay.write_text(str(seconds))
        elif delay.exists():
            os.remove(delay)


class Budget:
    """A write budget of ``seconds`` for each write, the deadlines it granted and the
    outcomes told (``write_ended``)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.deadlines: list[float] = []
        self.ended: list[bool] = []

    def __call__(self) -> float:
        self.deadlines.append(time.monotonic() + self.seconds)
        return self.seconds

    def api(self, client: kubernetes.client.ApiClient) -> ResourceSliceAPI:
        return ResourceSliceAPI(client, self, self.ended.append)


def lateness(arrivals: list[float], deadline: float) -> list[float]:
    """Seconds after ``deadline`` (beyond :data:`MARGIN`) at which requests arrived."""
    return [round(at - deadline, 2) for at in arrivals if at > deadline + MARGIN]


def slice_body(name: str) -> bytes:
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": DRIVER,
            "allNodes": True,
            "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
        },
    }
    return json.dumps(body).encode()


def slice_exists(client: kubernetes.client.ApiClient, name: str) -> bool:
    try:
        _http.get_json(client, f"{_http.SLICES_PATH}/{name}")
    except kubernetes.client.ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


@pytest.fixture
def admin(kube_client: kubernetes.client.ApiClient) -> Iterator[kubernetes.client.ApiClient]:
    """The cluster's admin; the slices a test wrote (sent too late) are removed after it."""
    yield kube_client
    found = _http.get_json(
        kube_client, _http.SLICES_PATH, [("fieldSelector", f"spec.driver={DRIVER}")]
    )
    for item in json.loads(found)["items"]:
        meta = item["metadata"]
        options = _http.delete_options(meta["uid"], meta["resourceVersion"])
        _http.send_json(kube_client, "DELETE", f"{_http.SLICES_PATH}/{meta['name']}", options)


@pytest.fixture
def proxy(kube_cluster: TestCluster) -> Iterator[FaultProxy]:
    with FaultProxy(kube_cluster) as fault_proxy:
        yield fault_proxy


@pytest.fixture
def plugin(tmp_path: Path, kube_cluster: TestCluster, proxy: FaultProxy) -> ExecPlugin:
    return ExecPlugin(tmp_path, kube_cluster, proxy)


def test_a_slow_token_refresh_does_not_send_a_write_after_its_deadline(
    plugin: ExecPlugin, proxy: FaultProxy, admin: kubernetes.client.ApiClient
) -> None:
    """The exec plugin takes 1.5 s, the write has 1.0 s: it is not sent, and it says so
    (not sent is as safe as answered: the leader may still hand its Lease over)."""
    name = "deadline-token-refresh"
    budget = Budget(1.0)
    with plugin.client() as client:
        api = budget.api(client)
        api.current()  # the version discovery, with the plugin still quick
        plugin.slow(1.5)
        outcome: Exception | None = None
        try:
            api.create(slice_body(name))
        except Exception as exc:
            outcome = exc
        plugin.slow(0)
    [deadline] = budget.deadlines
    late = lateness(proxy.arrivals("POST", "resourceslices"), deadline)
    assert late == [], f"the write reached the server {late} s after its deadline"
    assert isinstance(outcome, rs.RequestDeadlineError), outcome
    assert budget.ended == [True]
    assert not slice_exists(admin, name)


def test_a_slow_token_refresh_does_not_send_a_lease_renewal_after_its_deadline(
    plugin: ExecPlugin, proxy: FaultProxy, request: pytest.FixtureRequest
) -> None:
    """A renewal must be over by the leader's deadline (renew_deadline after its last
    renewal was sent); an exec plugin slower than that must not carry it past."""
    lease = "rd-" + request.node.name.lower().replace("_", "-")[5:45].strip("-")
    errors: list[BaseException] = []
    with plugin.client() as client:
        elector = LeaderElector(
            client,
            rs.LeaderElection(NAMESPACE, lease, identity="slow-token", **SHORT),
            on_change=lambda leading: None,
            on_error=lambda exc, _: errors.append(exc),
        )
        assert elector.try_acquire_or_renew()
        deadline = time.monotonic() + elector.remaining()
        plugin.slow(SHORT["renew_deadline"] + 1.0)
        renewed = elector.try_acquire_or_renew()
        plugin.slow(0)
        late = lateness(proxy.arrivals("PUT", f"/leases/{lease}"), deadline)
        elector.stop()  # releases the Lease
    assert late == [], f"the renewal reached the server {late} s after the leader's deadline"
    assert not renewed
    assert [type(e) for e in errors] == [rs.RequestDeadlineError], errors


def test_a_slow_new_connection_does_not_send_a_write_after_its_deadline(
    kube_cluster: TestCluster, admin: kubernetes.client.ApiClient
) -> None:
    """A new connection through an HTTPS proxy (a kubeconfig's ``proxy-url``), each of its
    phases slow but within the write's 2.0 s: the proxy answers CONNECT in 1.5 s, the TLS
    handshake takes 1.5 s more. Together they must not carry the write past its deadline
    (urllib3 gives each phase the whole of its connect timeout)."""
    name = "deadline-new-connection"
    budget = Budget(2.0)
    with FaultProxy(kube_cluster, tls=True) as proxy, proxy.api_client(tunnel=True) as client:
        api = budget.api(client)
        api.current()  # the version discovery, on a connection of its own
        pool_manager(client).clear()  # the write opens a new one
        proxy.tunnel_delay = 1.5
        proxy.handshake_delay = 1.5
        outcome: Exception | None = None
        try:
            api.create(slice_body(name))
        except Exception as exc:
            outcome = exc
        ended = time.monotonic()
        [deadline] = budget.deadlines
        late = lateness(proxy.arrivals("POST", "resourceslices"), deadline)
    assert late == [], f"the write reached the server {late} s after its deadline"
    assert outcome is not None
    # Not sent, but urllib3 does not say so for a timeout before the request went out: its
    # outcome is unknown (then the leader leaves its Lease to expire, the safe side).
    assert budget.ended == [False]
    assert ended <= deadline + MARGIN, ended - deadline
    assert not slice_exists(admin, name)
