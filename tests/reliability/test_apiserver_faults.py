"""Faults of the apiserver process itself: killed mid-publish, frozen, and stop() meanwhile.

These tests kill and freeze the server, so they run on an apiserver of their own, never the
session's. Each records its row of the fault table (see faults.py).
"""

from __future__ import annotations

import gc
import time
from typing import Any

import pytest

import resourceslice as rs
from resourceslice import _http, informer
from resourceslice.testing import TestCluster, wait_until
from support.controller_env import device, pools

from .faults import Run, settle

pytestmark = [pytest.mark.integration, pytest.mark.fault]

LARGE = 5_000  # 40 slices: long enough a publish to be interrupted in the middle
FAST = {"sync_delay": 0.5, "mutation_cache_ttl": 2.0}


@pytest.fixture
def short_timeouts(monkeypatch: pytest.MonkeyPatch) -> tuple[float, float]:
    """Client timeouts of (1 s, 2 s): a frozen server outlasts them within a short test."""
    timeouts = (1.0, 2.0)
    for module in (_http, informer):  # the controller's requests take _http's default
        monkeypatch.setattr(module, "REQUEST_TIMEOUT", timeouts)
    return timeouts


def large_pool() -> list[dict[str, Any]]:
    return [device(i) for i in range(LARGE)]


def test_killed_mid_publish_of_a_large_pool(module_kube_cluster: TestCluster) -> None:
    run = Run(module_kube_cluster, "1 apiserver SIGKILL mid-publish, restart", "killed.example.com")
    try:
        wanted = {"p": large_pool()}
        ctrl = run.env.start(pools(p=rs.Pool(devices=wanted["p"])), **FAST)
        wait_until(lambda: ctrl.stats().creates >= 8)
        module_kube_cluster.kill()
        since = time.monotonic()
        module_kube_cluster.start()
        outcome = run.finish(ctrl, wanted, since)
        # 40 slices, each created once (a create whose response the kill lost is found by its
        # 409, and read), under the first generation: the publish resumes, nothing published
        # is rewritten. While the server was down, the retries back off: 5 ms doubling
        # reaches 10 s at the 12th.
        stats = ctrl.stats()
        assert 39 <= stats.creates <= 40 and stats.updates == stats.deletes == 0
        posts = run.env.counter.statuses("POST")
        assert set(outcome.writes) == {"POST"}
        assert set(posts) <= {201, 409, None} and posts[201] == stats.creates, posts
        # A 409 per create the kill cut off (one in flight), maybe again if the informer is
        # still behind when the slice read after it leaves the mutation cache: not one per sync.
        assert posts.get(409, 0) <= 4 and posts.get(None, 0) <= 14, posts
        assert {s["spec"]["pool"]["generation"] for s in run.env.slices()} == {1}
    finally:
        run.close()


# A request abandoned on its client timeout leaves its socket to the garbage collector,
# which may close it during a later test and warn (ResourceWarning): expected here.
@pytest.mark.filterwarnings("ignore::ResourceWarning")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_frozen_longer_than_client_timeouts(
    module_kube_cluster: TestCluster, short_timeouts: tuple[float, float]
) -> None:
    run = Run(module_kube_cluster, "2 apiserver SIGSTOP > client timeouts", "frozen.example.com")
    try:
        devices = [device(i) for i in range(300)]
        ctrl = run.env.start_synced(pools(p=rs.Pool(devices=devices)), **FAST)
        run.env.counter.reset()
        module_kube_cluster.freeze()
        devices = [*devices[1:], device(1000), device(1001)]
        ctrl.update(pools(p=rs.Pool(devices=devices)))
        # The writes time out: the server is frozen for longer than the client waits.
        wait_until(lambda: any("timed out" in str(e).lower() for e, _ in run.env.errors))
        module_kube_cluster.resume()
        since = time.monotonic()
        outcome = run.finish(ctrl, {"p": devices}, since)
        # A write that timed out may still have been applied; its retry then gets 409 and
        # waits for the watch. Nothing is created twice, so nothing is deleted.
        assert "DELETE" not in outcome.writes
        assert sum(outcome.writes.values()) <= 6
    finally:
        run.close()
        gc.collect()  # the abandoned sockets are closed here, where their warning is expected


