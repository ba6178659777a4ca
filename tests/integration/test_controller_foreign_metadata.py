"""What other clients put in a slice's metadata survives the controller's writes (issue 10).

Upstream updates a copy of the stored object with only the spec replaced: finalizers,
ownerReferences and labels of others stay.
"""

from __future__ import annotations

from typing import Any

import kubernetes.client
import pytest

import resourceslice as rs

from .controller_env import (
    SYNC_TIMEOUT,
    ControllerEnv,
    device,
    devices_of,
    env_fixture,  # noqa: F401  (the env fixture)
    pools,
)

pytestmark = pytest.mark.integration

FINALIZER = "example.com/keep"


def add_foreign_metadata(env: ControllerEnv) -> dict[str, Any]:
    """Another client adds a finalizer, an ownerReference and a label to the one slice."""
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
    env.replace_slice(stored)
    return foreign


def test_update_keeps_others_metadata(env: ControllerEnv) -> None:
    ctrl = env.start_synced(pools(p=rs.Pool(devices=[device(0)])))
    foreign = add_foreign_metadata(env)
    env.update_synced(ctrl, pools(p=rs.Pool(devices=[device(0), device(1)])))
    [updated] = env.slices()
    assert devices_of(updated) == [device(0), device(1)]
    assert updated["metadata"]["finalizers"] == [FINALIZER]
    assert updated["metadata"]["ownerReferences"] == [foreign]
    assert updated["metadata"]["labels"] == {"team": "other"}
    assert ctrl.wait_idle(SYNC_TIMEOUT), env.errors
    # Clean up: the finalizer would keep the slice past the test.
    updated["metadata"]["finalizers"] = []
    env.replace_slice(updated)
