"""The controller against the real apiserver (issue #4): what it writes, and how often.

Needs the kube-apiserver + etcd of ``resourceslice.testing``. Write counts come from the
HTTP requests the controller's client sent, not from the controller's own statistics.
"""

from __future__ import annotations

import copy
import itertools
import time
from typing import Any

import kubernetes.client
import pytest
from kubernetes.client.exceptions import ApiException

import resourceslice as rs
from resourceslice import _sync
from resourceslice._pycore.plan import slice_name
from resourceslice.testing import wait_until
from support.controller_env import (
    SYNC_TIMEOUT,
    ControllerEnv,
    device,
    devices_of,
    node_pools,
    pools,
)

pytestmark = pytest.mark.integration


def test_create(env: ControllerEnv) -> None:
    ctrl = env.start_synced(pools(p=rs.Pool(devices=[device(0), device(1)])))
    [published] = env.slices()
    assert published["metadata"]["name"].startswith(f"00000-{env.driver}-")
    assert "ownerReferences" not in published["metadata"]
    assert published["spec"]["pool"] == {"name": "p", "generation": 1, "resourceSliceCount": 1}
    assert published["spec"]["allNodes"] is True
    assert devices_of(published) == [device(0), device(1)]
    assert env.counter.writes() == {"POST": 1}
    stats = ctrl.stats()
    assert (stats.creates, stats.updates, stats.deletes) == (1, 0, 0)
    assert stats.syncs >= 1
    assert env.errors == []


def test_unchanged_update_makes_no_writes(env: ControllerEnv) -> None:
    resources = pools(p=rs.Pool(devices=[device(i) for i in range(5)]))
    ctrl = env.start_synced(resources)
    env.counter.reset()
    env.update_synced(ctrl, pools(p=rs.Pool(devices=[device(i) for i in range(5)])))
    assert env.counter.writes() == {}


def test_burst_of_updates_is_coalesced(env: ControllerEnv) -> None:
    base = [device(i) for i in range(200)]
    ctrl = env.start_synced(pools(p=rs.Pool(devices=base)))
    env.counter.reset()
    started = time.monotonic()
    for n in range(100):
        changed = device(5, attributes={"index": {"int": -n}})
        ctrl.update(pools(p=rs.Pool(devices=[*base[:5], changed, *base[6:]])))
    assert ctrl.wait_synced(SYNC_TIMEOUT)
    elapsed = time.monotonic() - started
    assert devices_of(env.slices()[0])[5] == changed
    # update() syncs at once, then at most once per update_interval (1 s); the watch's echo
    # of each write may add one more sync (sync_delay 1 s). Not one write per update.
    writes = env.counter.writes()
    assert set(writes) == {"PUT"} and writes["PUT"] <= 2 * (1 + elapsed)


def test_device_added_removed_changed(env: ControllerEnv) -> None:
    devs = [device(0), device(1), device(2)]
    ctrl = env.start_synced(pools(p=rs.Pool(devices=devs)))
    [before] = env.slices()

    steps: list[list[dict[str, Any]]] = [
        [*devs, device(3)],  # added
        [device(1), device(2), device(3)],  # removed
        [device(1), device(2, attributes={"index": {"int": 20}}), device(3)],  # changed
    ]
    for wanted in steps:
        env.counter.reset()
        env.update_synced(ctrl, pools(p=rs.Pool(devices=wanted)))
        [after] = env.slices()
        # One slice changed in place: one PUT, the generation kept.
        assert env.counter.writes() == {"PUT": 1}
        assert after["metadata"]["name"] == before["metadata"]["name"]
        assert after["spec"]["pool"]["generation"] == 1
        assert devices_of(after) == wanted


def test_pool_removed(env: ControllerEnv) -> None:
    ctrl = env.start_synced(pools(a=rs.Pool(devices=[device(0)]), b=rs.Pool(devices=[device(1)])))
    assert len(env.slices()) == 2
    env.counter.reset()
    env.update_synced(ctrl, pools(a=rs.Pool(devices=[device(0)])))
    assert [s["spec"]["pool"]["name"] for s in env.slices()] == ["a"]
    assert env.counter.writes() == {"DELETE": 1}


