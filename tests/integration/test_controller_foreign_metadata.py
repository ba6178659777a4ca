"""What other clients put in a slice's metadata survives the controller's writes (issue 10).

Upstream updates a copy of the stored object with only the spec replaced: finalizers,
ownerReferences, labels and annotations of others stay. An edit of those alone is not a
conflict and makes no write. A slice that is being deleted (a finalizer holds it) is going
away: the controller neither writes nor deletes it again.
"""

from __future__ import annotations

from typing import Any

import kubernetes.client
import pytest

import resourceslice as rs
from resourceslice.testing import wait_until
from support.controller_env import (
    SYNC_TIMEOUT,
    ControllerEnv,
    device,
    devices_of,
    pools,
)

pytestmark = pytest.mark.integration

FINALIZER = "example.com/keep"


def add_foreign_metadata(env: ControllerEnv) -> dict[str, Any]:
    """Another client adds a finalizer, an ownerReference, a label and an annotation to the
    one slice."""
    [stored] = env.slices()
    namespace = kubernetes.client.CoreV1Api(env.admin).read_namespace("default")
    foreign = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "name": "default",
        "uid": namespace.metadata.uid,
    }
    meta = stored["metadata"]
    meta["finalizers"] = [FINALIZER]
    meta["ownerReferences"] = [foreign]
    meta.setdefault("labels", {})["team"] = "other"
    meta.setdefault("annotations", {})["note"] = "kept"
    env.replace_slice(stored)
    return foreign


def remove_finalizer(env: ControllerEnv, name: str) -> None:
    [stored] = [s for s in env.slices() if s["metadata"]["name"] == name]
    stored["metadata"]["finalizers"] = []
    env.replace_slice(stored)


def test_update_keeps_others_metadata(env: ControllerEnv) -> None:
    ctrl = env.start_synced(pools(p=rs.Pool(devices=[device(0)])), sync_delay=0.2)
    assert ctrl.wait_idle(SYNC_TIMEOUT), env.errors
    syncs = ctrl.stats().syncs
    foreign = add_foreign_metadata(env)
    # Once the watch delivered the edit (it syncs the pool): an update sent before that
    # would meet a 409 for its stale resourceVersion, reported and retried, which is the
    # optimistic concurrency at work and not what this test is about.
    wait_until(lambda: ctrl.stats().syncs > syncs)
    env.update_synced(ctrl, pools(p=rs.Pool(devices=[device(0), device(1)])))
    [updated] = env.slices()
    assert devices_of(updated) == [device(0), device(1)]
    assert updated["metadata"]["finalizers"] == [FINALIZER]
    assert updated["metadata"]["ownerReferences"] == [foreign]
    assert updated["metadata"]["labels"] == {"team": "other"}
    assert updated["metadata"]["annotations"] == {"note": "kept"}
    assert ctrl.wait_idle(SYNC_TIMEOUT), env.errors
    # Only metadata the controller does not own changed: not a conflicting writer.
    assert env.errors == []
    # Clean up: the finalizer would keep the slice past the test.
    remove_finalizer(env, updated["metadata"]["name"])


def test_foreign_metadata_edit_makes_no_write(env: ControllerEnv) -> None:
    ctrl = env.start_synced(pools(p=rs.Pool(devices=[device(0)])), sync_delay=0.2)
    assert ctrl.wait_idle(SYNC_TIMEOUT), env.errors
    env.counter.reset()
    syncs = ctrl.stats().syncs
    add_foreign_metadata(env)
    # The watch event syncs the pool again; it finds nothing of its own changed.
    wait_until(lambda: ctrl.stats().syncs > syncs)
    assert ctrl.wait_idle(SYNC_TIMEOUT), env.errors
    assert env.counter.writes() == {}
    assert env.errors == []
    [stored] = env.slices()
    remove_finalizer(env, stored["metadata"]["name"])


def test_slice_with_finalizer_deleted_as_the_api_allows(env: ControllerEnv) -> None:
    """The controller deletes a slice that a finalizer holds: the slice stays, marked as
    being deleted, and the controller is done with it (one DELETE, idle). Once the holder
    removes the finalizer, the slice goes."""
    ctrl = env.start_synced(pools(p=rs.Pool(devices=[device(0)])), sync_delay=0.2)
    add_foreign_metadata(env)
    [held] = env.slices("p")
    env.update_synced(ctrl, pools(q=rs.Pool(devices=[device(1)])))
    assert ctrl.wait_idle(SYNC_TIMEOUT), env.errors
    [terminating] = env.slices("p")
    assert terminating["metadata"]["uid"] == held["metadata"]["uid"]
    assert terminating["metadata"].get("deletionTimestamp")
    assert env.counter.writes() == {"POST": 2, "DELETE": 1}

    remove_finalizer(env, held["metadata"]["name"])
    wait_until(lambda: env.slices("p") == [])
    assert ctrl.wait_idle(SYNC_TIMEOUT), env.errors
    assert env.counter.writes() == {"POST": 2, "DELETE": 1}
    assert env.errors == []


def test_desired_slice_being_deleted_is_recreated_once_gone(env: ControllerEnv) -> None:
    """Someone deletes a desired slice that a finalizer holds. Its name is taken until it
    goes, so the controller waits (the pool is not synced; nothing is written), then
    publishes it again."""
    ctrl = env.start_synced(pools(p=rs.Pool(devices=[device(0)])), sync_delay=0.2)
    add_foreign_metadata(env)
    [held] = env.slices("p")
    name = held["metadata"]["name"]
    syncs = ctrl.stats().syncs
    env.api.delete_resource_slice(name, _preload_content=False)
    wait_until(lambda: ctrl.stats().syncs > syncs and not ctrl.wait_synced(0))
    assert env.counter.writes() == {"POST": 1}

    remove_finalizer(env, name)
    assert ctrl.wait_synced(SYNC_TIMEOUT), env.errors
    assert ctrl.wait_idle(SYNC_TIMEOUT), env.errors
    [recreated] = env.slices("p")
    assert recreated["metadata"]["name"] == name
    assert recreated["metadata"]["uid"] != held["metadata"]["uid"]
    assert devices_of(recreated) == [device(0)]
    assert env.counter.writes() == {"POST": 2}
    assert env.errors == []
