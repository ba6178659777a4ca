"""Apiserver faults on each release: a crash mid-publish, a crash under a watch, and the
served version switched off under a running controller (404, discovery again).

These kill or reconfigure their apiserver, so they run on a cluster of their own.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest
from kubernetes.client.exceptions import ApiException

import resourceslice as rs
from resourceslice._apiversion import SliceVersion
from resourceslice.testing import TestCluster, start_cluster, wait_until
from support.controller_env import SYNC_TIMEOUT, device, devices_of, pools

from .conftest import VersionedEnv, generated_api, on_each_target_own_cluster

pytestmark = [
    pytest.mark.integration,
    # A connection the crash broke leaves its socket to the garbage collector, which may
    # close it during a later test and warn: expected here (as in tests/reliability).
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

FAST = {"sync_delay": 0.5, "mutation_cache_ttl": 2.0}


@pytest.fixture
def fault_env(own_cluster: TestCluster, served: SliceVersion) -> Iterator[VersionedEnv]:
    environment = VersionedEnv(own_cluster, "fault.example.com", served)
    try:
        yield environment
    finally:
        if own_cluster.process is None or own_cluster.process.poll() is not None:
            own_cluster.start()
        environment.close()
        gc.collect()  # the broken connections' sockets are closed here, where it is expected


@on_each_target_own_cluster
def test_killed_mid_publish_resumes_without_rewrites(
    own_cluster: TestCluster, fault_env: VersionedEnv
) -> None:
    env = fault_env
    wanted = [device(i) for i in range(5_000)]  # 40 slices
    ctrl = env.start(pools(p=rs.Pool(devices=wanted)), **FAST)
    wait_until(lambda: ctrl.stats().creates >= 8)
    own_cluster.kill()
    own_cluster.start()
    assert ctrl.wait_synced(SYNC_TIMEOUT)
    published = env.slices()
    assert [d for s in published for d in devices_of(s)] == wanted
    # Each slice created once (a create whose answer the kill lost is found by its 409),
    # in the first generation: nothing published is rewritten.
    stats = ctrl.stats()
    assert 39 <= stats.creates <= 40 and stats.updates == stats.deletes == 0
    assert {s["spec"]["pool"]["generation"] for s in published} == {1}


@on_each_target_own_cluster
def test_watch_reconnects_after_a_crash(own_cluster: TestCluster, fault_env: VersionedEnv) -> None:
    env = fault_env
    env.start_synced(pools(p=rs.Pool(devices=[device(0)])), **FAST)
    own_cluster.kill()
    own_cluster.start()
    # Only a watch that came back sees this delete and so heals it.
    [ours] = env.slices()
    env.api.delete_resource_slice(ours["metadata"]["name"], _preload_content=False)
    healed = wait_until(lambda: env.slices())
    assert devices_of(healed[0]) == [device(0)]
    assert healed[0]["metadata"]["uid"] != ours["metadata"]["uid"]


def test_served_version_switched_off_then_discovered_again() -> None:
    """1.33 restarted without v1beta2: the 404s make the controller go over to v1beta1."""
    cluster = start_cluster(release="1.33")
    try:
        env = VersionedEnv(cluster, "switch.example.com", SliceVersion("v1beta2"))
        # The default mutation cache TTL: the informer, in backoff after the restart, may take
        # longer than FAST's 2 s to follow, and the own write must stay visible until then.
        ctrl = env.start_synced(pools(p=rs.Pool(devices=[device(0)])), sync_delay=0.5)
        assert {p for _, p in env.counter.requests() if "/v1beta2/" in p}
        cluster.stop()
        cluster.extra_args = ("--runtime-config=resource.k8s.io/v1beta2=false",)
        cluster.start()
        env.served = SliceVersion("v1beta1")
        env.api = generated_api(env.served, env.admin)
        env.slices_api.forget(env.slices_api.current())
        env.counter.reset()
        env.update_synced(ctrl, pools(p=rs.Pool(devices=[device(0), device(1)])))
        [published] = env.slices()
        assert devices_of(published) == [device(0), device(1)]
        paths = [p for _, p in env.counter.requests() if "resource.k8s.io" in p]
        assert "/apis/resource.k8s.io" in paths  # asked again after a 404
        # The write is made in v1beta1. One in v1beta2 may come first, when the sync ran
        # before the informer's relist met a 404: its own 404 sends discovery again.
        writes = [p for m, p in env.counter.requests() if m == "PUT"]
        assert writes and "/v1beta1/" in writes[-1]
        assert len(writes) <= 2 and all("/v1beta2/" in p for p in writes[:-1])
        # The watch followed too: a hand delete is healed.
        env.api.delete_resource_slice(published["metadata"]["name"], _preload_content=False)
        healed = wait_until(lambda: env.slices())
        assert devices_of(healed[0]) == [device(0), device(1)]
        # What the switch cost: 404s (which sent discovery again) and the dropped connections.
        assert any(isinstance(e, ApiException) and e.status == 404 for e, _ in env.errors)
        kinds = {type(e).__name__ for e, _ in env.errors}
        assert not kinds & {"DroppedFieldsError", "ValidationError", "ConflictingWriterError"}, [
            (type(e).__name__, m) for e, m in env.errors
        ]
        env.close()
    finally:
        cluster.close()
        gc.collect()