def test_redundant_slice_deleted(env: ControllerEnv) -> None:
    env.start_synced(pools(p=rs.Pool(devices=[device(0)])))
    [ours] = env.slices()
    # Same pool, generation and index prefix as ours, but a generateName-style name.
    env.create_slice(env.slice_body(f"00000-{env.driver}-zzzzz", "p", 1, 1, devices=[device(9)]))
    wait_until(lambda: [s["metadata"]["name"] for s in env.slices()] == [ours["metadata"]["name"]])
    [kept] = env.slices()
    assert kept["metadata"]["resourceVersion"] == ours["metadata"]["resourceVersion"]


def explicit(*device_lists: list[dict[str, Any]]) -> rs.DriverResources:
    return pools(p=rs.Pool(slices=[rs.Slice(devices=d) for d in device_lists]))


@pytest.mark.parametrize("one_body_per_window", [False, True])
def test_explicit_slices_generation_rules(
    env: ControllerEnv, monkeypatch: pytest.MonkeyPatch, one_body_per_window: bool
) -> None:
    if one_body_per_window:
        # Each sync then plans again for every write (docs/core.md §5, window): the same
        # writes and generations as with all bodies at once.
        monkeypatch.setattr(_sync, "_BODY_BYTES_PER_WINDOW", 1)
    layout = [[device(0), device(1)], [device(2), device(3)], [device(4), device(5)]]
    ctrl = env.start_synced(explicit(*layout))
    assert env.counter.writes() == {"POST": 3}
    published = env.slices()
    assert [devices_of(s) for s in published] == layout
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in published} == {3}

    steps = itertools.count()

    def change(indexes: list[int], generation: int, puts: int) -> None:
        for i in indexes:
            layout[i][0] = {**layout[i][0], "attributes": {"step": {"int": next(steps)}}}
        sync(generation, puts)

    def sync(generation: int, puts: int) -> None:
        env.counter.reset()
        env.update_synced(ctrl, explicit(*layout))
        assert env.counter.writes() == {"PUT": puts}
        now = env.slices()
        assert [devices_of(s) for s in now] == layout
        assert {s["spec"]["pool"]["generation"] for s in now} == {generation}

    change([1], generation=1, puts=1)  # one in-place update keeps the generation
    change([0, 2], generation=1, puts=2)  # so do several, each of its own devices
    change([0, 1, 2], generation=1, puts=3)
    # A device moving between slices: new generation, all rewritten (docs/core.md §5).
    layout[2].append(layout[0].pop())
    sync(generation=2, puts=3)
    change([0, 2], generation=2, puts=2)


def test_lower_generation_deleted(env: ControllerEnv) -> None:
    env.start_synced(pools(p=rs.Pool(devices=[device(0)], generation=5)))
    [ours] = env.slices()
    assert ours["spec"]["pool"]["generation"] == 5  # the driver's, being higher
    env.create_slice(env.slice_body("obsolete-", "p", 4, 1, devices=[device(1)]))
    wait_until(lambda: [s["metadata"]["name"] for s in env.slices()] == [ours["metadata"]["name"]])


def test_migration_from_random_named_slices(env: ControllerEnv) -> None:
    old = [
        env.create_slice(env.slice_body("node-1-old-", "p", 1, 2, devices=[device(0)])),
        env.create_slice(env.slice_body("node-1-old-", "p", 1, 2, devices=[device(1)])),
    ]
    env.start_synced(pools(p=rs.Pool(devices=[device(0), device(1)])))
    [published] = env.slices()
    assert published["metadata"]["name"].startswith(f"00000-{env.driver}-")
    assert published["spec"]["pool"] == {"name": "p", "generation": 2, "resourceSliceCount": 1}
    assert devices_of(published) == [device(0), device(1)]
    assert env.counter.writes() == {"DELETE": 2, "POST": 1}
    assert all(o["metadata"]["name"] != published["metadata"]["name"] for o in old)


