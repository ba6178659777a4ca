"""resourceslice.aio on the real apiserver: an event loop that keeps running while the
controller starts, takes updates of 10,000 devices, waits and stops.

How long the loop stalls is measured in benches/test_aio.py (no timed assertions here);
what is asserted is that it ran at all during each call, which it would not if a call
held it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest

import resourceslice as rs
from resourceslice import aio
from resourceslice.testing.stalls import LoopTicker
from security.rbac_env import bound_role, shipped_role, without_verb
from support.controller_env import (
    SYNC_TIMEOUT,
    ControllerEnv,
    devices_of,
    pools,
)

pytestmark = pytest.mark.integration

DEVICES = 10_000


def big_pool(model: str) -> rs.DriverResources:
    return pools(
        big=rs.Pool(
            devices=[
                {
                    "name": f"dev-{i}",
                    "attributes": {"index": {"int": i}, "model": {"string": model}},
                    "capacity": {"memory": {"value": "80Gi"}},
                }
                for i in range(DEVICES)
            ]
        )
    )


def models(env: ControllerEnv) -> set[str]:
    return {d["attributes"]["model"]["string"] for s in env.slices("big") for d in devices_of(s)}


def test_the_loop_keeps_running_through_start_update_wait_and_stop(env: ControllerEnv) -> None:
    first, second = big_pool("a"), big_pool("b")

    async def main() -> dict[str, int]:
        ticks: dict[str, int] = {}
        start = aio.start_controller(
            env.client, driver=env.driver, resources=first, error_handler=env.error_handler
        )
        async with LoopTicker() as ticker:
            ctrl = await start
        ticks["start"] = ticker.ticks
        try:
            async with LoopTicker() as ticker:
                assert await ctrl.wait_synced(SYNC_TIMEOUT), env.errors
            ticks["first publish"] = ticker.ticks
            assert models(env) == {"a"}
            async with LoopTicker() as ticker:
                await ctrl.update(second)
            ticks["update"] = ticker.ticks
            async with LoopTicker() as ticker:
                assert await ctrl.wait_synced(SYNC_TIMEOUT), env.errors
            ticks["sync"] = ticker.ticks
            assert models(env) == {"b"}
            stats = ctrl.stats()
            # 10,000 devices in 79 slices of at most 128: created, then each updated once.
            assert (stats.creates, stats.updates, stats.deletes) == (79, 79, 0)
        finally:
            # Not measured: with no write in flight, a stop can take less than a tick.
            await ctrl.stop()
        assert not ctrl.running
        return ticks

    ticks = asyncio.run(main())
    # Each call let the loop run its other task: none held it from start to end (each of
    # these takes milliseconds at least: 10,000 devices validated, 79 slices written).
    assert all(n > 0 for n in ticks.values()), ticks
    assert not env.errors


def test_updates_apply_in_the_order_they_were_awaited(env: ControllerEnv) -> None:
    small = [pools(p=rs.Pool(devices=[{"name": f"d{i}"}])) for i in range(5)]

    async def main() -> None:
        async with aio.start_controller(
            env.client, driver=env.driver, resources=small[0], error_handler=env.error_handler
        ) as ctrl:
            await asyncio.gather(*(ctrl.update(r) for r in small[1:]))
            assert await ctrl.wait_synced(SYNC_TIMEOUT), env.errors
        assert not ctrl.running

    asyncio.run(main())
    (published,) = env.slices("p")
    assert [d["name"] for d in devices_of(published)] == ["d4"]


def test_invalid_resources_and_calls_after_stop_raise(env: ControllerEnv) -> None:
    bad: Any = pools(p=rs.Pool(devices=[{"name": "Not A DNS Label"}]))

    async def main() -> None:
        with pytest.raises(rs.ValidationError, match="must be a DNS label"):
            await aio.start_controller(env.client, driver=env.driver, resources=bad)
        ctrl = await aio.start_controller(env.client, driver=env.driver)
        with pytest.raises(rs.ValidationError):
            await ctrl.update(bad)
        await ctrl.stop()
        await ctrl.stop()  # a second stop does nothing
        with pytest.raises(rs.ControllerStoppedError):
            await ctrl.update(pools())
        assert await ctrl.wait_synced(0.1) is False

    asyncio.run(main())


def test_without_a_client_the_kubeconfig_is_used_and_closed(
    env: ControllerEnv, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(env.cluster.kubeconfigs["admin"]))
    resources = pools(p=rs.Pool(devices=[{"name": "d0"}]))

    async def main() -> aio.AsyncController:
        async with aio.start_controller(driver=env.driver, resources=resources) as ctrl:
            assert await ctrl.wait_synced(SYNC_TIMEOUT)
        return ctrl

    ctrl = asyncio.run(main())
    assert len(env.slices("p")) == 1
    assert not ctrl.running
    # No kubeconfig anywhere and not in a Pod: a ConfigError, at once.
    monkeypatch.setenv("KUBECONFIG", "")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(rs.ConfigError, match="no kubeconfig"):
        aio.start_controller(driver=env.driver)
    with pytest.raises(TypeError, match="no api_client"):
        aio.start_controller(env.client, driver=env.driver, kubeconfig="/x")


def test_a_kubeconfig_and_context_given(env: ControllerEnv) -> None:
    kubeconfig = str(env.cluster.kubeconfigs["admin"])
    resources = pools(p=rs.Pool(devices=[{"name": "d0"}]))

    async def main() -> None:
        start = aio.start_controller(
            driver=env.driver, resources=resources, kubeconfig=kubeconfig, context="admin"
        )
        async with start as ctrl:
            assert await ctrl.wait_synced(SYNC_TIMEOUT)
            assert ctrl.health().synced

    asyncio.run(main())
    assert len(env.slices("p")) == 1
    with pytest.raises(rs.ConfigError, match="nope"):
        aio.start_controller(driver=env.driver, kubeconfig=kubeconfig, context="nope")


@contextlib.contextmanager
def denied_creates(env: ControllerEnv) -> Iterator[kubernetes.client.ApiClient]:
    """A client of a user that may read slices but not create them: every create of a pool
    is refused by the apiserver (403), and retried with backoff."""
    with bound_role(env.cluster, without_verb(shipped_role(), "create")):
        client = env.cluster.api_client("driver")
        try:
            yield client
        finally:
            client.close()


def test_a_coroutine_error_handler_is_awaited_on_the_callers_loop(env: ControllerEnv) -> None:
    resources = pools(p=rs.Pool(devices=[{"name": "d0"}]))

    async def main() -> list[tuple[BaseException, bool, bool]]:
        loop = asyncio.get_running_loop()
        seen: list[tuple[BaseException, bool, bool]] = []
        two = asyncio.Event()

        async def handler(exc: BaseException, message: str) -> None:
            on_loop = asyncio.get_running_loop() is loop
            seen.append((exc, on_loop, threading.current_thread() is threading.main_thread()))
            if len(seen) == 2:
                two.set()

        with denied_creates(env) as client:
            async with aio.start_controller(
                client, driver=env.driver, resources=resources, error_handler=handler
            ):
                await asyncio.wait_for(two.wait(), SYNC_TIMEOUT)
        return seen

    seen = asyncio.run(main())
    assert len(seen) >= 2
    for exc, on_loop, on_main_thread in seen:
        assert isinstance(exc, kubernetes.client.ApiException) and exc.status == 403, exc
        assert on_loop and on_main_thread


def test_awaitable_error_handlers_run_one_at_a_time_in_order(env: ControllerEnv) -> None:
    """The first handler's coroutine ends only once two more errors were reported: awaited
    side by side, the later ones would start before it ended."""
    resources = pools(p=rs.Pool(devices=[{"name": "d0"}]))
    third_reported = threading.Event()
    reported = itertools.count()
    events: list[str] = []

    async def handle(n: int) -> None:
        events.append(f"begin {n}")
        if n == 0:
            loop = asyncio.get_running_loop()
            assert await loop.run_in_executor(None, third_reported.wait, SYNC_TIMEOUT)
        events.append(f"end {n}")

    def handler(exc: BaseException, message: str) -> Awaitable[None]:
        # In the controller's thread: only makes the coroutine, which runs on the loop.
        n = next(reported)
        if n == 2:
            third_reported.set()
        return handle(n)

    async def main() -> None:
        with denied_creates(env) as client:
            ctrl = await aio.start_controller(
                client, driver=env.driver, resources=resources, error_handler=handler
            )
            await asyncio.wait_for(_until(lambda: "end 2" in events), SYNC_TIMEOUT)
            await ctrl.stop()  # awaits the handlers of the errors reported until then

    asyncio.run(main())
    count = len(events) // 2
    assert count >= 3
    assert events == [f"{step} {n}" for n in range(count) for step in ("begin", "end")]


async def _until(condition: Callable[[], bool]) -> None:
    while not condition():
        await asyncio.sleep(0.01)


def test_a_plain_error_handler_still_runs_in_the_controllers_thread(env: ControllerEnv) -> None:
    resources = pools(p=rs.Pool(devices=[{"name": "d0"}]))
    seen: list[tuple[BaseException, str]] = []
    reported = threading.Event()

    def handler(exc: BaseException, message: str) -> None:
        seen.append((exc, threading.current_thread().name))
        reported.set()

    async def main() -> None:
        with denied_creates(env) as client:
            async with aio.start_controller(
                client, driver=env.driver, resources=resources, error_handler=handler
            ):
                loop = asyncio.get_running_loop()
                assert await loop.run_in_executor(None, reported.wait, SYNC_TIMEOUT)

    asyncio.run(main())
    exc, thread = seen[0]
    assert isinstance(exc, kubernetes.client.ApiException) and exc.status == 403, exc
    assert thread.startswith("resourceslice-"), thread
