"""How long an asyncio driver's event loop stalls while resourceslice.aio works, on the
real apiserver: 10,000 devices in one flat pool (79 slices).

A task of the loop wakes every millisecond (``LoopTicker``); the figure is its longest gap
during the await of each call: ``update`` (validation and preparation, in the
controller's thread), the ``sync`` that follows (``wait_synced``: the controller's worker
plans and writes 79 slices meanwhile, in its own threads), and a first publish. Both
the whole device list and one device changed. ``idle``: the loop only sleeping, what
the machine gives at best; ``(machine)``: over the same call, the worst gap of a ticking
thread in another process, which our GIL cannot hold up: the machine's own share. The
device lists are moved out of the garbage collector's way (``gc.freeze()``), as in
benches/test_gil.py: a full collection of their half a million dicts is a stall of its
own, whoever triggers it.

Run: ``.venv/bin/pytest benches/test_aio.py --benchmark-enable -s``.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any

import kubernetes.client
import pytest

import resourceslice as rs
from benchsize import sized
from resourceslice import aio
from resourceslice.testing import TestCluster
from resourceslice.testing.stalls import LoopTicker

pytestmark = pytest.mark.integration

DEVICES = sized(10_000, 1_000)
ROUNDS = sized(5, 1)
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


#: A process of its own that wakes every millisecond until its stdin closes, then prints
#: its longest gap: what the machine's load alone does to a thread that wants to run (the
#: apiserver and etcd work on the same two cores during a sync), without our GIL.
_PROCESS_TICKER = """
import select, sys, time
print("ready", flush=True)
last, worst = time.perf_counter(), 0.0
while not select.select([sys.stdin], [], [], 0.001)[0]:
    now = time.perf_counter()
    worst, last = max(worst, now - last), now
print(worst, flush=True)
"""


@contextlib.asynccontextmanager
async def measured(worst: dict[str, float], name: str) -> AsyncIterator[None]:
    """Note the loop's worst gap under ``name``, and the other process's under
    ``name (machine)``."""
    with subprocess.Popen(
        [sys.executable, "-c", _PROCESS_TICKER],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    ) as reference:  # fmt: skip
        assert reference.stdin is not None and reference.stdout is not None
        assert reference.stdout.readline() == "ready\n"
        try:
            async with LoopTicker() as ticker:
                yield
        finally:
            reference.stdin.close()
            machine = float(reference.stdout.readline())
    for key, gap in ((name, ticker.worst), (f"{name} (machine)", machine)):
        worst[key] = max(worst.get(key, 0.0), round(gap * 1000, 1))


def stalls_ms(client: kubernetes.client.ApiClient, states: list[rs.DriverResources]) -> Any:
    """The worst gap (ms) of each call: the start and its first publish, then an update
    and its sync per state in ``states``."""
    driver = f"aio-{next(_run)}.bench.example.com"

    async def main() -> dict[str, float]:
        worst: dict[str, float] = {}
        async with measured(worst, "idle"):
            await asyncio.sleep(0.5)
        async with measured(worst, "start"):
            ctrl = await aio.start_controller(
                client, driver=driver, resources=states[0], update_interval=0.0
            )
        async with ctrl:
            async with measured(worst, "first publish"):
                assert await ctrl.wait_synced(TIMEOUT)
            for state in states[1:]:
                async with measured(worst, "update"):
                    await ctrl.update(state)
                async with measured(worst, "sync"):
                    assert await ctrl.wait_synced(TIMEOUT)
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
