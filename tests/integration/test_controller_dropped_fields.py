"""A cluster with binding conditions switched off: the apiserver drops them when storing.

Needs an apiserver of its own (a feature gate differs), started for this module only.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import resourceslice as rs
from resourceslice.testing import TestCluster, start_cluster, wait_until
from support.controller_env import ControllerEnv, device, devices_of, pools

pytestmark = pytest.mark.integration

BINDING = {
    "bindingConditions": ["example.com/attached"],
    "bindingFailureConditions": ["example.com/attach-failed"],
    "bindsToNode": True,
}


@pytest.fixture(scope="module")
def gated_cluster() -> Iterator[TestCluster]:
    # A later --feature-gates flag overrides the same gate of an earlier one.
    cluster = start_cluster(extra_args=["--feature-gates=DRADeviceBindingConditions=false"])
    try:
        yield cluster
    finally:
        cluster.close()


def test_dropped_fields_reported_once_and_not_rewritten(gated_cluster: TestCluster) -> None:
    env = ControllerEnv(gated_cluster, "dropped.example.com")
    try:
        ctrl = env.start_synced(
            pools(p=rs.Pool(devices=[device(0, **BINDING), device(1)])), sync_delay=0.2
        )
        [published] = env.slices()
        assert devices_of(published)[0] == device(0)  # the server dropped the conditions
        [(exc, message)] = env.errors
        assert isinstance(exc, rs.DroppedFieldsError)
        assert exc.pool == "p" and exc.slice_name == published["metadata"]["name"]
        assert exc.slice_index == 0
        assert exc.paths == [
            "spec.devices[0].bindingConditions",
            "spec.devices[0].bindingFailureConditions",
            "spec.devices[0].bindsToNode",
        ]
        assert exc.features == ["DRADeviceBindingConditions"]
        assert "'p'" in message

        # The informer's event for the created slice syncs the pool again: it differs from
        # the desired state, but rewriting it would only lose the same fields again.
        wait_until(lambda: ctrl.stats().syncs >= 2)
        assert env.counter.writes() == {"POST": 1}
        assert len(env.errors) == 1
    finally:
        env.close()


def test_foreign_label_on_a_slice_with_dropped_fields_makes_no_write(
    gated_cluster: TestCluster,
) -> None:
    """Another client labels the slice the server stored without some fields: still what
    this cluster can hold, so not rewritten (and the drop not reported again)."""
    env = ControllerEnv(gated_cluster, "dropped-label.example.com")
    try:
        ctrl = env.start_synced(pools(p=rs.Pool(devices=[device(0, **BINDING)])), sync_delay=0.2)
        assert ctrl.wait_idle(60.0), env.errors
        syncs = ctrl.stats().syncs
        [published] = env.slices()
        published["metadata"]["labels"] = {"team": "other"}
        env.replace_slice(published)
        wait_until(lambda: ctrl.stats().syncs > syncs)
        assert ctrl.wait_idle(60.0), env.errors
        assert env.counter.writes() == {"POST": 1}
        assert [type(e) for e, _ in env.errors] == [rs.DroppedFieldsError]
    finally:
        env.close()
