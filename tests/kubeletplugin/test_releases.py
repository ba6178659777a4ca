"""The plugin with clusters of every release the package serves: it reads the claims kubelet
names in the newest resource.k8s.io version the apiserver serves (v1, v1beta2 on 1.33, v1beta1
on 1.32) and hands them to the driver as v1, and offers kubelets before 1.34 the v1beta1
service they speak."""

from __future__ import annotations

from pathlib import Path

import kubernetes.client
import pytest

from resourceslice import kubeletplugin
from resourceslice._apiversion import ResourceSliceAPI
from resourceslice.testing import TestCluster
from resourceslice.testing.kubelet import KubeletHarness
from support.kubelet_env import RecordingPlugin, allocated_claim, delete_claim, uid

pytestmark = pytest.mark.integration

DRIVER = "releases.example.com"


def test_prepare_on_each_release(
    release_cluster: TestCluster,
    release_client: kubernetes.client.ApiClient,
    node_dir: Path,
    kubelet: KubeletHarness,
) -> None:
    version = ResourceSliceAPI(release_client).current().version
    assert version == {"1.32": "v1beta1", "1.33": "v1beta2"}.get(release_cluster.release, "v1")
    # kubelet 1.32 and 1.33 know only v1beta1.DRAPlugin.
    new_kubelet = release_cluster.release not in ("1.32", "1.33")
    plugin = RecordingPlugin(DRIVER)
    helper = kubeletplugin.start(
        plugin,
        driver=DRIVER,
        api_client=release_client,
        registrar_dir=str(node_dir / "registry"),
        plugin_data_dir=str(node_dir / "plugins"),
        node_v1=new_kubelet,
    )
    claim = allocated_claim(release_client, DRIVER, "release-claim", ["dev-0"], version=version)
    try:
        event = kubelet.wait_registered(DRIVER)
        assert event["versions"][0] == ("v1.DRAPlugin" if new_kubelet else "v1beta1.DRAPlugin")
        answer = kubelet.prepare(DRIVER, [claim])
        assert answer["claims"][uid(claim)]["error"] == ""
        assert [d["deviceName"] for d in answer["claims"][uid(claim)]["devices"]] == ["dev-0"]
        # The driver gets v1 whatever the cluster serves: the request's fields under
        # "exactly", where v1beta1 has them inline.
        (got,) = plugin.prepare_calls[0]
        assert got["apiVersion"] == "resource.k8s.io/v1"
        assert got["spec"]["devices"]["requests"] == [
            {
                "name": "req",
                "exactly": {"deviceClassName": DRIVER, "allocationMode": "ExactCount", "count": 1},
            }
        ]
        assert got["metadata"]["uid"] == uid(claim)
        assert kubelet.unprepare(DRIVER, [claim])["claims"][uid(claim)]["error"] == ""
    finally:
        helper.stop()
        delete_claim(release_client, "release-claim", version)
