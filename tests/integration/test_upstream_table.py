"""Cases of the Go controller's own test table (k8s.io/dynamic-resource-allocation/resourceslice,
TestControllerSyncPool) that need fields of Kubernetes 1.37, on the real apiserver.

The ``drop-*`` cases switch one feature gate off in an apiserver of their own: the server then
stores the slice without the gated field, the controller reports ``DroppedFieldsError`` once
and does not write the same slice again (which would only lose the same fields again).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import kubernetes
import pytest

import resourceslice as rs
from resourceslice.testing import TestCluster, start_cluster, wait_until
from support.controller_env import ControllerEnv, device, devices_of, node_pools

pytestmark = pytest.mark.integration

COUNTERS = [{"name": "gpu-0", "counters": {"mem": {"value": "1"}}}]


def partitioned_pool(node: str, **consumption: Any) -> rs.Pool:
    """A counter set in one slice, a device consuming from it on ``node`` in another."""
    consumer = device(0, nodeName=node, consumesCounters=[{"counterSet": "gpu-0", **consumption}])
    return rs.Pool(
        slices=[
            rs.Slice(shared_counters=COUNTERS, per_device_node_selection=True),
            rs.Slice(devices=[consumer], per_device_node_selection=True),
        ]
    )


#: case -> (the gates switched off: the case's own and those that depend on it, else the
#: apiserver does not start; the desired pools of a controller without owner).
DROP_CASES: dict[str, tuple[list[str], rs.DriverResources]] = {
    "drop-consumable-capacity-field": (
        ["DRAConsumableCapacity", "DRAFractionalCapacityRange"],
        rs.DriverResources(
            pools={"p": rs.Pool(devices=[device(0, allowMultipleAllocations=True)], all_nodes=True)}
        ),
    ),
    "drop-optional-node-operations-field": (
        ["DRAOptionalNodeOperations"],
        rs.DriverResources(
            pools={
                "p": rs.Pool(
                    slices=[rs.Slice(devices=[device(0)], skip_node_operations=["*"])],
                    all_nodes=True,
                )
            }
        ),
    ),
    "drop-compatibility-groups-field": (
        ["DRADeviceCompatibilityGroups"],
        rs.DriverResources(
            pools={
                "p": partitioned_pool(
                    "node-1", counters={"mem": {"value": "1"}}, compatibilityGroups=["g1", "g2"]
                )
            }
        ),
    ),
    # With the gate off the server also drops per-device node selection, and a slice left
    # with none is refused (422): the pool says allNodes, so what is dropped is the counters.
    "drop-partitionable-devices": (
        ["DRAPartitionableDevices", "DRAPartitionableDevicesType", "DRADeviceCompatibilityGroups"],
        rs.DriverResources(
            pools={
                "p": rs.Pool(
                    slices=[
                        rs.Slice(shared_counters=COUNTERS),
                        rs.Slice(
                            devices=[
                                device(
                                    0,
                                    consumesCounters=[
                                        {"counterSet": "gpu-0", "counters": {"mem": {"value": "1"}}}
                                    ],
                                )
                            ]
                        ),
                    ],
                    all_nodes=True,
                )
            }
        ),
    ),
}


#: case -> what each slice it drops from reports: slice index -> (paths, features).
DROPPED: dict[str, dict[int, tuple[list[str], list[str]]]] = {
    "drop-consumable-capacity-field": {
        0: (["spec.devices[0].allowMultipleAllocations"], ["DRAConsumableCapacity"])
    },
    "drop-optional-node-operations-field": {
        0: (["spec.skipNodeOperations"], ["DRAOptionalNodeOperations"])
    },
    "drop-compatibility-groups-field": {
        1: (
            ["spec.devices[0].consumesCounters[0].compatibilityGroups"],
            ["DRADeviceCompatibilityGroups"],
        )
    },
    "drop-partitionable-devices": {
        0: (["spec.sharedCounters"], ["DRAPartitionableDevices"]),
        1: (["spec.devices[0].consumesCounters"], ["DRAPartitionableDevices"]),
    },
}


@pytest.fixture(scope="module", params=sorted(DROP_CASES))
def gated(request: pytest.FixtureRequest) -> Iterator[tuple[str, TestCluster]]:
    case: str = request.param
    gates, _ = DROP_CASES[case]
    # A later --feature-gates flag overrides the same gate of an earlier one.
    off = ",".join(f"{gate}=false" for gate in gates)
    cluster = start_cluster(extra_args=[f"--feature-gates={off}"])
    try:
        yield case, cluster
    finally:
        cluster.close()


def test_dropped_field_reported_once_not_rewritten(gated: tuple[str, TestCluster]) -> None:
    case, cluster = gated
    _, resources = DROP_CASES[case]
    env = ControllerEnv(cluster, f"{case}.example.com")
    try:
        ctrl = env.start(resources, sync_delay=0.2)
        wait_until(lambda: any(isinstance(e, rs.DroppedFieldsError) for e, _ in env.errors))
        assert ctrl.wait_idle(60.0)
        dropped = [e for e, _ in env.errors if isinstance(e, rs.DroppedFieldsError)]
        assert all(e.pool == "p" for e in dropped), env.errors
        # Each slice that lost fields is reported once, with the paths and the gate.
        assert {e.slice_index: (e.paths, e.features) for e in dropped} == DROPPED[case]
        assert len(dropped) == len(DROPPED[case])
        names = {s["metadata"]["name"]: s for s in env.slices("p")}
        for e in dropped:
            assert names[e.slice_name]["metadata"]["name"].startswith(f"{e.slice_index:05x}-")
            assert all(p in str(e) for p in [*e.paths, *e.features])
        writes = env.counter.writes()
        # Every slice written once, none again: the informer's events synced the pool again
        # after sync_delay, and the controller saw that a rewrite would lose the same fields.
        assert set(writes) == {"POST"}
        assert writes["POST"] == len(env.slices("p"))
    finally:
        env.close()


def test_create_with_skip_node_operations(env: ControllerEnv) -> None:
    resources = rs.DriverResources(
        pools={
            "p": rs.Pool(
                slices=[rs.Slice(devices=[device(0)], skip_node_operations=["*"])],
                all_nodes=True,
            )
        }
    )
    env.start_synced(resources)
    [published] = env.slices("p")
    assert published["spec"]["skipNodeOperations"] == ["*"]
    assert devices_of(published) == [device(0)]
    assert env.errors == []


@pytest.fixture
def node(env: ControllerEnv) -> Iterator[dict[str, Any]]:
    core = kubernetes.client.CoreV1Api(env.admin)
    name = env.driver.split(".")[0][:40] + "-node"
    response = core.create_node(
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}, _preload_content=False
    )
    yield json.loads(response.data)
    core.delete_node(name, _preload_content=False)


def test_reconcile_with_pool_name_with_per_device_node_selector(
    env: ControllerEnv, node: dict[str, Any]
) -> None:
    """A Node owner that reconciles one named pool whose devices select nodes themselves: the
    slice has no spec.nodeName, keeps the Node as owner, and says perDeviceNodeSelection."""
    name = node["metadata"]["name"]
    selector = {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1"]}]}
        ]
    }
    pool = rs.Pool(
        slices=[
            rs.Slice(devices=[device(0, nodeSelector=selector)], per_device_node_selection=True)
        ]
    )
    env.start_synced(
        node_pools(shared=pool),
        owner=rs.Owner(api_version="v1", kind="Node", name=name),
        reconcile_pool_with_name="shared",
    )
    [published] = env.slices("shared")
    assert "nodeName" not in published["spec"]
    assert published["spec"]["perDeviceNodeSelection"] is True
    assert devices_of(published) == [device(0, nodeSelector=selector)]
    assert published["metadata"]["ownerReferences"][0]["uid"] == node["metadata"]["uid"]
    assert published["spec"]["pool"] == {"name": "shared", "generation": 1, "resourceSliceCount": 1}
