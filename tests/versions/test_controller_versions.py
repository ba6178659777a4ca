"""The controller on clusters without resource.k8s.io/v1 (Kubernetes 1.33, 1.32) and on 1.37
pinned to v1beta1: discovery, publish, update, delete, restart with 0 writes, hand edits.

The scenarios are those of tests/integration/test_controller.py, run again here with an
``env`` whose cluster and version come from ``conftest.TARGETS``; the rest are what differs
between versions: features an older API lacks end in DroppedFieldsError, not in a loop.
"""

from __future__ import annotations

import pytest

import resourceslice as rs
from integration.test_controller import (  # the scenarios, each run here on every target
    TAINT,
    test_create,
    test_device_added_removed_changed,
    test_explicit_slices_generation_rules,
    test_external_delete_and_edit_healed,
    test_invalid_input_rejected_and_old_state_kept,
    test_lower_generation_deleted,
    test_migration_from_random_named_slices,
    test_pool_removed,
    test_quantities_compared_by_value,
    test_redundant_slice_deleted,
    test_restart_makes_no_writes,
    test_restart_without_owner_makes_no_writes,
    test_server_rejection_reported_other_pools_publish,
    test_unchanged_update_makes_no_writes,
)
from integration.test_leaderelection import (
    test_controllers_standby_writes_nothing_and_takes_over_on_stop,
)
from resourceslice._apiversion import SliceVersion
from resourceslice.testing import TestCluster, wait_until
from support.controller_env import SYNC_TIMEOUT, ControllerEnv, device, devices_of, pools

from .conftest import on_each_target

pytestmark = [pytest.mark.integration, on_each_target]

__all__ = [
    "test_controllers_standby_writes_nothing_and_takes_over_on_stop",
    "test_create",
    "test_device_added_removed_changed",
    "test_explicit_slices_generation_rules",
    "test_external_delete_and_edit_healed",
    "test_invalid_input_rejected_and_old_state_kept",
    "test_lower_generation_deleted",
    "test_migration_from_random_named_slices",
    "test_pool_removed",
    "test_quantities_compared_by_value",
    "test_redundant_slice_deleted",
    "test_restart_makes_no_writes",
    "test_restart_without_owner_makes_no_writes",
    "test_server_rejection_reported_other_pools_publish",
    "test_unchanged_update_makes_no_writes",
]


def test_requests_go_to_the_served_version(env: ControllerEnv, served: SliceVersion) -> None:
    env.start_synced(pools(p=rs.Pool(devices=[device(0)])))
    paths = {path for _, path in env.counter.requests() if "resourceslices" in path}
    assert paths and all(path.startswith(served.path) for path in paths)


BINDING = {
    "bindingConditions": ["example.com/attached"],
    "bindingFailureConditions": ["example.com/attach-failed"],
    "bindsToNode": True,
}
COUNTERS = [{"name": "mem", "counters": {"memory": {"value": "8Gi"}}}]
CONSUMES = [{"counterSet": "mem", "counters": {"memory": {"value": "1Gi"}}}]
PER_DEVICE = [{"name": "d0", "nodeName": "worker-0"}, {"name": "d1", "allNodes": True}]

#: feature -> (its slices, what each release does with them). "stored": kept as sent;
#: "dropped": the apiserver drops the fields (DroppedFieldsError, then no more writes);
#: "refused": ValidationError before any request, as the server would reject the rest.
FEATURES: dict[str, tuple[list[rs.Slice], dict[str, str]]] = {
    # Alpha in 1.33 (the test server switches the gate on), absent from 1.32.
    "taints": (
        [rs.Slice(devices=[device(0, taints=[TAINT])])],
        {"1.37": "stored", "1.33": "stored", "1.32": "dropped"},
    ),
    # 1.33 has counters, but wants them in the consuming device's own slice.
    "counters": (
        [
            rs.Slice(shared_counters=COUNTERS),
            rs.Slice(devices=[device(0, consumesCounters=CONSUMES)]),
        ],
        {"1.37": "stored", "1.33": "refused", "1.32": "dropped"},
    ),
    # From 1.34.
    "binding-conditions": (
        [rs.Slice(devices=[device(0, **BINDING)])],
        {"1.37": "stored", "1.33": "dropped", "1.32": "dropped"},
    ),
    # From 1.34: consumable capacity.
    "consumable-capacity": (
        [
            rs.Slice(
                devices=[
                    device(
                        0,
                        allowMultipleAllocations=True,
                        capacity={"memory": {"value": "4Gi", "requestPolicy": {"default": "1Gi"}}},
                    )
                ]
            )
        ],
        {"1.37": "stored", "1.33": "dropped", "1.32": "dropped"},
    ),
    # From 1.36: an attribute left without its value would be invalid.
    "list-attributes": (
        [rs.Slice(devices=[device(0, attributes={"ids": {"ints": [1, 2]}})])],
        {"1.37": "stored", "1.33": "refused", "1.32": "refused"},
    ),
    # From 1.33: without it the slice would have no node selection at all.
    "per-device-nodes": (
        [rs.Slice(devices=PER_DEVICE, per_device_node_selection=True)],
        {"1.37": "stored", "1.33": "stored", "1.32": "refused"},
    ),
}


@pytest.mark.parametrize("feature", sorted(FEATURES))
def test_a_feature_the_version_lacks_is_dropped_or_refused_never_looped(
    env: ControllerEnv, release_cluster: TestCluster, feature: str
) -> None:
    slices, outcomes = FEATURES[feature]
    resources = pools(p=rs.Pool(slices=slices))
    ctrl = env.start(resources, sync_delay=0.2)
    outcome = outcomes[release_cluster.release]
    if outcome == "stored":
        assert ctrl.wait_synced(SYNC_TIMEOUT), env.errors
        for want, stored in zip(slices, env.slices()):
            got = devices_of(stored)
            for key in ("taints",):  # the server adds timeAdded
                for d in got:
                    for taint in d.get(key, ()):
                        taint.pop("timeAdded")
            assert got == (want.devices or [])
        assert env.errors == []
        env.restart(ctrl, resources)
        assert env.counter.writes() == {}
    elif outcome == "dropped":
        # Reported once per slice; the resyncs that the watch's echo of those writes
        # triggers write nothing more.
        assert ctrl.wait_synced(SYNC_TIMEOUT), env.errors
        assert env.counter.writes() == {"POST": len(slices)}
        wait_until(lambda: ctrl.stats().syncs >= 2)
        assert env.counter.writes() == {"POST": len(slices)}
        assert [type(e) for e, _ in env.errors] == [rs.DroppedFieldsError] * len(slices)
        assert {e.pool for e, _ in env.errors if isinstance(e, rs.DroppedFieldsError)} == {"p"}
    else:
        wait_until(lambda: len(env.errors) >= 2)  # the first failure and a retry
        exc, message = env.errors[0]
        assert isinstance(exc, rs.ValidationError), exc
        assert f"Kubernetes {release_cluster.release}" in str(exc) and "'p'" in message
        assert all(isinstance(e, rs.ValidationError) for e, _ in env.errors)
        # Slices before the refused one may be written once; the refused one never is.
        writes = env.counter.writes()
        assert set(writes) <= {"POST"} and writes.get("POST", 0) < len(slices)
        assert not ctrl.wait_synced(0.5)
