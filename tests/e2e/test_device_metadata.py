"""Device metadata in containers (KEP-5304), on the DRA cluster: a pod's claim prepared by a
plugin with ``device_metadata`` on, and what the container runtime then gives each container,
CDI applied by the CDI library: a read-only bind mount of its request's metadata file at the
path the API documents. The mounted file is read with Go's own decoder
(devicemetadata.DecodeMetadataFromStream) and compared with the file Go's own helper writes
for the same claim (resourceslice.testing.devicemetadata); an update after prepare reaches it,
and so does a kubelet restart and a reboot.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import resourceslice as rs
from resourceslice import kubeletplugin
from resourceslice.kubeletplugin import METADATA_V1ALPHA1, METADATA_V1BETA1, DeviceMetadata
from resourceslice.kubeletplugin.metadata import container_path
from resourceslice.testing import ContainerEdits, DRACluster, SimulatedNode
from resourceslice.testing.devicemetadata import build_metadata_oracle, go_decode, go_helper
from support.chain import plugin_dirs

pytestmark = pytest.mark.integration

DRIVER = "nic.example.com"
VERSIONS = [METADATA_V1BETA1, METADATA_V1ALPHA1]
#: What the driver publishes of each device, and tells the containers.
ATTRIBUTES = {
    f"nic-{i}": {
        "model": {"string": "E810" if i == 0 else "X710"},
        "index": {"int": i},
        "resource.kubernetes.io/pcieRoot": {"string": f"pci0000:{0x3A + i:02x}"},
        "firmware": {"version": "4.1.0"},
    }
    for i in range(3)
}


class NicDriver:
    """Prepares the claim's devices of DRIVER (an environment variable each, through its own
    CDI spec) and reports each with its attributes as metadata; remembers what it returned."""

    def __init__(self, cdi_dir: Path) -> None:
        self.cdi = kubeletplugin.CDISpecWriter(DRIVER, cdi_dir=cdi_dir)
        self.returned: dict[str, list[kubeletplugin.PreparedDevice]] = {}
        self.calls = 0

    def prepare_resource_claims(
        self, claims: list[kubeletplugin.ResourceClaim]
    ) -> dict[str, kubeletplugin.PrepareResult]:
        return kubeletplugin.prepare_each(claims, self.prepare_claim)

    def prepare_claim(
        self, claim: kubeletplugin.ResourceClaim
    ) -> list[kubeletplugin.PreparedDevice]:
        self.calls += 1
        mine = kubeletplugin.allocated_devices(claim, DRIVER)
        uid = claim["metadata"]["uid"]
        ids = self.cdi.write_claim(uid, {d.name: {"env": [f"NIC_{d.name[4:]}=1"]} for d in mine})
        devices = [
            d.prepared([ids[d.name]], metadata=DeviceMetadata(attributes=ATTRIBUTES[d.name]))
            for d in mine
        ]
        self.returned[uid] = devices
        return devices

    def unprepare_resource_claims(self, claims: list[kubeletplugin.ClaimRef]) -> dict[str, None]:
        for claim in claims:
            self.cdi.remove_claim(claim.uid)
        return {claim.uid: None for claim in claims}


class Setup:
    """A node running the driver with metadata on (both versions, newest first), its devices
    published, a DeviceClass ``nic``."""

    def __init__(self, cluster: DRACluster) -> None:
        self.cluster = cluster
        self.node: SimulatedNode = cluster.add_node("node-1")
        self.driver = NicDriver(self.node.cdi_dir)
        self.client = cluster.api_client()
        self.helper = kubeletplugin.start(
            self.driver,
            driver=DRIVER,
            api_client=self.client,
            node_name=self.node.name,
            cdi_dir=str(self.node.cdi_dir),
            device_metadata=VERSIONS,
            **plugin_dirs(self.node, DRIVER),
        )
        devices = [{"name": name, "attributes": attrs} for name, attrs in ATTRIBUTES.items()]
        self.helper.publish_resources(
            rs.DriverResources(pools={self.node.name: rs.Pool(devices=devices)})  # type: ignore[list-item]
        )
        cluster.wait_registered(self.node.name, DRIVER)
        assert self.helper.controller is not None and self.helper.controller.wait_synced(60)
        cluster.create_device_class("nic", driver=DRIVER)

    def close(self) -> None:
        self.helper.stop()
        self.client.close()

    def metadata_mount(self, edits: ContainerEdits, path: str) -> Path:
        """The host file a container with ``edits`` has mounted at ``path``, read-only."""
        mounts = [m for m in edits.mounts if m["destination"] == path]
        assert len(mounts) == 1, edits.mounts
        assert {"ro", "bind"} <= set(mounts[0]["options"])
        source = Path(mounts[0]["source"])
        assert source.is_relative_to(self.node.plugin_data_dir(DRIVER))
        return source


@pytest.fixture
def setup(dra_cluster: DRACluster) -> Iterator[Setup]:
    build_metadata_oracle()  # before the cluster's timeouts run
    s = Setup(dra_cluster)
    try:
        yield s
    finally:
        s.close()


def expected_object(
    claim: dict[str, Any], generation: int, pod_claim: str | None, requests: list[dict[str, Any]]
) -> dict[str, Any]:
    meta = claim["metadata"]
    obj: dict[str, Any] = {
        "kind": "DeviceMetadata",
        "apiVersion": METADATA_V1BETA1,
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta["uid"],
            "generation": generation,
        },
    }
    if pod_claim is not None:
        obj["podClaimName"] = pod_claim
    obj["requests"] = requests
    return obj


def go_twin(
    root: Path, claim: dict[str, Any], devices: list[kubeletplugin.PreparedDevice]
) -> dict[str, Any]:
    """Go's helper prepares the same claim with the same devices, its plugin data directory
    ``root/plugin``, its CDI directory ``root/cdi``: its answer to kubelet."""
    answer = go_helper(
        "prepare",
        driver=DRIVER,
        plugin_data_dir=root / "plugin",
        cdi_dir=root / "cdi",
        versions=VERSIONS,
        claim=claim,
        devices=devices,
    )
    assert "error" not in answer, answer
    return answer


def test_a_container_gets_its_requests_metadata_as_gos_helper_writes_it(
    dra_cluster: DRACluster, setup: Setup, tmp_path: Path
) -> None:
    dra_cluster.create_claim_template("one-nic", device_class="nic", request="nic")
    # A claim from a template: under the pod's name for it ("devices"), in each container.
    path = container_path(DRIVER, "nic", pod_claim_name="devices")
    assert path == (
        "/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/devices/nic/"
        "nic.example.com-metadata.json"
    )
    # Each container's process reads it at that path (the reporter's arguments).
    dra_cluster.create_pod(
        "app", claim_template="one-nic", containers=("ctr", "sidecar"), args=[path]
    )
    pod = dra_cluster.wait_pod_prepared("app")
    (claim,) = dra_cluster.pod_claims("app")
    uid = claim["metadata"]["uid"]
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    device = result["device"]

    source = setup.metadata_mount(pod.containers["ctr"], path)
    assert setup.metadata_mount(pod.containers["sidecar"], path) == source
    first_text = source.read_text()
    for name in ("ctr", "sidecar"):
        process = pod.containers[name].process
        assert process is not None, f"container {name} did not run"
        assert process.report.files[path] == first_text
    assert pod.containers["ctr"].env == [f"NIC_{device[4:]}=1"]  # the driver's own edits too

    decoded = go_decode(source)
    assert decoded["decodedFrom"] == METADATA_V1BETA1
    assert decoded["validationError"] == ""
    nic = {"driver": DRIVER, "pool": "node-1", "name": device, "attributes": ATTRIBUTES[device]}
    assert decoded["object"] == expected_object(
        claim, 1, "devices", [{"name": "nic", "devices": [nic]}]
    )

    # Go's helper, for the same claim and the driver's same answer: the same file, the same
    # mount, the same CDI device ID given to the containers.
    answer = go_twin(tmp_path, claim, setup.driver.returned[uid])
    go_file = tmp_path / "plugin/dra-device-metadata" / f"default_{claim['metadata']['name']}"
    assert (go_file / "nic/metadata.json").read_bytes() == source.read_bytes()
    go_spec = json.loads((tmp_path / f"cdi/{DRIVER}_metadata_{uid}_nic.json").read_text())
    (go_mount,) = go_spec["devices"][0]["containerEdits"]["mounts"]
    assert (go_mount["containerPath"], go_mount["options"]) == (path, ["ro", "bind"])
    (go_device,) = answer["devices"]
    metadata_id = f"{DRIVER}/metadata={uid}_nic"
    assert go_device["cdiDeviceIds"] == [f"{DRIVER}/device={uid}-{device}", metadata_id]
    assert sorted(pod.containers["ctr"].cdi_devices) == sorted(go_device["cdiDeviceIds"])

    # Known once the sandbox exists: the network's data, one generation further.
    network = {
        "interfaceName": "net1",
        "ips": ["10.9.8.7/24"],
        "hardwareAddress": "02:00:00:00:00:07",
    }
    now = [
        kubeletplugin.PreparedDevice(
            "node-1", device, metadata=DeviceMetadata(ATTRIBUTES[device], network)
        )
    ]
    meta = claim["metadata"]
    setup.helper.update_request_metadata(meta["namespace"], meta["name"], uid, "nic", now)
    assert go_decode(source)["object"] == expected_object(
        claim, 2, "devices", [{"name": "nic", "devices": [{**nic, "networkData": network}]}]
    )
    # A running container keeps the file it started with: a bind mount of a file holds its
    # inode, and both helpers replace the file by a rename (so that no reader sees half of
    # it). In a real pod the network's update lands between the sandbox and the containers'
    # start, so they are given the new file; here they started right after prepare.
    assert dra_cluster.report_now("app", files=[path]).files[path] == first_text
    update = go_helper(
        "update",
        driver=DRIVER,
        plugin_data_dir=tmp_path / "plugin",
        cdi_dir=tmp_path / "cdi",
        versions=VERSIONS,
        claim=claim,
        devices=now,
        request="nic",
    )
    assert update == {}
    assert (go_file / "nic/metadata.json").read_bytes() == source.read_bytes()
    # A container started now (a restart) is given the same file.
    assert setup.metadata_mount(dra_cluster.container_edits("app"), path) == source

    dra_cluster.delete_pod("app")
    assert not source.parent.parent.exists()
    assert not list(setup.node.cdi_dir.glob(f"{DRIVER}_metadata_*"))


def test_a_named_claim_has_a_file_per_request_named_as_allocated(
    dra_cluster: DRACluster, setup: Setup, tmp_path: Path
) -> None:
    """A claim named in the pod: under its own name. One file per request; a request's
    ``firstAvailable`` alternative is its request's file, named in it as allocated."""
    dra_cluster.create_device_class(
        "e810", driver=DRIVER, selectors=[f'device.attributes["{DRIVER}"].model == "E810"']
    )
    spec = {
        "devices": {
            "requests": [
                {
                    "name": "fast",
                    "firstAvailable": [
                        {"name": "two", "deviceClassName": "e810", "count": 2},
                        {"name": "one", "deviceClassName": "e810"},
                    ],
                },
                {"name": "more", "exactly": {"deviceClassName": "nic", "count": 2}},
            ]
        }
    }
    dra_cluster.create(
        f"/apis/{dra_cluster.resource_api}/namespaces/default/resourceclaims",
        {"metadata": {"name": "nics"}, "spec": spec},
    )
    dra_cluster.create_pod("named", claim="nics")
    pod = dra_cluster.wait_pod_prepared("named")
    (claim,) = dra_cluster.pod_claims("named")
    results = claim["status"]["allocation"]["devices"]["results"]
    assert [r["request"] for r in results] == ["fast/one", "more", "more"]
    others = sorted(r["device"] for r in results[1:])
    assert results[0]["device"] == "nic-0" and others == ["nic-1", "nic-2"]

    def nic(name: str) -> dict[str, Any]:
        return {"driver": DRIVER, "pool": "node-1", "name": name, "attributes": ATTRIBUTES[name]}

    for request, allocated, devices in (("fast", "fast/one", ["nic-0"]), ("more", "more", others)):
        source = setup.metadata_mount(
            pod.containers["ctr"], container_path(DRIVER, request, claim_name="nics")
        )
        decoded = go_decode(source)
        assert decoded["validationError"] == ""
        assert decoded["object"] == expected_object(
            claim, 1, None, [{"name": allocated, "devices": [nic(d) for d in devices]}]
        )
    metadata_mounts = [
        m
        for m in pod.containers["ctr"].mounts
        if m["destination"].startswith("/var/run/kubernetes.io/")
    ]
    assert len(metadata_mounts) == 2

    uid = claim["metadata"]["uid"]
    go_twin(tmp_path, claim, setup.driver.returned[uid])
    for request in ("fast", "more"):
        ours = setup.helper.device_metadata.file_path("default", "nics", request)  # type: ignore[union-attr]
        go = tmp_path / f"plugin/dra-device-metadata/default_nics/{request}/metadata.json"
        assert go.read_bytes() == ours.read_bytes()


