"""resourceslice.Connection on the real apiserver: the kubeconfigs and the Pod's service
account it reads, who the apiserver takes it for (a SelfSubjectReview), a token file that
rotates or is refused, a client certificate, the ``kubernetes`` client for the rest, and a
driver that publishes without ever loading ``kubernetes``."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

import resourceslice as rs
from resourceslice import _http
from resourceslice._kubeclient import ClosingApiClient
from resourceslice.testing import TestCluster, start_cluster, wait_until

pytestmark = pytest.mark.integration

REVIEWS = "/apis/authentication.k8s.io/v1/selfsubjectreviews"


def whoami(client: rs.Connection | ClosingApiClient) -> str:
    """The user name the apiserver authenticates ``client``'s requests as."""
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    review = json.loads(_http.send_json(client, "POST", REVIEWS, json.dumps(body).encode()))
    return str(review["status"]["userInfo"]["username"])


def write_kubeconfig(path: Path, cluster: dict[str, object], user: dict[str, object]) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "ctx",
    }
    path.write_text(yaml.safe_dump(config))
    return path


def b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def token_file_connection(cluster: TestCluster, token: Path, period: float) -> rs.Connection:
    """A Connection to ``cluster`` whose token is read from ``token``, again every
    ``period`` seconds (and after a 401)."""
    return rs.Connection(
        cluster.server, token_file=token, ca_file=cluster.ca_file, token_period=period
    )


def test_a_kubeconfig_with_a_token_and_a_ca_file(kube_cluster: TestCluster) -> None:
    with rs.Connection.from_kubeconfig(str(kube_cluster.kubeconfigs["admin"])) as connection:
        assert whoami(connection) == "admin"


def test_inline_ca_and_a_token_file_relative_to_the_kubeconfig(
    kube_cluster: TestCluster, tmp_path: Path
) -> None:
    (tmp_path / "token").write_text(kube_cluster.token("driver") + "\n")
    path = write_kubeconfig(
        tmp_path / "config",
        {"server": kube_cluster.server, "certificate-authority-data": b64(kube_cluster.ca_file)},
        {"tokenFile": "token"},
    )
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    os.chdir(elsewhere)  # the path is relative to the kubeconfig, not to the process
    with rs.Connection.from_kubeconfig(str(path)) as connection:
        assert whoami(connection) == "driver"


def test_merged_kubeconfigs_the_first_file_wins_and_a_context_can_be_chosen(
    kube_cluster: TestCluster,
) -> None:
    merged = os.pathsep.join(str(kube_cluster.kubeconfigs[u]) for u in ("driver", "admin"))
    with rs.Connection.from_kubeconfig(merged) as connection:
        assert whoami(connection) == "driver"  # the first file's current-context
    with rs.Connection.from_kubeconfig(merged, context="admin") as connection:
        assert whoami(connection) == "admin"
    with pytest.raises(rs.ConfigError, match="no context 'nobody'"):
        rs.Connection.from_kubeconfig(merged, context="nobody")


def test_in_a_pod_the_service_account_mount_and_the_service_address(
    kube_cluster: TestCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "token").write_text(kube_cluster.token("admin"))
    (tmp_path / "ca.crt").write_bytes(kube_cluster.ca_file.read_bytes())
    host, port = kube_cluster.server.removeprefix("https://").rsplit(":", 1)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", host)
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", port)
    with rs.Connection.in_cluster(tmp_path) as connection:
        assert whoami(connection) == "admin"
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST")
    with pytest.raises(rs.ConfigError, match="not in a Pod"):
        rs.Connection.in_cluster(tmp_path)


def test_the_token_file_is_read_again_as_kubelet_rotates_it(
    kube_cluster: TestCluster, tmp_path: Path
) -> None:
    token = tmp_path / "token"
    token.write_text(kube_cluster.token("admin"))
    connection = token_file_connection(kube_cluster, token, 0.2)
    with connection:
        assert whoami(connection) == "admin"
        token.write_text(kube_cluster.token("driver"))
        wait_until(lambda: whoami(connection) == "driver", 10)
        # kubelet replaces the file by a rename: a moment without it keeps the token in use.
        token.unlink()
        assert whoami(connection) == "driver"


def test_a_refused_token_is_read_again_before_the_next_request(
    kube_cluster: TestCluster, tmp_path: Path
) -> None:
    token = tmp_path / "token"
    token.write_text("revoked")
    # A period no test waits out: only the 401 can make it read the file again.
    connection = token_file_connection(kube_cluster, token, 3600)
    with connection:
        with pytest.raises(rs.ApiError) as refused:
            whoami(connection)
        assert refused.value.status == 401
        token.write_text(kube_cluster.token("admin"))
        assert whoami(connection) == "admin"


def test_a_driver_whose_token_was_refused_publishes_once_it_is_renewed(
    kube_cluster: TestCluster, tmp_path: Path
) -> None:
    token = tmp_path / "token"
    token.write_text("revoked")
    errors: list[BaseException] = []
    connection = token_file_connection(kube_cluster, token, 3600)
    resources = rs.DriverResources(
        pools={"renewed": rs.Pool(devices=[{"name": "dev-0"}], all_nodes=True)}
    )
    with (
        connection,
        rs.start_controller(
            connection,
            driver="renewed.example.com",
            resources=resources,
            error_handler=lambda exc, what: errors.append(exc),
        ) as ctrl,
    ):
        wait_until(lambda: any(getattr(e, "status", None) == 401 for e in errors), 30)
        token.write_text(kube_cluster.token("admin"))
        wait_until(lambda: ctrl.stats().creates == 1, 60, describe=lambda: str(ctrl.stats()))


