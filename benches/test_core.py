"""Core benchmarks: the Rust core against the pure-Python one, on the same inputs in the same run.

Each planning scenario is what the controller does on a sync: ``prepare_desired`` of the new
desired devices, then ``plan_pool`` against the records of the state already published.
``test_decode_relist`` decodes a relist (1,000 slices x 128 devices) into records, against the
``kubernetes`` client deserialising the same bytes into model objects; its ``extra_info`` has
the throughput in MB of JSON per second and the peak RSS increase of one decode over the
JSON's size.

Run: ``.venv/bin/pytest benches/test_core.py --benchmark-enable``.
"""

from __future__ import annotations

import importlib
import inspect
import json
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest

from benchsize import sized
from test_load import PeakRss

DRIVER = "gpu.example.com"
POOL = "node-1"
OWNER = ("v1", "Node", POOL, "3f0c7a52-2b61-4c9e-9d0a-6c1f1b8f2e11")
MAX_SLICE_BYTES = 1 << 20
SIZES = sized({"1k": 1_000, "10k": 10_000, "100k": 100_000}, {"1k": 1_000})

CoreFn = Callable[[], Any]


def load_core(name: str) -> ModuleType:
    module = importlib.import_module(
        "resourceslice._core" if name == "rust" else "resourceslice._pycore"
    )
    if not hasattr(module, "plan_pool"):
        pytest.skip(f"the {name} core is not available")
    return module


def gpu(i: int, revision: int = 0) -> dict[str, Any]:
    """A GPU-like device: 8 attributes, 2 capacities."""
    return {
        "name": f"gpu-{i}",
        "attributes": {
            "index": {"int": i},
            "minor": {"int": i % 8},
            "uuid": {"string": f"GPU-{i:08x}-5d1e-4c2b-9a7f-{revision:012x}"},
            "productName": {"string": "NVIDIA H100 80GB HBM3"},
            "architecture": {"string": "Hopper"},
            "brand": {"string": "Nvidia"},
            "driverVersion": {"version": "560.35.3"},
            "gpu.example.com/cudaComputeCapability": {"version": "9.0.0"},
        },
        "capacity": {"memory": {"value": "80Gi"}, "multiprocessors": {"value": "132"}},
    }


def pools(devices: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        POOL: {
            "devices": devices,
            "slices": None,
            "nodeSelector": None,
            "allNodes": False,
            "nodeName": POOL,
            "generation": 0,
        }
    }


def stored(core: ModuleType, bodies: list[bytes], version: int) -> list[Any]:
    """Records of the objects the apiserver would hold after these writes."""
    records = []
    for body in bodies:
        obj = json.loads(body)
        meta = obj["metadata"]
        meta.update(uid=f"uid-{meta['name']}", resourceVersion=str(version))
        records.append(core.decode_slice(json.dumps(obj).encode()))
    return records


def publish(core: ModuleType, devices: list[dict[str, Any]]) -> list[Any]:
    """The records after a first publish of ``devices``."""
    desired, errors = core.prepare_desired(DRIVER, pools(devices), MAX_SLICE_BYTES)
    assert not errors
    plan = core.plan_pool(desired, POOL, [], OWNER, POOL)
    return stored(core, plan.creates, 1)


def rounds(core: str, size: str) -> int:
    if size == "100k":
        return 2 if core == "python" else 5
    return 5 if core == "python" else 20


def run(benchmark: Any, core_name: str, size: str, fn: CoreFn) -> Any:
    return benchmark.pedantic(fn, rounds=rounds(core_name, size), iterations=1, warmup_rounds=1)


CORES = ["rust", "python"]


