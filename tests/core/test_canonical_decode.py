"""Canonical JSON, semantic equality and decoding (docs/core.md §1, §6) on both cores."""

from __future__ import annotations

import json
from functools import partial
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


def _item(name: str, devices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    """A list item as the apiserver serialises it, with fields the decoder must skip."""
    return {
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "resourceVersion": f"1{len(name)}",
            "creationTimestamp": "2026-01-02T03:04:05Z",
            "labels": {"a": "b"},
            "managedFields": [{"manager": "m", "fieldsV1": {"f:spec": {".": {}}}}],
        },
        "spec": {
            "driver": DRIVER,
            "pool": {"name": "p", "generation": 2, "resourceSliceCount": 3},
            "nodeName": "n1",
            "devices": devices,
            "futureField": [1, {"x": None}],
        },
        "status": {"unknown": True},
        **extra,
    }


def _fields(rec: Any) -> tuple[Any, ...]:
    return (
        rec.name,
        rec.uid,
        rec.resource_version,
        rec.driver,
        rec.pool,
        rec.generation,
        rec.resource_slice_count,
        rec.node_name,
        rec.device_names,
    )


def _list(items: Any, **members: Any) -> bytes:
    return json.dumps(
        {
            "kind": "ResourceSliceList",
            "apiVersion": "resource.k8s.io/v1",
            "metadata": {"resourceVersion": "99", "continue": ""},
            "items": items,
            **members,
        }
    ).encode()


def test_decode_list_equals_decoding_each_item(core: ModuleType) -> None:
    devices = [
        {"name": "plain"},
        {
            "name": "full",
            "attributes": {"index": {"int": 3}, "model": {"string": "é\u2028<&>"}},
            "capacity": {"memory": {"value": "1Gi"}, "cores": {"value": 8}},
            "taints": [{"key": "k", "effect": "NoSchedule", "timeAdded": "2026-01-02T03:04:05Z"}],
            "unknownField": {"nested": [1.5, None, True]},
        },
    ]
    items = [
        _item(f"s-{i}", [{**d, "name": f"{d['name']}-{i}"} for d in devices]) for i in range(300)
    ]
    items += [
        _item("empty", []),
        _item("no-devices", []) | {"spec": {"pool": {"name": "q"}}},
        _item("shared", [], kind="ResourceSlice")
        | {
            "spec": {
                "driver": DRIVER,
                "pool": {"name": "p"},
                "sharedCounters": [{"name": "c", "counters": {"m": {"value": "1Gi"}}}],
            }
        },
    ]
    version, records = core.decode_list(_list(items))
    singles = [core.decode_slice(json.dumps(item).encode()) for item in items]
    events = [
        core.decode_watch_event(json.dumps({"type": "ADDED", "object": item}).encode())[1]
        for item in items
    ]
    assert version == "99"
    for others in (singles, events):
        assert [_fields(r) for r in records] == [_fields(s) for s in others]
        assert all(r.same_content(s) and s.same_content(r) for r, s in zip(records, others))
    assert records[0].device_names == ["plain-0", "full-0"]
    if hasattr(records[0], "device_jsons"):  # the pure-Python core shows its canonical JSON
        assert [(r.device_jsons, r.header) for r in records] == [
            (s.device_jsons, s.header) for s in singles
        ]


_SHAPES = [
    (_list([]), "99", []),
    (_list(None), "99", []),
    (b'{"kind": "ResourceSliceList"}', "", []),
    (b"{}", "", []),
    (b'{"metadata": null, "items": []}', "", []),
    (b'{"metadata": {"resourceVersion": 5}}', "", []),
    # Whitespace anywhere, escaped keys, unknown members before and after the items.
    (
        b' \n{ "extra" : [ {"items": 1} ] , "it\\u0065ms" :\t[ '
        + json.dumps(_item("a", [{"name": "d"}])).encode()
        + b' ] , "metadata" : { "resourceVersion" : "7" } , "more": {"a": [[]]} }\r\n',
        "7",
        ["a"],
    ),
    # A repeated member: the last one counts, as json.loads and a JSON object keep it.
    (
        b'{"items": [null], "metadata": {"resourceVersion": "1"}, "items": '
        + json.dumps([_item("b", [])]).encode()
        + b', "metadata": {"resourceVersion": "2"}}',
        "2",
        ["b"],
    ),
    (b'{"kind": "Nope", "kind": "ResourceSliceList"}', "", []),
]


