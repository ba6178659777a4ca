"""Both cores against the apiserver's own ResourceSlice validation (tests/vectors/slices.json).

Each vector is a pool in the plain shape the cores take, with the verdict of Kubernetes'
validation code on every slice the controller publishes for it (see
tests/vectors/slicegen). Both cores must accept every pool the server accepts, and refuse
every other with, for each server error, an error at the same path (``our_path``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from core_helpers import MAX_BYTES

from resourceslice import _core, _pycore

ROOT = Path(__file__).resolve().parents[2]
VECTORS = json.loads((ROOT / "tests/vectors/slices.json").read_text())["vectors"]

#: The members of a device or slice whose values are maps: a ``[x]`` after them is a key.
MAP_FIELDS = frozenset({"attributes", "capacity", "counters", "nodeAllocatableResources"})
#: Slice fields the controller takes from the pool, not from the slice.
POOL_FIELDS = frozenset({"nodeName", "nodeSelector", "allNodes"})
_SEGMENT = re.compile(r"\.([A-Za-z]+)|\[([^\]]*)\]")


def _quote(key: str) -> str:
    return json.dumps(key, ensure_ascii=False)


def our_path(pool: str, slice_index: int, server_path: str) -> str:
    """The path our cores report for the server's ``server_path`` on slice ``slice_index``
    of ``pool``.

    ``spec.driver`` is our ``driver``; ``spec.pool.name`` is the pool (our pool-name errors
    are at ``pools["<name>"]``); ``spec.pool.generation`` and the node selection the pool
    gives every slice (``nodeName``, a Node owner's name, ``nodeSelector``, ``allNodes``)
    are the pool's members; everything else under ``spec``, and ``spec`` itself, is the
    slice: ``pools["<name>"].slices[<i>]``. Map keys are quoted as ours are.
    """
    base = f"pools[{_quote(pool)}]"
    if server_path == "spec.driver":
        return "driver"
    if server_path == "spec.pool.name":
        return base
    if server_path == "spec.pool.generation":
        return f"{base}.generation"
    assert server_path.startswith("spec"), server_path
    rest = server_path[len("spec") :]
    segments = _SEGMENT.findall(rest)
    out = base if segments and segments[0][0] in POOL_FIELDS else f"{base}.slices[{slice_index}]"
    previous = ""
    for name, index in segments:
        if name:
            out += f".{name}"
            previous = name
        elif previous in MAP_FIELDS:
            out += f"[{_quote(index)}]"
            previous = ""
        else:
            out += f"[{index}]"
            previous = ""
    return out


def _matches(ours: str, server: str) -> bool:
    """``ours`` is at ``server``, or names the key of the map the server reports at (the
    server reports a bad attribute, capacity or counter name at the map). A key the server
    truncated in the middle (``abc...xyz``) matches the key it was cut from."""
    if ours == server:
        return True
    rest = ours[len(server) :] if ours.startswith(server) else ""
    if re.fullmatch(r'\["([^"\\]|\\.)*"\]', rest):
        return True
    cut = re.fullmatch(r'(.*\[")([^"]*)\.\.\.([^"]*)("\].*)', server)
    if cut is not None:
        head, start, end, tail = cut.groups()
        m = re.fullmatch(re.escape(head) + r'([^"]*)' + re.escape(tail), ours)
        return m is not None and m.group(1).startswith(start) and m.group(1).endswith(end)
    return False


def _paths(errors: list[str]) -> list[str]:
    return [e.split(": ", 1)[0] for e in errors]


@pytest.mark.parametrize("vector", VECTORS, ids=[v["name"] for v in VECTORS])
def test_vector(core: ModuleType, vector: dict[str, Any]) -> None:
    desired, errors = core.prepare_desired(vector["driver"], vector["pools"], MAX_BYTES)
    assert (desired is None) == bool(errors)
    if vector["valid"]:
        assert errors == [], "the apiserver accepts this pool"
        return
    assert errors, f"the apiserver refuses this pool: {vector['errors']}"
    (pool,) = vector["pools"]
    ours = _paths(errors)
    missing = [
        (want, e)
        for e in vector["errors"]
        if not any(_matches(p, want := our_path(pool, e["slice"], e["path"])) for p in ours)
    ]
    assert not missing, f"no error at the server's path; ours: {errors}"


def _as_flat(vector: dict[str, Any]) -> dict[str, Any] | None:
    """The vector's one slice as a flat ``devices`` pool, when the packer would publish it as
    that same slice: no slice-level fields, no counters, at most 64 devices."""
    ((name, pool),) = vector["pools"].items()
    if len(pool["slices"]) != 1:
        return None
    (s,) = pool["slices"]
    devices = s["devices"] or []
    plain = all(
        isinstance(d, dict) and not d.get("consumesCounters") and not d.get("taints")
        for d in devices
    )
    fields = ("sharedCounters", "partitionTypeAttribute", "skipNodeOperations")
    extra = [k for k in fields if s[k] not in (None, [])]
    if extra or s["perDeviceNodeSelection"] or not plain or len(devices) > 64:
        return None
    return {name: {**pool, "slices": None, "devices": devices}}


FLAT = [v for v in VECTORS if _as_flat(v) is not None]


@pytest.mark.parametrize("vector", FLAT, ids=[v["name"] for v in FLAT])
def test_vector_as_flat_pool(core: ModuleType, vector: dict[str, Any]) -> None:
    """The same verdict and paths for the devices as a flat pool (the packer's input)."""
    pools = _as_flat(vector)
    assert pools is not None
    _, errors = core.prepare_desired(vector["driver"], pools, MAX_BYTES)
    if vector["valid"]:
        assert errors == []
        return
    (pool,) = pools
    slice_path = f"pools[{_quote(pool)}].slices[0]"
    ours = [p.replace(f"pools[{_quote(pool)}]", slice_path, 1) for p in _paths(errors)]
    ours += _paths(errors)
    missing = [
        e
        for e in vector["errors"]
        if not any(_matches(p, our_path(pool, e["slice"], e["path"])) for p in ours)
    ]
    assert not missing, f"no error at the server's path; ours: {errors}"


def test_counts() -> None:
    """Thousands of vectors, both verdicts, and the feature gates of the test apiserver."""
    valid = sum(v["valid"] for v in VECTORS)
    assert valid >= 500 and len(VECTORS) - valid >= 1000
    main = (ROOT / "python/resourceslice/testing/apiserver/main.go").read_text()
    block = re.search(r"var sliceFeatureGates = \[\]string\{(.*?)\n\}", main, re.S)
    assert block is not None
    # DynamicResourceAllocation is switched on for the older releases' servers; in 1.37, the
    # release the vectors come from, it is GA and locked on, so it changes no verdict.
    server = set(re.findall(r'"(\w+)"', block.group(1))) - {"DynamicResourceAllocation"}
    generated = set(json.loads((ROOT / "tests/vectors/slices.json").read_text())["featureGates"])
    assert server == generated, "regenerate the vectors with the test apiserver's gates"


@pytest.mark.parametrize(
    ("server", "ours"),
    [
        ("spec", 'pools["p"].slices[2]'),
        ("spec.driver", "driver"),
        ("spec.pool.name", 'pools["p"]'),
        (
            "spec.nodeSelector.nodeSelectorTerms[0].matchFields[1].key",
            'pools["p"].nodeSelector.nodeSelectorTerms[0].matchFields[1].key',
        ),
        (
            "spec.devices[3].attributes[gpu.example.com/x].string",
            'pools["p"].slices[2].devices[3].attributes["gpu.example.com/x"].string',
        ),
        (
            "spec.devices[0].consumesCounters[1].counters[0]",
            'pools["p"].slices[2].devices[0].consumesCounters[1].counters["0"]',
        ),
    ],
)
def test_our_path(server: str, ours: str) -> None:
    assert our_path("p", 2, server) == ours


def test_cores_agree_on_every_vector() -> None:
    """The same errors, word for word and in order, from both cores."""
    for vector in VECTORS:
        args = (vector["driver"], vector["pools"], MAX_BYTES)
        assert _pycore.prepare_desired(*args)[1] == _core.prepare_desired(*args)[1], vector["name"]