@pytest.fixture(params=CORES)
def core_name(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture(params=list(SIZES))
def size(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


def scenario(
    core: ModuleType, old: list[dict[str, Any]] | None, new: list[dict[str, Any]]
) -> CoreFn:
    records = publish(core, old) if old is not None else []

    def sync() -> Any:
        desired, errors = core.prepare_desired(DRIVER, pools(new), MAX_SLICE_BYTES)
        assert not errors
        return core.plan_pool(desired, POOL, records, OWNER, POOL)

    return sync


def test_first_publish(benchmark: Any, core_name: str, size: str) -> None:
    n = SIZES[size]
    plan = run(
        benchmark, core_name, size, scenario(load_core(core_name), None, [gpu(i) for i in range(n)])
    )
    assert len(plan.creates) == plan.slice_count == -(-n // 128)


def test_no_change(benchmark: Any, core_name: str, size: str) -> None:
    devices = [gpu(i) for i in range(SIZES[size])]
    plan = run(benchmark, core_name, size, scenario(load_core(core_name), devices, devices))
    assert (plan.deletes, plan.updates, plan.creates) == ([], [], [])


def test_one_change(benchmark: Any, core_name: str, size: str) -> None:
    n = SIZES[size]
    old = [gpu(i) for i in range(n)]
    new = [gpu(i, revision=1 if i == n // 2 else 0) for i in range(n)]
    plan = run(benchmark, core_name, size, scenario(load_core(core_name), old, new))
    assert (len(plan.updates), plan.creates, plan.deletes) == (1, [], [])


def test_ten_percent_change(benchmark: Any, core_name: str, size: str) -> None:
    n = SIZES[size]
    old = [gpu(i) for i in range(n)]
    new = [gpu(i, revision=1 if i % 10 == 0 else 0) for i in range(n)]
    plan = run(benchmark, core_name, size, scenario(load_core(core_name), old, new))
    # Every slice changes in place, each update isolated (docs/core.md): no generation bump.
    assert len(plan.updates) == plan.slice_count and plan.generation == 1


RELIST_SLICES = sized(1_000, 20)
RELIST_DEVICES = 128


def relist_bytes() -> bytes:
    """A ResourceSliceList as the apiserver serialises it (Go field order, server metadata)."""
    items = []
    for s in range(RELIST_SLICES):
        name = f"{s:05x}-{DRIVER}-node-{s}-x7k2q"
        items.append(
            {
                "metadata": {
                    "name": name,
                    "generateName": name[:-5],
                    "uid": f"6b1f{s:08x}-0000-4000-8000-000000000000",
                    "resourceVersion": str(1000 + s),
                    "creationTimestamp": "2025-01-01T00:00:00Z",
                    "ownerReferences": [
                        {
                            "apiVersion": "v1",
                            "kind": "Node",
                            "name": f"node-{s}",
                            "uid": f"9c2e{s:08x}-0000-4000-8000-000000000000",
                            "controller": True,
                        }
                    ],
                },
                "spec": {
                    "driver": DRIVER,
                    "pool": {"name": f"node-{s}", "generation": 1, "resourceSliceCount": 1},
                    "nodeName": f"node-{s}",
                    "devices": [gpu(s * RELIST_DEVICES + d) for d in range(RELIST_DEVICES)],
                },
            }
        )
    data = {
        "kind": "ResourceSliceList",
        "apiVersion": "resource.k8s.io/v1",
        "metadata": {"resourceVersion": "123456"},
        "items": items,
    }
    return json.dumps(data, separators=(",", ":")).encode()


@pytest.fixture(scope="module")
def relist() -> bytes:
    return relist_bytes()


class _Response:
    """What ``ApiClient.deserialize`` of kubernetes < 35 reads: the raw body as ``.data``."""

    def __init__(self, data: bytes) -> None:
        self.data = data


def client_deserializer() -> Callable[[bytes], Any]:
    """The client's deserialisation of a ``V1ResourceSliceList`` body, in either signature."""
    from kubernetes.client import ApiClient

    client = ApiClient()
    if "response_text" in inspect.signature(client.deserialize).parameters:
        return lambda data: client.deserialize(
            data.decode(), "V1ResourceSliceList", "application/json"
        )
    return lambda data: client.deserialize(_Response(data), "V1ResourceSliceList")


@pytest.mark.parametrize("decoder", ["rust", "python", "client"])
def test_decode_relist(benchmark: Any, decoder: str, relist: bytes) -> None:
    if decoder == "client":
        deserialize = client_deserializer()

        def decode() -> int:
            result = deserialize(relist)
            return sum(len(item.spec.devices) for item in result.items)
    else:
        core = load_core(decoder)

        def decode() -> int:
            _, records = core.decode_list(relist)
            return sum(len(r.device_names) for r in records)

    total = benchmark.pedantic(decode, rounds=3, iterations=1, warmup_rounds=0)
    assert total == RELIST_SLICES * RELIST_DEVICES
    if benchmark.stats is None:  # --benchmark-disable
        return
    mb_per_s = len(relist) / 1e6 / benchmark.stats.stats.median
    benchmark.extra_info["json_mb_per_s"] = round(mb_per_s, 1)
    # The records of the last round are gone: this is what one decode needs on top.
    with PeakRss() as rss:
        decode()
    benchmark.extra_info["peak_rss_over_json"] = round(rss.increase / len(relist), 2)
    print(
        f"\ndecode ({decoder}): {mb_per_s:.0f} MB/s of JSON, peak RSS "
        f"+{rss.increase / 1e6:.0f} MB ({rss.increase / len(relist):.2f}x the JSON)"
    )
