"""Building desired input and "applying" plans the way the apiserver would."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from types import ModuleType, SimpleNamespace
from typing import Any

DRIVER = "gpu.example.com"
MAX_BYTES = 1 << 20
OWNER = ("v1", "Node", "node-1", "uid-node-1")

_names = itertools.count()


def pool(devices: list[dict[str, Any]] | None = None, **kw: Any) -> dict[str, Any]:
    """A plain pool; on node-1 (a Node owner's) unless ``kw`` selects nodes otherwise."""
    selects = {"allNodes", "nodeSelector", "nodeName"} & kw.keys()
    return {
        "devices": devices,
        "slices": None,
        "nodeSelector": None,
        "allNodes": False,
        "nodeName": None if selects else "node-1",
        "generation": 0,
        **kw,
    }


def devices(n: int, start: int = 0, **extra: Any) -> list[dict[str, Any]]:
    return [
        {"name": f"dev-{i}", "attributes": {"index": {"int": i}}, **extra}
        for i in range(start, start + n)
    ]


def prepare(core: ModuleType, pools: dict[str, Any], max_bytes: int = MAX_BYTES) -> Any:
    desired, errors = core.prepare_desired(DRIVER, pools, max_bytes)
    assert errors == []
    return desired


def apply(
    core: ModuleType, plan: Any, existing: list[Any], ids: Iterator[int] = _names
) -> list[Any]:
    """The records after the apiserver carried out ``plan`` on ``existing``; uids and
    resourceVersions come from ``ids``."""
    deleted = {name for name, _, _ in plan.deletes}
    stored = {r.name: r for r in existing if r.name not in deleted}
    for name, body in plan.updates:
        obj = json.loads(body)
        assert obj["metadata"]["resourceVersion"] == stored[name].resource_version
        obj["metadata"]["uid"] = stored[name].uid
        obj["metadata"]["resourceVersion"] = str(next(ids))
        stored[name] = core.decode_slice(json.dumps(obj).encode())
    for body in plan.creates:
        obj = json.loads(body)
        n = next(ids)
        assert obj["metadata"]["name"] not in stored, "the apiserver would answer 409"
        obj["metadata"]["uid"] = f"uid-{n}"
        obj["metadata"]["resourceVersion"] = str(n)
        for device in obj["spec"].get("devices", []):
            for taint in device.get("taints", []):
                taint.setdefault("timeAdded", "2026-01-02T03:04:05Z")
        rec = core.decode_slice(json.dumps(obj).encode())
        stored[rec.name] = rec
    return list(stored.values())


def creating(bodies: list[bytes]) -> SimpleNamespace:
    """A plan of these creates only: a publish cut off after them, for ``apply``."""
    return SimpleNamespace(deletes=[], updates=[], creates=bodies)


def bodies(plan: Any) -> list[dict[str, Any]]:
    return [json.loads(b) for _, b in plan.updates] + [json.loads(b) for b in plan.creates]
