"""examples/kubelet_driver.py on three nodes, through the whole chain: kube-scheduler
allocates a pod's claim from the slices the example publishes, kubelet's DRA manager has the
example's plugin prepare it, and the container runtime's CDI injection gives the container
exactly the allocated device."""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

import pytest

from resourceslice import kubeletplugin
from resourceslice.testing import DRACluster, PreparedPod
from support.chain import load_example, plugin_dirs

pytestmark = pytest.mark.integration

NODES = 3
DEVICES_PER_NODE = 4  # the example's DemoDriver


@pytest.fixture
def example() -> ModuleType:
    return load_example()


@pytest.fixture
def dra_cluster(release_dra_cluster: DRACluster) -> DRACluster:
    """On every release: 1.37 (resource.k8s.io v1, kubelet's v1 gRPC), 1.33 (v1beta2 objects,
    v1beta1 reads in kubelet and the claim controller, v1beta1 gRPC) and 1.32 (v1beta1
    everywhere). Kubelet 1.33 and 1.32 allow one simulated node (``max_nodes``)."""
    return release_dra_cluster


@pytest.fixture
def node_count(dra_cluster: DRACluster) -> int:
    return min(NODES, dra_cluster.max_nodes or NODES)


@pytest.fixture
def example_nodes(
    dra_cluster: DRACluster, example: ModuleType, node_count: int
) -> Iterator[list[str]]:
    """Three nodes (one where the release allows one), each running the example driver
    (publisher and kubelet plugin)."""
    client = dra_cluster.api_client()
    helpers: list[kubeletplugin.Helper] = []
    try:
        for i in range(node_count):
            node = dra_cluster.add_node(f"node-{i}")
            helpers.append(
                example.run(
                    client,
                    node.name,
                    cdi_dir=str(node.cdi_dir),
                    **plugin_dirs(node, example.DRIVER),
                )
            )
            dra_cluster.wait_registered(node.name, example.DRIVER)
        for helper in helpers:
            assert helper.controller is not None and helper.controller.wait_synced(timeout=60)
        dra_cluster.create_device_class("demo", driver=example.DRIVER)
        dra_cluster.create_claim_template("one-demo", device_class="demo")
        yield [f"node-{i}" for i in range(node_count)]
    finally:
        for helper in helpers:
            helper.stop()
        client.close()


def allocated(dra_cluster: DRACluster, pod: str) -> tuple[str, str, str]:
    """(claim uid, pool, device) of the pod's one allocated device."""
    (claim,) = dra_cluster.pod_claims(pod)
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    return claim["metadata"]["uid"], result["pool"], result["device"]


def demo_env(device: str) -> list[str]:
    return [f"DEMO_DEVICE_{device.split('-')[-1]}=1"]


def seen_demo_env(pod: PreparedPod) -> list[str]:
    """The DEMO_ variables the container's process itself saw (runc ran it)."""
    process = pod.containers["ctr"].process
    assert process is not None, "the container did not run"
    env = process.report.env
    return [f"{k}={v}" for k, v in sorted(env.items()) if k.startswith("DEMO_")]


def test_a_pod_gets_exactly_its_allocated_device_and_gives_it_back(
    dra_cluster: DRACluster, example: ModuleType, example_nodes: list[str]
) -> None:
    devices = len(example_nodes) * DEVICES_PER_NODE
    dra_cluster.create_pod("pod-0", claim_template="one-demo")
    first = dra_cluster.wait_pod_prepared("pod-0")
    claim_uid, pool, device = allocated(dra_cluster, "pod-0")
    # The node's pool is the node's name (the example publishes it so): the pod is where
    # its device is, and the container has that device and no other.
    assert first.node == pool
    ctr = first.containers["ctr"]
    assert ctr.env == demo_env(device)
    assert seen_demo_env(first) == demo_env(device)
    assert ctr.cdi_devices == [f"{example.DRIVER}/device={claim_uid}-{device}"]
    spec = dra_cluster.nodes[first.node].cdi_dir / f"{example.DRIVER}-{claim_uid}.json"
    assert spec.is_file()

    # Every other device, one pod each: as many pods as devices, every one different.
    pods: dict[str, PreparedPod] = {"pod-0": first}
    for i in range(1, devices):
        dra_cluster.create_pod(f"pod-{i}", claim_template="one-demo")
    for i in range(1, devices):
        pods[f"pod-{i}"] = dra_cluster.wait_pod_prepared(f"pod-{i}")
    taken = {(p.node, tuple(p.containers["ctr"].env)) for p in pods.values()}
    assert len(taken) == devices
    for name, pod in pods.items():
        _, its_pool, its_device = allocated(dra_cluster, name)
        assert (pod.node, pod.containers["ctr"].env) == (its_pool, demo_env(its_device))
        assert seen_demo_env(pod) == demo_env(its_device)

    # One more: nothing is left, and the scheduler says so.
    dra_cluster.create_pod("pod-extra", claim_template="one-demo")
    message = dra_cluster.wait_pod_unschedulable("pod-extra")
    assert "cannot allocate all claims" in message

    # The first pod goes: kubelet unprepares (the CDI spec is gone), the claim made for it
    # is deallocated and deleted, and its device goes to the waiting pod.
    dra_cluster.delete_pod("pod-0")
    assert not spec.exists()
    assert [e for e in dra_cluster.events("unprepared") if e["pod"]["name"] == "pod-0"]
    extra = dra_cluster.wait_pod_prepared("pod-extra")
    _, pool_after, device_after = allocated(dra_cluster, "pod-extra")
    assert (pool_after, device_after) == (pool, device)
    assert (extra.node, extra.containers["ctr"].env) == (first.node, demo_env(device))
    assert seen_demo_env(extra) == demo_env(device)
