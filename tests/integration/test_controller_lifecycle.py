"""The controller's life on the real apiserver: updates that touch few pools, workers, the
write limit, stop() from any thread, and failures of the core that must not end a thread."""

from __future__ import annotations

import threading
from typing import Any

import pytest

import resourceslice as rs
from resourceslice import _sync as sync_module
from resourceslice import informer as informer_module
from resourceslice.testing import wait_until
from support.controller_env import (
    SYNC_TIMEOUT,
    ControllerEnv,
    device,
    node_pools,
    pools,
)

pytestmark = pytest.mark.integration


class CorePanic(BaseException):
    """Stands in for PyO3's PanicException: a BaseException, not an Exception."""


class WrappedCore:
    """The core of the controller's syncs, with ``plan_pool`` going through ``hook`` first."""

    def __init__(self, hook: Any) -> None:
        self._real = sync_module.core
        self._hook = hook

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def plan_pool(self, desired: Any, pool: str, *args: Any) -> Any:
        self._hook(pool)
        return self._real.plan_pool(desired, pool, *args)


def test_update_syncs_only_the_pools_it_changed(env: ControllerEnv) -> None:
    # A long sync_delay: no resync after the watch's events falls into this test.
    resources = {f"p{i}": rs.Pool(devices=[device(i)]) for i in range(5)}
    ctrl = env.start_synced(pools(**resources), sync_delay=60.0)
    before = ctrl.stats().syncs
    env.counter.reset()
    env.update_synced(ctrl, pools(**{**resources, "p3": rs.Pool(devices=[device(3), device(9)])}))
    # One sync, of p3: the other four pools did not wait behind no-op syncs.
    assert ctrl.stats().syncs - before == 1
    assert env.counter.writes() == {"PUT": 1}


def test_update_after_stop_raises(env: ControllerEnv) -> None:
    resources = pools(p=rs.Pool(devices=[device(0)]))
    ctrl = env.start_synced(resources)
    ctrl.stop()
    with pytest.raises(rs.ControllerStoppedError):
        ctrl.update(resources)
    inactive = rs.start_controller(None, driver=env.driver, resources=resources)
    inactive.stop()
    with pytest.raises(rs.ControllerStoppedError):
        inactive.update(resources)


def test_stop_from_the_error_handler_on_the_informer_thread(
    env: ControllerEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = informer_module.core
    failed = threading.Event()

    class FailsOnce:
        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

        def decode_list_chunks(self, chunks: Any) -> Any:
            if not failed.is_set():
                failed.set()
                raise ValueError("unreadable list")
            return real.decode_list_chunks(chunks)

    monkeypatch.setattr(informer_module, "core", FailsOnce())
    raised: list[BaseException] = []
    stopped = threading.Event()
    started: list[rs.Controller] = []

    def stop_on_error(exc: BaseException, message: str) -> None:
        # The error can come before start_controller() has returned.
        wait_until(lambda: started)
        try:
            started[0].stop()  # on the informer's thread, which reported the error
        except BaseException as stop_failure:
            raised.append(stop_failure)
        stopped.set()

    ctrl = env.start(pools(p=rs.Pool(devices=[device(0)])), error_handler=stop_on_error)
    started.append(ctrl)
    assert stopped.wait(SYNC_TIMEOUT)
    assert raised == []  # was: RuntimeError("cannot join current thread")
    wait_until(lambda: not ctrl.running)
    with pytest.raises(rs.ControllerStoppedError):
        ctrl.update(pools(p=rs.Pool(devices=[device(1)])))


def test_stop_from_the_error_handler_on_a_worker(env: ControllerEnv) -> None:
    raised: list[BaseException] = []
    stopped = threading.Event()
    started: list[rs.Controller] = []

    def stop_on_error(exc: BaseException, message: str) -> None:
        wait_until(lambda: started)
        try:
            started[0].stop()  # on the worker that failed to look up the Node
        except BaseException as stop_failure:
            raised.append(stop_failure)
        stopped.set()

    # The Node owner does not exist: looking up its uid fails on the worker, before any write.
    ctrl = env.start(
        node_pools(p=rs.Pool(devices=[device(1)])),
        owner=rs.Owner(api_version="v1", kind="Node", name="no-such-node"),
        error_handler=stop_on_error,
    )
    started.append(ctrl)
    assert stopped.wait(SYNC_TIMEOUT)
    assert raised == []
    wait_until(lambda: not ctrl.running)
    assert ctrl.stats().creates == 0


def test_a_panic_in_the_core_is_reported_and_the_pool_retried(
    env: ControllerEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = 0

    def panic_once(pool: str) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise CorePanic("called `Option::unwrap()` on a `None` value")

    monkeypatch.setattr(sync_module, "core", WrappedCore(panic_once))
    ctrl = env.start(pools(p=rs.Pool(devices=[device(0)])))
    # The worker lived on: the retry published the pool. It used to die with the panic,
    # and wait_synced() never succeeded, with nothing said.
    assert ctrl.wait_synced(SYNC_TIMEOUT), env.errors
    assert [type(exc) for exc, _ in env.errors] == [CorePanic]
    assert "'p'" in env.errors[0][1]
    assert len(env.slices()) == 1


def test_workers_sync_pools_at_once_but_never_one_pool_twice(
    env: ControllerEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    lock = threading.Lock()
    active: list[str] = []
    overlapping: list[str] = []
    most = 0
    second = threading.Event()

    def track(pool: str) -> None:
        nonlocal most
        with lock:
            if pool in active:
                overlapping.append(pool)
            active.append(pool)
            most = max(most, len(active))
            if len(active) >= 2:
                second.set()
        # The first sync waits (bounded) for a second one to start beside it.
        second.wait(10)
        with lock:
            active.remove(pool)

    monkeypatch.setattr(sync_module, "core", WrappedCore(track))
    resources = {f"p{i}": rs.Pool(devices=[device(i)]) for i in range(8)}
    ctrl = env.start_synced(pools(**resources), workers=4)
    for n in range(3):  # updates that re-queue pools while they are being synced
        ctrl.update(pools(**{k: rs.Pool(devices=[device(n + 10)]) for k in resources}))
    assert ctrl.wait_synced(SYNC_TIMEOUT), env.errors
    assert overlapping == []
    assert most >= 2
    assert len(env.slices()) == 8


def test_writes_beyond_the_burst_wait_for_the_limit_and_stop_ends_the_wait(
    env: ControllerEnv,
) -> None:
    # One write per 100 s, burst 1: the first create goes, the second waits for a token.
    resources = {f"p{i}": rs.Pool(devices=[device(i)]) for i in range(3)}
    ctrl = env.start(pools(**resources), max_writes_per_second=0.01)
    wait_until(lambda: ctrl.stats().creates == 1)
    ctrl.stop()  # not 100 s: stop() cuts the wait short, and nothing more is written
    assert not ctrl.running
    assert ctrl.stats().creates == 1
    assert env.counter.writes() == {"POST": 1}
    assert len(env.slices()) == 1
