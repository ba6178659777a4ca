"""How long an asyncio driver's event loop stalls while resourceslice.aio works, on the
real apiserver: 10,000 devices in one flat pool (79 slices).

A task of the loop wakes every millisecond (``LoopTicker``); the figure is its longest gap
during the await of each call: ``update`` (validation and preparation, in the
controller's thread), the ``sync`` that follows (``wait_synced``: the controller's worker
plans and writes 79 slices meanwhile, in its own threads), and a first publish. Both
the whole device list and one device changed. ``idle``: the loop only sleeping, what
the machine gives at best. The device lists are moved out of the garbage collector's way
(``gc.freeze()``), as in benches/test_gil.py: a full collection of their half a million
dicts is a stall of its own, whoever triggers it.

Run: ``.venv/bin/pytest benches/test_aio.py --benchmark-enable -s``.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
from collections.abc import Iterator
from typing import Any

import kubernetes.client
import pytest

import resourceslice as rs
from resourceslice import aio
from resourceslice.testing import TestCluster
from resourceslice.testing.stalls import LoopTicker

pytestmark = pytest.mark.integration

DEVICES = 10_000
ROUNDS = 5
TIMEOUT = 120.0
_run = itertools.count()


def resources(model: str, changed: int | None = None) -> rs.DriverResources:
    devices = [
        {
            "name": f"dev-{i}",
            "attributes": {
                "index": {"int": -1 if i == changed else i},
                "model": {"string": model},
            },
            "capacity": {"memory": {"value": "80Gi"}},
        }
        for i in range(DEVICES)
    ]
    return rs.DriverResources(pools={"p": rs.Pool(devices=devices, all_nodes=True)})


@pytest.fixture
def client(kube_cluster: TestCluster) -> Iterator[kubernetes.client.ApiClient]:
    with kube_cluster.api_client("admin") as api_client:
        yield api_client


def stalls_ms(client: kubernetes.client.ApiClient, states: list[rs.DriverResources]) -> Any:
    """The worst gap (ms) of each call: the start and its first publish, then an update
    and its sync per state in ``states``."""
    driver = f"aio-{next(_run)}.bench.example.com"

    async def main() -> dict[str, float]:
        worst: dict[str, float] = {}

        def note(name: str, ticker: LoopTicker) -> None:
            worst[name] = max(worst.get(name, 0.0), round(ticker.worst * 1000, 1))

        async with LoopTicker() as ticker:
            await asyncio.sleep(0.5)
        note("idle", ticker)
        async with LoopTicker() as ticker:
            ctrl = await aio.start_controller(
                client, driver=driver, resources=states[0], update_interval=0.0
            )
        note("start", ticker)
        async with ctrl, LoopTicker() as ticker:
            assert await ctrl.wait_synced(TIMEOUT)
            note("first publish", ticker)
            for state in states[1:]:
                async with LoopTicker() as ticker:
                    await ctrl.update(state)
                note("update", ticker)
                async with LoopTicker() as ticker:
                    assert await ctrl.wait_synced(TIMEOUT)
                note("sync", ticker)
        return worst

    try:
        return asyncio.run(main())
    finally:
        kubernetes.client.ResourceV1Api(client).delete_collection_resource_slice(
            field_selector=f"spec.driver={driver}", _preload_content=False
        )


@pytest.mark.parametrize("change", ["every device", "one device"])
def test_worst_loop_stall(benchmark: Any, client: kubernetes.client.ApiClient, change: str) -> None:
    if change == "every device":
        states = [resources(m) for m in ("a", "b", "a", "b")]
    else:
        states = [resources("a"), resources("a", 5000), resources("a"), resources("a", 5000)]
    rounds: list[dict[str, float]] = []
    gc.freeze()
    try:
        benchmark.pedantic(lambda: rounds.append(stalls_ms(client, states)), rounds=ROUNDS)
    finally:
        gc.unfreeze()
    worst = {name: max(r[name] for r in rounds) for name in rounds[0]}
    benchmark.extra_info["worst_stall_ms"] = worst
    benchmark.extra_info["rounds"] = rounds
    print(f"\n{change}: worst loop stall (ms) {worst}; per round {rounds}")
