"""One device changed in a 100,000-device pool: ``Desired.with_devices`` (docs/core.md §8)
against ``prepare_desired`` of the whole pool, and ``json.dumps`` of the same devices, in the
same run. Planning afterwards is the same for both (``one_change`` of test_core.py).

Run: ``.venv/bin/pytest benches/test_device_edits.py --benchmark-enable``.
"""

from __future__ import annotations

import gc
import json
import time
from collections.abc import Callable
from typing import Any

import pytest

import resourceslice as rs
from test_core import DRIVER, MAX_SLICE_BYTES, gpu, load_core

DEVICES = 100_000
ROUNDS = 7


def _pools(devices: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "p": {
            "devices": devices,
            "slices": None,
            "nodeSelector": None,
            "allNodes": True,
            "nodeName": None,
            "generation": 0,
        }
    }


@pytest.mark.parametrize("core_name", ["rust", "python"])
def test_edit_one_device_of_100k(benchmark: Any, core_name: str) -> None:
    core = load_core(core_name)
    devices = [gpu(i) for i in range(DEVICES)]
    desired, errors = core.prepare_desired(DRIVER, _pools(devices), MAX_SLICE_BYTES)
    assert errors == []
    changed = [gpu(5000, revision=1)]

    def edit() -> Any:
        batch, _ = core.prepare_desired(DRIVER, _pools(changed), MAX_SLICE_BYTES)
        return desired.with_devices("p", batch, [])

    edited, errors = benchmark.pedantic(edit, rounds=10, iterations=1, warmup_rounds=1)
    assert errors == [] and desired.changed_pools(edited) == ["p"]


def test_whole_pool_of_100k(benchmark: Any) -> None:
    """A full ``update()`` of the pool against ``json.dumps`` of its devices (issue 22: at
    most 0.5 times), rounds of each interleaved so that both see the same machine.

    ``update()`` is an inactive controller's (no API client): all of the call, validation and
    the Python-side conversion before the core included, and no background sync competing
    with it. Each call changes one device, as a driver's would. ``extra_info``: the fastest
    round of each in ms, and the ratios to ``json.dumps``.
    """
    core = load_core("rust")
    devices = [gpu(i) for i in range(DEVICES)]
    edited = [*devices[:5000], gpu(5000, revision=1), *devices[5001:]]
    states = [
        rs.DriverResources(pools={"p": rs.Pool(devices=d, all_nodes=True)})
        for d in (devices, edited)
    ]
    ctrl = rs.start_controller(None, driver=DRIVER, resources=states[0])
    calls: dict[str, Callable[[int], Any]] = {
        "json_dumps": lambda _: json.dumps(devices),
        "prepare_desired": lambda _: core.prepare_desired(DRIVER, _pools(devices), MAX_SLICE_BYTES),
        "update": lambda i: ctrl.update(states[(i + 1) % 2]),
    }
    # The 1.3 million dicts make a full collection take about 0.2 s, whichever call happens
    # to trigger it: out of its way, the figures are the calls' own.
    gc.freeze()
    try:
        best = {name: float("inf") for name in calls}
        for i in range(ROUNDS):
            for name, call in calls.items():
                start = time.perf_counter()
                call(i)
                best[name] = min(best[name], time.perf_counter() - start)
        benchmark.pedantic(calls["update"], (0,), rounds=1, iterations=1)
    finally:
        gc.unfreeze()
        ctrl.stop()
    for name, seconds in best.items():
        benchmark.extra_info[f"{name}_ms"] = round(seconds * 1000, 1)
    for name in ("prepare_desired", "update"):
        benchmark.extra_info[f"{name}_over_json_dumps"] = round(best[name] / best["json_dumps"], 2)
