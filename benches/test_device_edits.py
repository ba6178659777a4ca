"""One device changed in a 100,000-device pool: ``Desired.with_devices`` (docs/core.md §8)
against ``prepare_desired`` of the whole pool, and ``json.dumps`` of the same devices, in the
same run. Planning afterwards is the same for both (``one_change`` of test_core.py).

Run: ``.venv/bin/pytest benches/test_device_edits.py --benchmark-enable``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from test_core import DRIVER, MAX_SLICE_BYTES, gpu, load_core

DEVICES = 100_000


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


@pytest.mark.parametrize("what", ["prepare_desired_rust", "json_dumps"])
def test_whole_pool_of_100k(benchmark: Any, what: str) -> None:
    devices = [gpu(i) for i in range(DEVICES)]
    if what == "json_dumps":
        benchmark.pedantic(json.dumps, (devices,), rounds=5, iterations=1, warmup_rounds=1)
        return
    core = load_core("rust")
    benchmark.pedantic(
        core.prepare_desired,
        (DRIVER, _pools(devices), MAX_SLICE_BYTES),
        rounds=5,
        iterations=1,
        warmup_rounds=1,
    )
