"""Canonical JSON, semantic equality and decoding (docs/core.md §1, §6) on both cores."""

from __future__ import annotations

import json
from types import ModuleType
from typing import Any

import pytest
from core_helpers import DRIVER, apply, pool, prepare

_STORED_META = {"name": "x", "uid": "u", "resourceVersion": "7"}


def _stored(devices: list[dict[str, Any]], **spec: Any) -> bytes:
    return json.dumps(
        {
            "kind": "ResourceSlice",
            "metadata": _STORED_META,
            "spec": {
                "driver": DRIVER,
                "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
                "allNodes": True,
                "devices": devices,
                **spec,
            },
        }
    ).encode()


def _same(core: ModuleType, desired: dict[str, Any], stored: dict[str, Any]) -> bool:
    return bool(
        core.decode_slice(_stored([desired])).same_content(core.decode_slice(_stored([stored])))
    )


def test_body_is_canonical_json(core: ModuleType) -> None:
    device = {
        "name": "é",
        "z": {"b": None, "a": [], "c": {}},
        "k": False,
        "s": 'a\x1f"\n',
        "capacity": {"m": {"value": 1024}},
    }
    desired, errors = core.prepare_desired(DRIVER, {"p": pool([{**device, "name": "d"}])}, 1 << 20)
    assert errors == []
    body = core.plan_pool(desired, "p", [], None, None).creates[0].decode()
    assert '{"capacity":{"m":{"value":"1024"}},"k":false,"name":"d","s":"a\\u001f\\"\\n"}' in body
    assert body == json.dumps(
        json.loads(body), sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )


def test_quantities_compare_by_value(core: ModuleType) -> None:
    assert _same(
        core,
        {"name": "a", "capacity": {"m": {"value": "1Gi"}}},
        {"name": "a", "capacity": {"m": {"value": "1024Mi"}}},
    )
    assert not _same(
        core,
        {"name": "a", "capacity": {"m": {"value": "1Gi"}}},
        {"name": "a", "capacity": {"m": {"value": "1G"}}},
    )


def test_absent_equals_empty(core: ModuleType) -> None:
    assert _same(core, {"name": "a"}, {"name": "a", "attributes": {}, "taints": []})


def test_server_set_time_added_is_tolerated(core: ModuleType) -> None:
    untimed = {"name": "a", "taints": [{"key": "k", "effect": "NoSchedule"}]}
    timed = {
        "name": "a",
        "taints": [{"key": "k", "effect": "NoSchedule", "timeAdded": "2026-01-02T03:04:05Z"}],
    }
    assert _same(core, untimed, timed)
    assert not _same(core, timed, untimed)


def test_time_added_is_normalised_and_preserved(core: ModuleType) -> None:
    taint = {"key": "k", "effect": "NoExecute", "timeAdded": "2026-01-02T05:04:05.9+02:00"}
    desired = prepare(core, {"p": pool([{"name": "a", "taints": [taint]}])})
    body = json.loads(core.plan_pool(desired, "p", [], None, None).creates[0])
    assert body["spec"]["devices"][0]["taints"][0]["timeAdded"] == "2026-01-02T03:04:05Z"
    # A taint without time keeps the server's when the device is rewritten.
    untimed = {"name": "a", "taints": [{"key": "k", "effect": "NoExecute"}]}
    records = apply(
        core, core.plan_pool(prepare(core, {"p": pool([untimed])}), "p", [], None, None), []
    )
    changed = prepare(core, {"p": pool([{**untimed, "attributes": {"x": {"int": 1}}}])})
    ((_, update),) = core.plan_pool(changed, "p", records, None, None).updates
    taints = json.loads(update)["spec"]["devices"][0]["taints"]
    assert taints == [{"key": "k", "effect": "NoExecute", "timeAdded": "2026-01-02T03:04:05Z"}]


def test_decode_slice_fields(core: ModuleType) -> None:
    rec = core.decode_slice(_stored([{"name": "a"}, {"name": "b"}], nodeName="n1"))
    assert (rec.name, rec.uid, rec.resource_version, rec.driver, rec.pool) == (
        "x",
        "u",
        "7",
        DRIVER,
        "p",
    )
    assert (rec.generation, rec.resource_slice_count, rec.node_name) == (1, 1, "n1")
    assert rec.device_names == ["a", "b"]


def test_decode_list_and_events(core: ModuleType) -> None:
    item = json.loads(_stored([]))
    version, records = core.decode_list(
        json.dumps(
            {"kind": "ResourceSliceList", "metadata": {"resourceVersion": "42"}, "items": [item]}
        ).encode()
    )
    assert version == "42" and [r.name for r in records] == ["x"]
    kind, rec, rv = core.decode_watch_event(json.dumps({"type": "ADDED", "object": item}).encode())
    assert (kind, rec.name, rv) == ("ADDED", "x", "7")
    assert core.decode_watch_event(
        json.dumps({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "50"}}}).encode()
    ) == ("BOOKMARK", None, "50")
    kind, rec, status = core.decode_watch_event(
        json.dumps(
            {"type": "ERROR", "object": {"kind": "Status", "code": 410, "details": {}}}
        ).encode()
    )
    assert (kind, rec, json.loads(status)) == ("ERROR", None, {"kind": "Status", "code": 410})


@pytest.mark.parametrize(
    "data",
    [
        b"not json",
        b"[]",
        b'{"kind": "Pod", "metadata": {"name": "x"}}',
        b'{"metadata": {}}',
        b'{"metadata": {"name": "x"}}',
        b'{"metadata": {"name": "x"}, "spec": {}}',
        b'{"metadata": {"name": "x"}, "spec": {"pool": {}}}',
        b'{"metadata": {"name": "x"}, "spec": {"pool": {"name": "p", "generation": "1"}}}',
    ],
)
def test_malformed_slices_raise(core: ModuleType, data: bytes) -> None:
    with pytest.raises(ValueError):
        core.decode_slice(data)


def test_malformed_events_raise(core: ModuleType) -> None:
    for data in (
        b'{"type": "ADDED"}',
        b'{"object": {}}',
        b'{"type": "NOPE", "object": {}}',
        b'{"items": 3}',
    ):
        with pytest.raises(ValueError):
            core.decode_watch_event(data)
    with pytest.raises(ValueError):
        core.decode_list(b'{"items": 3}')
