"""The controller across an apiserver crash and restart, and stop() during a watch.

Uses an apiserver of its own: the crash must not disturb the other tests' server.
"""

from __future__ import annotations

import pytest

import resourceslice as rs
from resourceslice.testing import TestCluster, wait_until
from support.controller_env import (
    ControllerEnv,
    device,
    devices_of,
    pools,
)

pytestmark = pytest.mark.integration


def test_watch_reconnects_after_an_apiserver_crash(module_kube_cluster: TestCluster) -> None:
    env = ControllerEnv(module_kube_cluster, "reconnect.example.com")
    try:
        env.start_synced(pools(p=rs.Pool(devices=[device(0)])))
        module_kube_cluster.kill()
        module_kube_cluster.restart()
        # Only a watch that came back sees this delete and so heals it.
        [ours] = env.slices()
        env.api.delete_resource_slice(ours["metadata"]["name"], _preload_content=False)
        healed = wait_until(lambda: env.slices())
        assert devices_of(healed[0]) == [device(0)]
        # The same name (it is derived from the pool and index), a new object.
        assert healed[0]["metadata"]["name"] == ours["metadata"]["name"]
        assert healed[0]["metadata"]["uid"] != ours["metadata"]["uid"]
    finally:
        env.close()


def test_stop_ends_the_watch_at_once(env: ControllerEnv) -> None:
    ctrl = env.start_synced(pools(p=rs.Pool(devices=[device(0)])))
    # The server would hold the watch open for minutes; stop() ends it (and the workers)
    # instead of waiting for it: when it returns, nothing of the controller runs.
    ctrl.stop()
    assert not ctrl.running
