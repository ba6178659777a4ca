"""Discovery and the ``resourceslice`` command on a real apiserver of each release."""

from __future__ import annotations

import json
import re

import kubernetes.client
import pytest

from resourceslice import cli
from resourceslice._apiversion import ResourceSliceAPI
from resourceslice.testing import TestCluster

from .conftest import generated_api

pytestmark = pytest.mark.integration

EXAMPLE = "examples/gpu-node.yaml"
#: The newest resource.k8s.io version each release serves.
NEWEST = {"1.37": "v1", "1.33": "v1beta2", "1.32": "v1beta1"}


def test_discovery_picks_the_newest_served_version(release_cluster: TestCluster) -> None:
    with release_cluster.api_client() as client:
        assert ResourceSliceAPI(client).current().version == NEWEST[release_cluster.release]


def test_publish_status_and_a_second_publish_that_writes_nothing(
    release_cluster: TestCluster,
    capsys: pytest.CaptureFixture[str],
    request: pytest.FixtureRequest,
    pytestconfig: pytest.Config,
) -> None:
    driver = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower())[:40].strip("-") + ".cli.test"
    kubeconfig = str(release_cluster.kubeconfigs["admin"])
    example = str(pytestconfig.rootpath / EXAMPLE)
    publish = ["publish", example, "--driver", driver, "--node", "n1", "--once"]
    publish += ["--kubeconfig", kubeconfig, "--timeout", "60"]
    with release_cluster.api_client() as client:  # the Node owns the slices
        kubernetes.client.CoreV1Api(client).create_node(
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}
        )
    try:
        assert cli.main(publish) == 0
        out, err = capsys.readouterr()
        assert err == ""
        assert "1 pool, 3 slices, 288 devices; 3 writes needed" in out
        assert "3 creates, 0 updates, 0 deletes" in out

        status = ["status", "--driver", driver, "--node", "n1", "--kubeconfig", kubeconfig]
        assert cli.main(status) == 0
        out, err = capsys.readouterr()
        assert err == ""
        assert out.splitlines()[1].split() == ["n1", "n1", "1", "3/3", "288", "ok"]

        assert cli.main(publish) == 0
        out, _ = capsys.readouterr()
        assert "0 writes needed" in out and "0 creates, 0 updates, 0 deletes" in out
    finally:
        with release_cluster.api_client() as client:
            kubernetes.client.CoreV1Api(client).delete_node("n1")
            api = generated_api(ResourceSliceAPI(client).current(), client)
            api.delete_collection_resource_slice(
                field_selector=f"spec.driver={driver}", _preload_content=False
            )
            left = api.list_resource_slice(
                field_selector=f"spec.driver={driver}", _preload_content=False
            )
            assert json.loads(left.data)["items"] == []
