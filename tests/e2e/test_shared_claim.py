"""Two pods naming one ResourceClaim: deleting one releases its share only. kubelet keeps
the claim prepared, and the claim allocated, for the pod still using it; the last pod's
deletion deallocates it. On every release: kubelet unprepares a deleted pod's claims once
(kubelet 1.32 and 1.33 take every call for a pod as that pod leaving the claim, with no check
that it still holds it), and the DRA cluster's nodes do as kubelet does."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from resourceslice.testing import DRACluster
from support.chain import start_env_plugin

pytestmark = pytest.mark.integration

DRIVER = "nic.e2e.example.com"


@pytest.fixture
def nic_node(release_dra_cluster: DRACluster) -> Iterator[str]:
    """A node whose plugin publishes two NICs, and a DeviceClass of them."""
    client = release_dra_cluster.api_client()
    node = release_dra_cluster.add_node("nic-node")
    _, helper = start_env_plugin(
        release_dra_cluster, client, node, DRIVER, devices=[{"name": "nic-0"}, {"name": "nic-1"}]
    )
    release_dra_cluster.create_device_class("nic", driver=DRIVER)
    try:
        yield node.name
    finally:
        helper.stop()
        client.close()


def test_deleting_one_pod_of_a_shared_claim_leaves_it_to_the_other(
    release_dra_cluster: DRACluster, nic_node: str
) -> None:
    claim_uid = release_dra_cluster.create_claim("shared-nic", device_class="nic")["metadata"][
        "uid"
    ]
    release_dra_cluster.create_pod("first", claim="shared-nic")
    release_dra_cluster.create_pod("second", claim="shared-nic")
    first = release_dra_cluster.wait_pod_prepared("first")
    second = release_dra_cluster.wait_pod_prepared("second")
    assert first.containers["ctr"] == second.containers["ctr"]  # the same NIC
    (claim,) = release_dra_cluster.pod_claims("first")
    assert sorted(r["name"] for r in claim["status"]["reservedFor"]) == ["first", "second"]
    allocation = claim["status"]["allocation"]

    # delete_pod waits for what applies to this pod: it used to wait for the claim to be
    # deallocated, which cannot happen while the second pod holds it, until its timeout.
    timeout = 60.0
    start = time.monotonic()
    release_dra_cluster.delete_pod("first", timeout=timeout)
    assert time.monotonic() - start < timeout / 2
    assert release_dra_cluster.get_pod("first") is None
    assert [e["node"] for e in release_dra_cluster.events("unprepared")] == [
        nic_node
    ]  # first's share
    (claim,) = release_dra_cluster.pod_claims("second")
    assert [(r["name"], r["uid"]) for r in claim["status"]["reservedFor"]] == [
        ("second", second.uid)
    ]
    assert claim["status"]["allocation"] == allocation
    # kubelet kept the claim prepared for the second pod: its CDI spec is still there.
    assert release_dra_cluster.container_edits("second") == second.containers["ctr"]

    # The last user goes: the claim is deallocated, and stays (it was not made for a pod).
    release_dra_cluster.delete_pod("second", timeout=timeout)
    (claim,) = [
        c for c in release_dra_cluster.list_claims() if c["metadata"]["name"] == "shared-nic"
    ]
    assert claim["metadata"]["uid"] == claim_uid
    assert not claim.get("status", {}).get("allocation")
    assert not claim.get("status", {}).get("reservedFor")
    assert sorted(e["pod"]["name"] for e in release_dra_cluster.events("unprepared")) == [
        "first",
        "second",
    ]
