"""How long another Python thread is stalled while the core works on a 100,000-device pool.

A thread that wakes every millisecond records the longest gap between two of its wake-ups
during the call (the driver's gRPC threads, the controller's informer and worker are such
threads). Two references: ``idle``, the caller only sleeps (what the machine gives at best),
and ``python_loop``, the caller runs Python code, which the interpreter switches away from
when another thread has waited ``sys.getswitchinterval()`` (5 ms): what the pure-Python core
gives, and the best the core's pauses can give. Rust core.

Run: ``.venv/bin/pytest benches/test_gil.py --benchmark-enable -s``.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any

import pytest

import resourceslice as rs
from benchsize import sized
from resourceslice import _core as core
from test_core import DRIVER, MAX_SLICE_BYTES, OWNER, POOL, gpu, pools, relist_bytes

SIZE = sized(100_000, 1_000)
#: What the controller renders per plan_pool call (a window of write bodies).
BODY_BYTES = 1 << 20


class Ticker:
    """A thread waking every millisecond; ``worst`` is its longest gap, in seconds."""

    def __init__(self) -> None:
        self.worst = 0.0
        self._stop = threading.Event()
        self._ticked = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        last = time.perf_counter()
        while not self._stop.is_set():
            time.sleep(0.001)
            now = time.perf_counter()
            self.worst = max(self.worst, now - last)
            last = now
            self._ticked.set()

    def __enter__(self) -> Ticker:
        self._thread.start()
        self._ticked.wait()
        self.worst = 0.0
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join()


def busy() -> None:
    end = time.perf_counter() + 0.3
    while time.perf_counter() < end:
        pass


def scenarios() -> dict[str, Callable[[], Any]]:
    devices = [gpu(i) for i in range(SIZE)]
    desired, errors = core.prepare_desired(DRIVER, pools(devices), MAX_SLICE_BYTES)
    assert not errors
    relist = relist_bytes()
    ctrl = rs.start_controller(None, driver=DRIVER, resources=rs.DriverResources(pools={}))
    resources = rs.DriverResources(pools={POOL: rs.Pool(devices=devices, all_nodes=True)})
    # The 1.3 million dicts of the device list make a full garbage collection take about
    # 0.2 s, a stall of its own whoever triggers it; out of the collector's way (as a driver
    # with a large static device list may put them too), the figures are the core's.
    gc.freeze()
    return {
        "idle": lambda: time.sleep(0.3),
        "python_loop": busy,
        "update": lambda: ctrl.update(resources),
        "prepare_desired": lambda: core.prepare_desired(DRIVER, pools(devices), MAX_SLICE_BYTES),
        "non_plain": lambda: core.non_plain(devices),
        "plan_pool": lambda: core.plan_pool(desired, POOL, [], OWNER, POOL, 0, BODY_BYTES),
        "decode_list": lambda: core.decode_list(relist),
        "decode_list_chunks": lambda: core.decode_list_chunks(
            relist[i : i + (1 << 16)] for i in range(0, len(relist), 1 << 16)
        ),
    }


@pytest.fixture(scope="module")
def calls() -> Iterator[dict[str, Callable[[], Any]]]:
    yield scenarios()
    gc.unfreeze()


@pytest.mark.parametrize(
    "name",
    [
        "idle",
        "python_loop",
        "update",
        "prepare_desired",
        "non_plain",
        "plan_pool",
        "decode_list",
        "decode_list_chunks",
    ],
)
def test_worst_stall_of_another_thread(
    benchmark: Any, calls: dict[str, Callable[[], Any]], name: str
) -> None:
    gaps: list[float] = []

    def run() -> None:
        with Ticker() as ticker:
            calls[name]()
        gaps.append(ticker.worst)

    benchmark.pedantic(run, rounds=5, iterations=1)
    benchmark.extra_info["worst_gap_ms"] = round(max(gaps) * 1000, 1)
    benchmark.extra_info["gaps_ms"] = [round(g * 1000, 1) for g in gaps]
    print(f"\n{name}: worst gap per round (ms) {benchmark.extra_info['gaps_ms']}")
