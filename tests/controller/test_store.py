from __future__ import annotations

from typing import Any

from resourceslice.store import SliceStore
from support.fakes import Rec


def store_of(*records: Rec) -> SliceStore:
    store = SliceStore()
    for record in records:
        store.upsert(record)  # type: ignore[arg-type]
    return store


def names(records: list[Any]) -> list[str]:
    return [r.name for r in records]


def test_index_by_pool_sorted_by_name() -> None:
    store = store_of(Rec("b", "p1"), Rec("a", "p1"), Rec("c", "p2"))
    assert names(store.by_pool("p1")) == ["a", "b"]
    assert names(store.by_pool("p2")) == ["c"]
    assert store.by_pool("nope") == []
    assert store.pool_names() == {"p1", "p2"}
    assert len(store) == 3


def test_upsert_returns_old_and_moves_between_pools() -> None:
    store = store_of(Rec("a", "p1", "1"))
    old = store.upsert(Rec("a", "p2", "2"))  # type: ignore[arg-type]
    assert old == Rec("a", "p1", "1")
    assert store.by_pool("p1") == []
    assert store.pool_names() == {"p2"}
    assert store.get("a") == Rec("a", "p2", "2")


def test_delete() -> None:
    store = store_of(Rec("a", "p1"))
    assert store.delete("a") == Rec("a", "p1")
    assert store.delete("a") is None
    assert store.pool_names() == set()
    assert len(store) == 0


def test_replace_reports_adds_changes_and_synthesised_deletes() -> None:
    store = store_of(Rec("same", "p", "1"), Rec("changed", "p", "1"), Rec("gone", "q", "1"))
    changes = store.replace(
        [Rec("same", "p", "1"), Rec("changed", "p", "2"), Rec("new", "p", "3")]  # type: ignore[list-item]
    )
    assert sorted(changes, key=lambda c: (c[0] or c[1]).name) == [  # type: ignore[union-attr]
        (Rec("changed", "p", "1"), Rec("changed", "p", "2")),
        (Rec("gone", "q", "1"), None),
        (None, Rec("new", "p", "3")),
    ]
    assert names(store.by_pool("p")) == ["changed", "new", "same"]
    assert store.pool_names() == {"p"}