def test_an_update_outlives_a_kubelet_restart_and_a_reboot(
    dra_cluster: DRACluster, setup: Setup
) -> None:
    """kubelet prepares every pod's claims again when it restarts. The checkpoint answers,
    so the file keeps what the update wrote (Go's helper has the driver prepare again, and
    rewrites the file at generation 1 from its answer); after a reboot emptied the CDI
    directory, the metadata's spec is written again with the driver's, and a container
    started then still gets its file."""
    dra_cluster.create_claim_template("one-nic", device_class="nic", request="nic")
    dra_cluster.create_pod("app", claim_template="one-nic")
    pod = dra_cluster.wait_pod_prepared("app")
    (claim,) = dra_cluster.pod_claims("app")
    meta = claim["metadata"]
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    path = container_path(DRIVER, "nic", pod_claim_name="devices")
    source = setup.metadata_mount(pod.containers["ctr"], path)
    network = {"interfaceName": "net1", "ips": ["10.9.8.7/24"]}
    setup.helper.update_request_metadata(
        meta["namespace"],
        meta["name"],
        meta["uid"],
        "nic",
        [
            kubeletplugin.PreparedDevice(
                "node-1", result["device"], metadata=DeviceMetadata(network_data=network)
            )
        ],
    )
    updated = source.read_bytes()
    calls = setup.driver.calls

    for reboot in (False, True):
        after = len(dra_cluster.events())
        dra_cluster.stop_kubelet("node-1")
        if reboot:
            setup.node.empty_cdi_dir()
        dra_cluster.start_kubelet("node-1")
        again = dra_cluster.wait_pod_prepared("app", after=after)
        assert setup.metadata_mount(again.containers["ctr"], path) == source
        assert source.read_bytes() == updated
        decoded = go_decode(source)["object"]
        assert decoded["metadata"]["generation"] == 2
        assert decoded["requests"][0]["devices"][0]["networkData"] == network
    assert setup.driver.calls == calls  # answered from the checkpoint
