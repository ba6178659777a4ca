"""Each device's text held once (docs/core.md §6): a record shares the desired state's text
where the two are byte-equal and keeps its own where the server or another client changed
the device, and sharing never changes a plan.

The oracle for "equal" is the pure-Python core's canonical text, compared as strings; the Rust
core's table is read through ``_core.held_texts()``, which counts each distinct text once.
"""

from __future__ import annotations

import gc
import itertools
import json
from typing import Any

from core_helpers import DRIVER, OWNER, pool
from hypothesis import given, settings
from hypothesis import strategies as st

from resourceslice import _core, _pycore

CORES = (("python", _pycore), ("rust", _core))
_runs = itertools.count()

#: What happens to a stored device between our write and our next read of it.
_EDITS = (
    "none",
    "time",  # the server filled in a taint's time (desired has none)
    "dropped",  # a feature gate off: the server dropped the taints
    "quantity",  # the same quantity in another format: an equal device, another text
    "attribute",  # another client changed an attribute value
    "labels",  # another client added labels: no device changed
)

_device = st.builds(
    lambda i, mem, tainted: {
        "name": f"d{i}",
        "attributes": {"index": {"int": i}},
        "capacity": {"mem": {"value": mem}},
        **({"taints": [{"key": "k", "effect": "NoSchedule"}]} if tainted else {}),
    },
    st.integers(0, 300),
    st.sampled_from(["1Gi", "1024Mi", "500m"]),
    st.booleans(),
)
_devices = st.lists(_device, min_size=1, max_size=150).map(
    lambda ds: list({d["name"]: d for d in ds}.values())
)


def _edit(obj: dict[str, Any], edit: str, every: int) -> None:
    """``edit`` applied to every ``every``-th device of the stored slice ``obj``."""
    if edit == "labels":
        obj["metadata"]["labels"] = {"team": "other"}
    for device in obj["spec"].get("devices", [])[::every]:
        if edit == "time":
            for taint in device.get("taints", []):
                taint["timeAdded"] = "2026-03-04T05:06:07Z"
        elif edit == "dropped":
            device.pop("taints", None)
        elif edit == "quantity" and device["capacity"]["mem"]["value"] == "1Gi":
            device["capacity"]["mem"]["value"] = "1073741824"
        elif edit == "attribute":
            device["attributes"]["index"] = {"int": -1}


def _summary(plan: Any) -> tuple[Any, ...]:
    return (plan.generation, plan.deletes, plan.writes, plan.updates, plan.creates)


def _read_back(bodies: list[bytes], edit: str, every: int, core: Any) -> list[Any]:
    """The slices ``bodies`` created, as the server holds them after ``edit``, read back (a
    relist or a watch event)."""
    records = []
    for n, body in enumerate(bodies):
        obj = json.loads(body)
        obj["metadata"]["uid"] = f"uid-{n}"
        obj["metadata"]["resourceVersion"] = str(n + 1)
        for device in obj["spec"].get("devices", []):
            for taint in device.get("taints", []):
                taint["timeAdded"] = "2026-01-02T03:04:05Z"
        _edit(obj, edit, every)
        records.append(core.decode_slice(json.dumps(obj).encode()))
    return records


@settings(max_examples=60, deadline=None)
@given(_devices, st.sampled_from(_EDITS), st.integers(1, 4), st.booleans())
def test_records_share_equal_texts_and_plan_as_before(
    devices: list[dict[str, Any]], edit: str, every: int, records_first: bool
) -> None:
    # A run's own attribute: no text here is held by anything outside the example.
    run = next(_runs)
    for d in devices:
        d["attributes"]["run"] = {"int": run}
    pools = {"p": pool(devices, allNodes=True)}
    reference, errors = _pycore.prepare_desired(DRIVER, pools, 1 << 20)
    assert errors == []
    bodies = _pycore.plan_pool(reference, "p", [], OWNER, None).creates
    gc.collect()
    before = _core.held_texts()[0]

    # Either side may come first: a relist before update(), or update() before the watch.
    stored = {"python": _read_back(bodies, edit, every, _pycore)}
    if records_first:
        stored["rust"] = _read_back(bodies, edit, every, _core)
    desired = {label: core.prepare_desired(DRIVER, pools, 1 << 20)[0] for label, core in CORES}
    if not records_first:
        stored["rust"] = _read_back(bodies, edit, every, _core)

    # The oracle: which stored texts equal a desired one, by the pure-Python core's strings.
    wanted_texts = {d.json for d in reference._state.pools["p"].devices}
    stored_texts = {t for r in stored["python"] for t in r.device_jsons}
    assert _core.held_texts()[0] - before == len(wanted_texts | stored_texts)
    if edit in ("none", "labels") and not any("taints" in d for d in devices):
        assert stored_texts == wanted_texts  # nothing changed: every text is shared

    # Sharing changes no plan: both cores plan alike from the stored records.
    plans = {
        label: core.plan_pool(desired[label], "p", stored[label], OWNER, None)
        for label, core in CORES
    }
    assert _summary(plans["python"]) == _summary(plans["rust"])
    if edit in ("none", "time", "quantity", "labels"):
        assert plans["rust"].writes == []
    elif edit == "attribute":
        assert plans["rust"].writes != []

    # A record outlives the desired state it shared with, and shares with the next one.
    del desired, plans
    gc.collect()
    assert _core.held_texts()[0] - before == len(stored_texts)
    again = {
        label: core.plan_pool(
            core.prepare_desired(DRIVER, pools, 1 << 20)[0], "p", stored[label], OWNER, None
        )
        for label, core in CORES
    }
    assert _summary(again["python"]) == _summary(again["rust"])
    del stored, again
    gc.collect()
    assert _core.held_texts()[0] == before