def test_stop_during_a_sync_leaves_the_slices(module_kube_cluster: TestCluster) -> None:
    run = Run(
        module_kube_cluster,
        "7a stop() during a sync, then a new controller",
        "stopsync.example.com",
    )
    try:
        wanted = {"p": large_pool()}
        resources = pools(p=rs.Pool(devices=wanted["p"]))
        ctrl = run.env.start(resources, **FAST)
        wait_until(lambda: ctrl.stats().creates >= 5)
        ctrl.stop()
        # Between two writes: stop() neither waits for the rest of the publish nor lets the
        # worker go on with it. Once it returned, nothing runs, and every create that was
        # sent has landed and was counted.
        assert not ctrl.running
        left = {s["metadata"]["uid"] for s in run.env.slices()}
        assert len(left) == ctrl.stats().creates
        assert 5 <= len(left) < 40
        since = time.monotonic()
        run.env.new_counter()
        second = run.env.start(resources, **FAST)
        outcome = run.finish(second, wanted, since)
        # The slices the stopped controller left were taken over (updated), not replaced.
        assert left <= {s["metadata"]["uid"] for s in run.env.slices()}
        assert "DELETE" not in outcome.writes
        second.stop()
        # A third start on the finished publish adopts it as it is.
        run.env.new_counter()
        third = run.env.start_synced(resources, **FAST)
        settle(third, run.env, wanted)
        assert run.env.counter.writes() == {}
    finally:
        run.close()


def test_stop_during_a_reconnect(module_kube_cluster: TestCluster) -> None:
    run = Run(
        module_kube_cluster, "7b stop() during a reconnect, then adopt", "stopreconnect.example.com"
    )
    try:
        wanted = {"p": [device(i) for i in range(300)]}
        resources = pools(p=rs.Pool(devices=wanted["p"]))
        ctrl = run.env.start_synced(resources, **FAST)
        module_kube_cluster.kill()
        wait_until(lambda: run.env.errors)  # the informer is reconnecting with backoff
        ctrl.stop()
        # The informer's backoff wait was cut short: nothing of the controller runs on.
        assert not ctrl.running
        module_kube_cluster.start()
        since = time.monotonic()
        assert len(run.env.slices()) == 3
        run.env.new_counter()
        second = run.env.start(resources, **FAST)
        outcome = run.finish(second, wanted, since)
        assert outcome.writes == {}
    finally:
        run.close()


@pytest.mark.filterwarnings("ignore::ResourceWarning")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_stop_waits_for_the_write_in_flight(
    module_kube_cluster: TestCluster, short_timeouts: tuple[float, float]
) -> None:
    run = Run(module_kube_cluster, "7c stop() while a write is in flight", "stopwrite.example.com")
    try:
        devices = [device(i) for i in range(10)]
        ctrl = run.env.start_synced(pools(p=rs.Pool(devices=devices)), **FAST)
        run.env.counter.reset()
        module_kube_cluster.freeze()
        try:
            ctrl.update(pools(p=rs.Pool(devices=devices[1:])))
            wait_until(lambda: run.env.counter.writes() == {"PUT": 1})  # sent, unanswered
            ctrl.stop()
            # stop() returned only once the write had ended: here the client gave up on the
            # frozen server (read timeout, 2 s), which was reported before stop() returned.
            # The stop used to give up on the worker after 1 s (the connect timeout), while
            # the write could still land.
            assert any("timed out" in str(e).lower() for e, _ in run.env.errors)
            assert not ctrl.running
            assert run.env.counter.writes() == {"PUT": 1}  # and nothing was sent after it
        finally:
            module_kube_cluster.resume()
        assert ctrl.stats().updates == 0
    finally:
        run.close()
        gc.collect()
