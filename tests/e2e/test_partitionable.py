"""Partitionable devices published by the library — a GPU and partitions of it that consume
a counter set the pool shares — allocated by kube-scheduler: it never gives out more than the
counters hold, so the whole GPU and its partitions exclude each other exactly as the
counters say, and what one pod gives back the next can take."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import resourceslice as rs
from resourceslice.testing import DRACluster
from support.chain import EnvDriver, start_env_plugin

pytestmark = pytest.mark.integration

DRIVER = "gpu.e2e.example.com"
MEMORY_GI = 40
#: profile -> (devices of it, GiB of memory each consumes)
PROFILES = {"whole": (1, 40), "2g": (2, 20), "1g": (4, 10)}


def partition(name: str, profile: str, memory_gi: int) -> dict[str, object]:
    counters = {"memory": {"value": f"{memory_gi}Gi"}}
    return {
        "name": name,
        "attributes": {"profile": {"string": profile}},
        "consumesCounters": [{"counterSet": "gpu-0", "counters": counters}],
    }


def gpu_pool() -> rs.Pool:
    devices = [
        partition("gpu-0" if profile == "whole" else f"gpu-0-{profile}-{i}", profile, memory)
        for profile, (count, memory) in PROFILES.items()
        for i in range(count)
    ]
    counters = [{"name": "gpu-0", "counters": {"memory": {"value": f"{MEMORY_GI}Gi"}}}]
    return rs.Pool(slices=[rs.Slice(shared_counters=counters), rs.Slice(devices=devices)])


@pytest.fixture
def gpu_node(dra_cluster: DRACluster) -> Iterator[EnvDriver]:
    client = dra_cluster.api_client()
    node = dra_cluster.add_node("gpu-node")
    plugin, helper = start_env_plugin(dra_cluster, client, node, DRIVER, pool=gpu_pool())
    try:
        for profile in PROFILES:
            dra_cluster.create_device_class(
                f"gpu-{profile}",
                driver=DRIVER,
                selectors=[f'device.attributes["{DRIVER}"].profile == "{profile}"'],
            )
            dra_cluster.create_claim_template(profile, device_class=f"gpu-{profile}")
        yield plugin
    finally:
        helper.stop()
        client.close()


def memory_in_use(dra_cluster: DRACluster) -> int:
    """GiB of the GPU's memory counter that allocated claims consume, from the claims."""
    total = 0
    for claim in dra_cluster.list_claims():
        for result in (
            claim.get("status", {}).get("allocation", {}).get("devices", {}).get("results", [])
        ):
            device = result["device"]
            profile = "whole" if device == "gpu-0" else device.split("-")[2]
            total += PROFILES[profile][1]
    return total


def test_the_scheduler_never_overcommits_the_shared_counters(
    dra_cluster: DRACluster, gpu_node: EnvDriver
) -> None:
    capacity = MEMORY_GI

    def prepared(pod: str, profile: str) -> str:
        result = dra_cluster.wait_pod_prepared(pod)
        (env,) = result.containers["ctr"].env
        assert f"_{profile}_" in env or (profile == "whole" and env == "DEVICE_gpu_0=1")
        assert memory_in_use(dra_cluster) <= capacity
        return env

    def unschedulable(pod: str) -> None:
        assert "cannot allocate all claims" in dra_cluster.wait_pod_unschedulable(pod)
        assert memory_in_use(dra_cluster) <= capacity

    # The whole GPU takes every counter: no partition fits beside it.
    dra_cluster.create_pod("whole-a", claim_template="whole")
    prepared("whole-a", "whole")
    dra_cluster.create_pod("small-a", claim_template="1g")
    unschedulable("small-a")
    dra_cluster.delete_pod("whole-a")
    prepared("small-a", "1g")

    # 10 + 20 + 10 = 40Gi: full, though two 1g partitions are free as devices.
    dra_cluster.create_pod("medium-a", claim_template="2g")
    prepared("medium-a", "2g")
    dra_cluster.create_pod("small-b", claim_template="1g")
    prepared("small-b", "1g")
    assert memory_in_use(dra_cluster) == capacity
    dra_cluster.create_pod("small-c", claim_template="1g")
    unschedulable("small-c")
    dra_cluster.create_pod("whole-b", claim_template="whole")
    unschedulable("whole-b")

    # 20Gi back: the waiting 1g partition fits, the whole GPU still does not.
    dra_cluster.delete_pod("medium-a")
    prepared("small-c", "1g")
    assert memory_in_use(dra_cluster) == 30
    assert dra_cluster.why_not_prepared("whole-b").startswith("Unschedulable")