@pytest.mark.parametrize(("data", "version", "names"), _SHAPES)
def test_decode_list_shapes(core: ModuleType, data: bytes, version: str, names: list[str]) -> None:
    got_version, records = core.decode_list(data)
    assert (got_version, [r.name for r in records]) == (version, names)


_PROBLEMS = [
    (b"[]", "a ResourceSliceList must be a JSON object"),
    (b"null", "a ResourceSliceList must be a JSON object"),
    (b'"x"', "a ResourceSliceList must be a JSON object"),
    (b'{"kind": "ResourceSlice"}', 'expected kind ResourceSliceList, got "ResourceSlice"'),
    (b'{"kind": 3}', "expected kind ResourceSliceList, got 3"),
    (b'{"items": 3}', "items is not a list"),
    (b'{"items": "x"}', "items is not a list"),
    (b'{"items": {"a": [1]}}', "items is not a list"),
    (b'{"items": [null]}', "a ResourceSlice must be a JSON object"),
    (b'{"items": [{"metadata": {"name": "x"}}, null]}', "x: missing spec"),
    # The kind is checked before the items, whatever their order in the document.
    (b'{"items": [null], "kind": "Pod"}', 'expected kind ResourceSliceList, got "Pod"'),
    # A syntax error anywhere comes first, even after a bad item.
    (b'{"items": [null, {"a": 1,}]}', "not a JSON document"),
    (b'{"items": [null], "x": [1 2]}', "not a JSON document"),
    (b"[1, 2] x", "not a JSON document"),
    (b'{"items": []} {}', "not a JSON document"),
    (b'{"items": [],}', "not a JSON document"),
    (b'{"items": [{"metadata": {}},]}', "not a JSON document"),
    (b'{"items" [] }', "not a JSON document"),
    (b'{"items": [] "kind": "x"}', "not a JSON document"),
    (b'{"items": [], 1: 2}', "not a JSON document"),
    (b'{"items": ["\xff"]}', "not a JSON document"),
    (b'{"items": [', "not a JSON document"),
    (b"", "not a JSON document"),
]


@pytest.mark.parametrize(("data", "message"), _PROBLEMS)
def test_decode_list_problems(core: ModuleType, data: bytes, message: str) -> None:
    with pytest.raises(ValueError) as info:
        core.decode_list(data)
    assert str(info.value).startswith(message)


def _outcome(decode: Any) -> tuple[Any, ...]:
    """What a decode gave: its fields, or its error (syntax errors alike whatever the text)."""
    try:
        version, records = decode()
    except ValueError as exc:
        message = str(exc)
        return ("error", "not a JSON document" if "not a JSON document" in message else message)
    return ("ok", version, [_fields(r) for r in records])


@pytest.mark.parametrize("size", [1, 2, 3, 7, 64, 1 << 20])
def test_decode_list_chunks_gives_what_decode_list_gives(core: ModuleType, size: int) -> None:
    documents = [data for data, *_ in _SHAPES + _PROBLEMS]
    documents += [
        _list([_item(f"s-{i}", [{"name": "d", "x": '"]}[{,'}]) for i in range(40)]),
        _list([_item("a", []), None, _item("b", [])]),
        b'{"items": [{"metadata": {"name": "x"}}, 3, {"a": "\\u005d]"}], "kind": "Pod"}',
        b'{"items": [] , "items" : 3}',
        b'{"items": [{"metadata": {}}], "items": null}',
        b'{"items": [1,,2]}',
        b'{"items": [1 2]}',
        b'{"items": [1]]}',
        b'{"items": [1}',
        b'{"items": [[1, "]"], {"a": "\\"}]}',
        b'{"items": [',
        b'{"items": [1',
        b'{"items": [1,',
        b'{"items"',
        b'{"items":',
        b"{",
    ]
    for data in documents:
        chunks = [data[i : i + size] for i in range(0, len(data), size)]
        assert _outcome(partial(core.decode_list_chunks, iter(chunks))) == _outcome(
            partial(core.decode_list, data)
        ), data