NODE_SELECTOR = {
    "nodeSelectorTerms": [
        {"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1"]}]}
    ]
}


def test_network_attached_pools(env: ControllerEnv) -> None:
    per_device = [
        {"name": "d0", "nodeName": "worker-0"},
        {"name": "d1", "allNodes": True},
        {"name": "d2", "nodeSelector": NODE_SELECTOR},
    ]
    env.start_synced(
        pools(
            selected=rs.Pool(devices=[device(0)], node_selector=NODE_SELECTOR),
            everywhere=rs.Pool(devices=[device(1)], all_nodes=True),
            per=rs.Pool(slices=[rs.Slice(devices=per_device, per_device_node_selection=True)]),
        )
    )
    by_pool = {s["spec"]["pool"]["name"]: s["spec"] for s in env.slices()}
    assert by_pool["selected"]["nodeSelector"] == NODE_SELECTOR
    assert "allNodes" not in by_pool["selected"] and "nodeName" not in by_pool["selected"]
    assert by_pool["everywhere"]["allNodes"] is True
    assert by_pool["per"]["perDeviceNodeSelection"] is True
    assert by_pool["per"]["devices"] == per_device
    assert env.errors == []


def test_node_owner_uid_lookup(env: ControllerEnv, node: dict[str, Any]) -> None:
    name = node["metadata"]["name"]
    owner = rs.Owner(api_version="v1", kind="Node", name=name)
    env.start_synced(node_pools(**{name: rs.Pool(devices=[device(0)])}), owner=owner)
    [published] = env.slices()
    # Index, driver, owner, cut to 53 characters, then the hash.
    assert published["metadata"]["name"][:-10] == f"00000-{env.driver}-{name}-"[:53]
    assert published["spec"]["nodeName"] == name
    assert published["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "name": name,
            "uid": node["metadata"]["uid"],
            "controller": True,
        }
    ]
    assert [p for m, p in env.counter.requests() if m == "GET" and "/nodes/" in p] == [
        f"/api/v1/nodes/{name}"
    ]


def test_name_taken_by_a_slice_it_cannot_see(env: ControllerEnv) -> None:
    owner = rs.Owner(api_version="v1", kind="Node", name="node-a", uid="uid-a")
    # Our first slice's name, held by a slice of another node: the Node owner's informer
    # watches node-a only, so the create is the first to hear of it.
    name = slice_name(0, env.driver, ("v1", "Node", "node-a", "uid-a"), "node-a")
    squatter = env.create_slice(
        {
            **env.slice_body(name, "node-a", 1, 1, devices=[device(9)]),
            "spec": {
                "driver": env.driver,
                "pool": {"name": "node-a", "generation": 1, "resourceSliceCount": 1},
                "nodeName": "node-b",
            },
        }
    )
    env.start(node_pools(**{"node-a": rs.Pool(devices=[device(0)])}), owner=owner)
    wait_until(
        lambda: any(
            isinstance(e, rs.SliceExistsError) and e.slice_names == [name] for e, _ in env.errors
        )
    )
    [kept] = env.slices()
    assert kept["metadata"]["resourceVersion"] == squatter["metadata"]["resourceVersion"]
    assert set(env.counter.writes()) == {"POST"}


