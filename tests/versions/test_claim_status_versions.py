"""DeviceStatusWriter where the claim API is v1beta2 (1.33) or v1beta1 (1.32, and 1.37 pinned to
it), on the real apiserver of each release (v1 is tests/integration/test_claim_status.py).

1.32's DRAResourceClaimDeviceStatus is alpha and off: its apiserver stores no status.devices,
which the writer reports; with the gate on, 1.32 stores them like the others.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import kubernetes.client
import pytest

from resourceslice import ValidationError
from resourceslice._apiversion import SliceVersion
from resourceslice.claimstatus import DeviceStatusDroppedError, DeviceStatusWriter
from resourceslice.testing import TestCluster, plugin, start_cluster
from resourceslice.testing.counting import RequestCounter
from support.claim_env import allocated, delete, entries, read, result
from versions.conftest import on_each_target

pytestmark = pytest.mark.integration

GPU = "gpu.example.com"
OTHER = "nic.example.com"
READY = {"type": "Ready", "status": "True", "reason": "Prepared"}
NETWORK = {"interfaceName": "eth1", "ips": ["10.9.8.7/24"], "hardwareAddress": "00:11:22:33:44:55"}
_names = itertools.count()


def writes_and_clears(client: kubernetes.client.ApiClient, version: str) -> None:
    """Two drivers' entries of one claim created in ``version``: set, replaced, cleared,
    each alone; the claim comes back in the v1 shape."""
    name = f"versions-{next(_names)}"
    results = [
        result(GPU, "node-1", "gpu-0"),
        result(GPU, "node-1", "gpu-1"),
        result(OTHER, "nics", "nic-0"),
    ]
    claim = allocated(client, name, results, version=version)
    try:
        gpus = DeviceStatusWriter(client, driver=GPU, node_name="node-1")
        nics = DeviceStatusWriter(client, driver=OTHER)
        nics.set(claim, pool="nics", device="nic-0", network_data=NETWORK)
        stored = gpus.set(
            claim, pool="node-1", device="gpu-0", conditions=[READY], data={"uuid": "GPU-0"}
        )
        assert stored["apiVersion"] == "resource.k8s.io/v1"
        assert stored["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] == "class"
        gpus.set(claim, pool="node-1", device="gpu-1", data={"uuid": "GPU-1"})
        gpus.set(claim, pool="node-1", device="gpu-0", data={"uuid": "GPU-0", "ok": True})
        found = entries(read(client, name, version))
        assert {k: e.get("data") for k, e in found.items()} == {
            (GPU, "node-1", "gpu-0"): {"uuid": "GPU-0", "ok": True},
            (GPU, "node-1", "gpu-1"): {"uuid": "GPU-1"},
            (OTHER, "nics", "nic-0"): None,
        }
        assert not found[GPU, "node-1", "gpu-0"].get("conditions")  # replaced without them
        assert found[OTHER, "nics", "nic-0"]["networkData"] == NETWORK
        gpus.clear(claim, pool="node-1", device="gpu-1")
        assert set(entries(read(client, name, version))) == {
            (GPU, "node-1", "gpu-0"),
            (OTHER, "nics", "nic-0"),
        }
    finally:
        delete(client, name, version)


@on_each_target
def test_each_served_version(
    release_cluster: TestCluster, release_client: kubernetes.client.ApiClient, served: SliceVersion
) -> None:
    if release_cluster.release == "1.32":
        stores_nothing_without_the_gate(release_client)
    else:
        writes_and_clears(release_client, served.version)


def stores_nothing_without_the_gate(client: kubernetes.client.ApiClient) -> None:
    """1.32 by default: the apiserver answers 200 and stores no status.devices."""
    claim = allocated(client, "dropped", [result(GPU, "node-1", "gpu-0")], version="v1beta1")
    try:
        with pytest.raises(DeviceStatusDroppedError) as dropped:
            DeviceStatusWriter(client, driver=GPU).set(
                claim, pool="node-1", device="gpu-0", data={}
            )
        assert dropped.value.paths == ["status.devices"]
        assert "DRAResourceClaimDeviceStatus" in str(dropped.value)
        assert entries(read(client, "dropped", "v1beta1")) == {}
    finally:
        delete(client, "dropped", "v1beta1")


@pytest.fixture(scope="module")
def gated_132() -> Iterator[TestCluster]:
    """A 1.32 apiserver with DRAResourceClaimDeviceStatus on (its other gates as ever)."""
    if "1.32" not in plugin.tested_releases():
        pytest.skip("RESOURCESLICE_RELEASES leaves 1.32 out")
    with start_cluster(
        release="1.32", extra_args=["--feature-gates=DRAResourceClaimDeviceStatus=true"]
    ) as cluster:
        yield cluster


def test_132_with_its_gate_on(gated_132: TestCluster) -> None:
    client = gated_132.api_client("admin")
    try:
        writes_and_clears(client, "v1beta1")
    finally:
        client.close()


@pytest.mark.parametrize(
    "release_cluster", [r for r in ("1.33", "1.32") if r in plugin.tested_releases()], indirect=True
)
def test_share_ids_need_134(
    release_cluster: TestCluster, release_client: kubernetes.client.ApiClient
) -> None:
    """Before 1.34 an entry has no share ID: refused before anything is sent."""
    counter = RequestCounter(release_client)
    writer = DeviceStatusWriter(release_client, driver=GPU)
    share = "aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa"
    claim = {"metadata": {"namespace": "default", "name": "any"}}
    with pytest.raises(ValidationError) as refused:
        writer.set(claim, pool="node-1", device="gpu-0", share_id=share, data={})
    assert refused.value.errors == [
        f"shareID: needs Kubernetes 1.34 or later, not {release_cluster.release}"
    ]
    assert counter.writes() == {}