def test_a_refused_request_is_an_api_error_and_the_clients_api_exception(
    kube_cluster: TestCluster,
) -> None:
    connection = rs.Connection.from_kubeconfig(str(kube_cluster.kubeconfigs["driver"]))
    # kubernetes is loaded in this process: the error is also its ApiException.
    with connection, pytest.raises(ApiException) as refused:
        _http.get_json(connection, "/api/v1/nodes/none")
    assert isinstance(refused.value, rs.ApiError)
    assert refused.value.status == 403
    assert "forbidden" in json.loads(refused.value.body or "{}")["message"]


def test_an_exec_plugin_kubeconfig_gets_the_kubernetes_client(
    kube_cluster: TestCluster, tmp_path: Path
) -> None:
    credential = {
        "apiVersion": "client.authentication.k8s.io/v1",
        "kind": "ExecCredential",
        "status": {"token": kube_cluster.token("admin")},
    }
    plugin = tmp_path / "plugin"
    plugin.write_text(f"#!/bin/sh\necho '{json.dumps(credential)}'\n")
    plugin.chmod(0o755)
    path = write_kubeconfig(
        tmp_path / "config",
        {"server": kube_cluster.server, "certificate-authority": str(kube_cluster.ca_file)},
        {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": str(plugin),
                  "interactiveMode": "Never"}},
    )  # fmt: skip
    with pytest.raises(rs.connection.UnsupportedConfig, match=r"user\.exec"):
        rs.Connection.from_kubeconfig(str(path))
    client = rs.connect(str(path))
    try:
        assert isinstance(client, ClosingApiClient)
        assert whoami(client) == "admin"
    finally:
        client.close()


@pytest.fixture(scope="module")
def cert_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestCluster, Path]]:
    """A cluster that also takes client certificates of a CA of the test's own, and a
    certificate and key of that CA for ``cert-admin`` (system:masters)."""
    directory = tmp_path_factory.mktemp("client-ca")

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True)

    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes")
    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
            "-subj", "/CN=resourceslice-test-client-ca")  # fmt: skip
    openssl("req", *ec, "-keyout", "client.key", "-out", "client.csr",
            "-subj", "/O=system:masters/CN=cert-admin")  # fmt: skip
    openssl("x509", "-req", "-in", "client.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "client.crt", "-days", "2")  # fmt: skip
    with start_cluster(extra_args=[f"--client-ca-file={directory / 'ca.crt'}"]) as cluster:
        yield cluster, directory


@pytest.mark.parametrize("inline", [False, True], ids=["files", "data"])
def test_a_client_certificate(
    cert_cluster: tuple[TestCluster, Path], tmp_path: Path, inline: bool
) -> None:
    cluster, certs = cert_cluster
    user: dict[str, object] = (
        {"client-certificate-data": b64(certs / "client.crt"),
         "client-key-data": b64(certs / "client.key")}
        if inline
        else {"client-certificate": str(certs / "client.crt"),
              "client-key": str(certs / "client.key")}
    )  # fmt: skip
    path = write_kubeconfig(
        tmp_path / "config",
        {"server": cluster.server, "certificate-authority": str(cluster.ca_file)},
        user,
    )
    with rs.Connection.from_kubeconfig(str(path)) as connection:
        assert whoami(connection) == "cert-admin"


_DRIVER = """
import json, sys
import resourceslice as rs
import resourceslice.kubeletplugin

client = rs.connect(sys.argv[1])
pool = rs.Pool(devices=[{"name": "dev-0"}, {"name": "dev-1"}], all_nodes=True)
with client, rs.start_controller(
    client, driver="lean.example.com", resources=rs.DriverResources(pools={"lean": pool})
) as ctrl:
    synced = ctrl.wait_synced(60)
    published = ctrl.stats().creates
try:
    rs._http.get_json(client, "/api/v1/nodes/none")
except rs.ApiError as exc:
    refused = [exc.status, [c.__module__ + "." + c.__qualname__ for c in type(exc).__mro__]]
print(json.dumps({
    "client": type(client).__name__,
    "synced": synced,
    "published": published,
    "refused": refused,
    "kubernetes": sorted(m for m in sys.modules if m.split(".")[0] == "kubernetes"),
}))
"""


def test_a_driver_on_a_connection_publishes_without_loading_kubernetes(
    kube_cluster: TestCluster,
) -> None:
    """Through the public API, in a process of its own: the node path (the publisher and the
    kubelet plugin's modules) never loads the ``kubernetes`` package, errors included."""
    env = {**os.environ, "PYTHONPATH": str(Path(rs.__file__).parent.parent)}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_DRIVER), str(kube_cluster.kubeconfigs["admin"])],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["client"] == "Connection"
    assert seen["synced"] and seen["published"] == 1
    assert seen["kubernetes"] == []
    assert seen["refused"] == [
        404,
        ["resourceslice.connection.ApiError", "builtins.Exception", "builtins.BaseException",
         "builtins.object"],
    ]  # fmt: skip