def test_reconcile_pool_with_name(env: ControllerEnv, node: dict[str, Any]) -> None:
    name = node["metadata"]["name"]
    owner = rs.Owner(api_version="v1", kind="Node", name=name)
    # A pool of the same driver that this controller must leave alone.
    foreign = env.create_slice(env.slice_body("foreign-", "other", 1, 1, devices=[device(7)]))
    resources = pools(shared=rs.Pool(devices=[device(0)], node_selector=NODE_SELECTOR))
    ctrl = env.start_synced(resources, owner=owner, reconcile_pool_with_name="shared")
    [ours] = env.slices("shared")
    assert "nodeName" not in ours["spec"]
    assert ours["spec"]["nodeSelector"] == NODE_SELECTOR
    assert ours["metadata"]["ownerReferences"][0]["uid"] == node["metadata"]["uid"]

    with pytest.raises(rs.ValidationError) as info:
        ctrl.update(pools(shared=rs.Pool(devices=[]), other=rs.Pool(devices=[])))
    assert info.value.errors == [
        'pools["other"]: only pool "shared" is reconciled (reconcile_pool_with_name)'
    ]

    # Let a sync_delay pass by healing an edit of our slice; the foreign one is untouched.
    edited = copy.deepcopy(ours)
    edited["spec"]["devices"] = [device(0, attributes={"index": {"int": 99}})]
    env.replace_slice(edited)
    wait_until(lambda: devices_of(env.slices("shared")[0]) == [device(0)])
    [still] = env.slices("other")
    assert still["metadata"]["resourceVersion"] == foreign["metadata"]["resourceVersion"]


TAINT = {"key": "example.com/unhealthy", "value": "true", "effect": "NoSchedule"}


def test_device_taints_keep_the_servers_time_added(env: ControllerEnv) -> None:
    resources = pools(p=rs.Pool(devices=[device(0, taints=[TAINT]), device(1)]))
    ctrl = env.start_synced(resources)
    [published] = env.slices()
    [stored_taint] = devices_of(published)[0]["taints"]
    time_added = stored_taint["timeAdded"]  # set by the apiserver
    assert {k: v for k, v in stored_taint.items() if k != "timeAdded"} == TAINT

    ctrl = env.restart(ctrl, resources)
    assert env.counter.writes() == {}

    env.update_synced(
        ctrl,
        pools(
            p=rs.Pool(devices=[device(0, taints=[TAINT]), device(1, attributes={"x": {"int": 1}})])
        ),
    )
    assert env.counter.writes() == {"PUT": 1}
    [after] = env.slices()
    assert devices_of(after)[0]["taints"] == [{**TAINT, "timeAdded": time_added}]
    assert env.errors == []


def test_partitionable_devices(env: ControllerEnv) -> None:
    counters = [{"name": "gpu-0-mem", "counters": {"memory": {"value": "40Gi"}}}]
    partitions = [
        {
            "name": f"gpu-0-part-{i}",
            "consumesCounters": [
                {"counterSet": "gpu-0-mem", "counters": {"memory": {"value": "20Gi"}}}
            ],
        }
        for i in range(2)
    ]
    resources = pools(
        p=rs.Pool(slices=[rs.Slice(shared_counters=counters), rs.Slice(devices=partitions)])
    )
    ctrl = env.start_synced(resources)
    counter_slice, device_slice = env.slices()
    assert counter_slice["spec"]["sharedCounters"] == counters
    assert "devices" not in counter_slice["spec"]
    assert devices_of(device_slice) == partitions
    env.restart(ctrl, resources)
    assert env.counter.writes() == {}
    assert env.errors == []


def test_mig_style_partitions(env: ControllerEnv) -> None:
    """A partitioned GPU as drivers publish it: DNS-label counter names (memory-slice-N),
    compatibility groups, the partition type attribute, skipped node operations. The server
    accepts it as the controller does, and a restart writes nothing."""
    slices = [f"memory-slice-{i}" for i in range(4)]
    gpu = {"name": "gpu-0", "counters": {s: {"value": "10Gi"} for s in slices}}
    gpu["counters"]["multiprocessors"] = {"value": "4"}

    def partition(name: str, profile: str, used: list[str], group: str) -> dict[str, Any]:
        counters = {s: {"value": "10Gi"} for s in used}
        counters["multiprocessors"] = {"value": str(len(used))}
        return {
            "name": name,
            "attributes": {"profile": {"string": profile}},
            "consumesCounters": [
                {"counterSet": "gpu-0", "counters": counters, "compatibilityGroups": [group]}
            ],
        }

    partitions = [
        partition("gpu-0-mig-1g-0", "1g", slices[:1], "small"),
        partition("gpu-0-mig-1g-1", "1g", slices[1:2], "small"),
        partition("gpu-0-mig-2g-0", "2g", slices[:2], "large"),
        partition("gpu-0-full", "4g", slices, "large"),
    ]
    resources = pools(
        p=rs.Pool(
            slices=[
                rs.Slice(shared_counters=[gpu]),
                rs.Slice(
                    devices=partitions,
                    partition_type_attribute=f"{env.driver}/profile",
                    skip_node_operations=["NodeUnprepareResources"],
                ),
            ]
        )
    )
    ctrl = env.start_synced(resources)
    counter_slice, device_slice = env.slices()
    assert counter_slice["spec"]["sharedCounters"] == [gpu]
    assert devices_of(device_slice) == partitions
    assert device_slice["spec"]["partitionTypeAttribute"] == f"{env.driver}/profile"
    assert device_slice["spec"]["skipNodeOperations"] == ["NodeUnprepareResources"]
    env.restart(ctrl, resources)
    assert env.counter.writes() == {}
    assert env.errors == []


def test_binding_conditions(env: ControllerEnv) -> None:
    dev = device(
        0,
        bindingConditions=["example.com/attached"],
        bindingFailureConditions=["example.com/attach-failed"],
        bindsToNode=True,
    )
    env.start_synced(pools(p=rs.Pool(devices=[dev])))
    [published] = env.slices()
    assert devices_of(published) == [dev]
    assert env.errors == []


def test_node_allocatable_resources(env: ControllerEnv) -> None:
    """The field is published (the test apiserver has its gate on, as the vectors do), and
    its quantities compare by value: "1000m" is stored as "1", which is neither a dropped
    field nor a reason to rewrite."""

    def dev(multiplier: str) -> dict[str, Any]:
        return device(
            0,
            capacity={"mem": {"value": "8Gi"}},
            nodeAllocatableResources={
                "memory": {"mapping": {"deviceMultiplier": multiplier}, "overhead": {"perPod": "1"}}
            },
        )

    ctrl = env.start_synced(pools(p=rs.Pool(devices=[dev("1000m")])))
    [published] = env.slices()
    assert devices_of(published) == [dev("1")]  # the server's canonical form
    assert env.errors == []
    env.counter.reset()
    env.update_synced(ctrl, pools(p=rs.Pool(devices=[dev("1")])))
    env.restart(ctrl, pools(p=rs.Pool(devices=[dev("1000m")])))
    assert env.counter.writes() == {}
    assert env.errors == []


def test_quantities_compared_by_value(env: ControllerEnv) -> None:
    def with_memory(value: str) -> rs.DriverResources:
        return pools(p=rs.Pool(devices=[device(0, capacity={"memory": {"value": value}})]))

    ctrl = env.start_synced(with_memory("1024Mi"))
    [published] = env.slices()
    assert devices_of(published)[0]["capacity"]["memory"]["value"] == "1Gi"  # server's form
    # Not a dropped field, and not a difference: no error, no rewrite.
    assert env.errors == []
    env.counter.reset()
    env.update_synced(ctrl, with_memory("1Gi"))
    env.update_synced(ctrl, with_memory("1073741824"))
    assert env.counter.writes() == {}


def test_invalid_input_rejected_and_old_state_kept(env: ControllerEnv) -> None:
    with pytest.raises(rs.ValidationError):
        env.start(pools(p=rs.Pool(devices=[device(0), device(0)])))

    ctrl = env.start_synced(pools(p=rs.Pool(devices=[device(0)])))
    env.counter.reset()
    bad = pools(p=rs.Pool(devices=[device(0), device(0), {"name": "Not_A_Label"}]))
    with pytest.raises(rs.ValidationError) as info:
        ctrl.update(bad)
    assert len(info.value.errors) >= 2
    assert any(e.startswith('pools["p"].devices[1]: duplicate') for e in info.value.errors)
    assert any(e.startswith('pools["p"].devices[2].name') for e in info.value.errors)
    assert ctrl.wait_synced(SYNC_TIMEOUT)
    assert env.counter.writes() == {}
    assert devices_of(env.slices()[0]) == [device(0)]

    # The controller still takes valid updates afterwards.
    env.update_synced(ctrl, pools(p=rs.Pool(devices=[device(0), device(1)])))
    assert devices_of(env.slices()[0]) == [device(0), device(1)]


def test_server_rejection_reported_other_pools_publish(env: ControllerEnv) -> None:
    """A refusal only the server can make (here an admission policy; the controller checks
    everything the API's validation checks) goes to the error handler; other pools publish."""
    admission = kubernetes.client.AdmissionregistrationV1Api(env.admin)
    name = env.driver.split(".")[0] + "-refuse-bad"
    admission.create_validating_admission_policy(
        body={
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": ["resource.k8s.io"],
                            "apiVersions": ["*"],
                            "operations": ["CREATE", "UPDATE"],
                            "resources": ["resourceslices"],
                        }
                    ]
                },
                "validations": [
                    {
                        "expression": f"object.spec.driver != '{env.driver}'"
                        " || object.spec.pool.name != 'bad'",
                        "message": "pool bad is refused",
                    }
                ],
            },
        }
    )
    admission.create_validating_admission_policy_binding(
        body={
            "metadata": {"name": name},
            "spec": {"policyName": name, "validationActions": ["Deny"]},
        }
    )
    try:
        probe = env.slice_body("probe-", "bad", 1, 1, allNodes=True)

        def enforced() -> bool:
            try:
                env.api.create_resource_slice(probe, dry_run="All", _preload_content=False)
            except ApiException as exc:
                return exc.status == 422
            return False

        wait_until(enforced)
        ctrl = env.start(pools(good=rs.Pool(devices=[device(0)]), bad=rs.Pool(devices=[device(1)])))
        wait_until(lambda: env.slices("good") and env.errors)
        exc, message = env.errors[0]
        assert isinstance(exc, ApiException) and exc.status == 422
        assert "'bad'" in message
        assert env.slices("bad") == []
        # The failing pool keeps the controller from being in sync.
        assert not ctrl.wait_synced(0.5)
    finally:
        admission.delete_validating_admission_policy_binding(name)
        admission.delete_validating_admission_policy(name)


def test_external_delete_and_edit_healed(env: ControllerEnv) -> None:
    env.start_synced(pools(p=rs.Pool(devices=[device(0), device(1)])))
    [ours] = env.slices()

    env.api.delete_resource_slice(ours["metadata"]["name"], _preload_content=False)
    recreated = wait_until(lambda: env.slices())
    assert devices_of(recreated[0]) == [device(0), device(1)]

    edited = copy.deepcopy(recreated[0])
    edited["spec"]["devices"] = [device(0)]
    env.replace_slice(edited)
    wait_until(lambda: devices_of(env.slices()[0]) == [device(0), device(1)])
    # The overwritten hand edit is reported, nothing else.
    assert [type(exc) for exc, _ in env.errors] == [rs.ConflictingWriterError]


def test_restart_makes_no_writes(env: ControllerEnv, node: dict[str, Any]) -> None:
    name = node["metadata"]["name"]
    owner = rs.Owner(api_version="v1", kind="Node", name=name)
    resources = node_pools(**{name: rs.Pool(devices=[device(i) for i in range(300)])})
    ctrl = env.start_synced(resources, owner=owner)
    assert env.counter.writes() == {"POST": 3}
    with env.restart(ctrl, resources, owner=owner):
        assert env.counter.writes() == {}


def test_restart_without_owner_makes_no_writes(env: ControllerEnv) -> None:
    resources = pools(
        flat=rs.Pool(devices=[device(i) for i in range(200)]),
        network=rs.Pool(devices=[device(0)], node_selector=NODE_SELECTOR),
        explicit=rs.Pool(slices=[rs.Slice(devices=[device(1)]), rs.Slice(devices=[])]),
    )
    ctrl = env.start_synced(resources)
    assert env.counter.writes() == {"POST": 5}
    with env.restart(ctrl, resources):
        assert env.counter.writes() == {}
