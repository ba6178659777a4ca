from __future__ import annotations

from typing import Any

import pytest

from resourceslice.mutation_cache import MutationCache
from support.fakes import FakeClock, Rec


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def cache(clock: FakeClock) -> MutationCache:
    return MutationCache(60, clock)


def merge(cache: MutationCache, pool: str, *informer: Rec) -> list[Any]:
    return cache.merge(pool, informer)  # type: ignore[arg-type]


def test_created_slice_visible_before_the_informer_has_it(
    cache: MutationCache, clock: FakeClock
) -> None:
    cache.stored(Rec("s1", "p", "5"))  # type: ignore[arg-type]
    assert merge(cache, "p") == [Rec("s1", "p", "5")]
    assert merge(cache, "other") == []
    assert cache.expires_in("p") == pytest.approx(60)
    clock.advance(60)
    assert merge(cache, "p") == []  # expired: the informer is trusted again
    assert cache.expires_in("p") is None


def test_update_wins_over_an_older_informer_record(cache: MutationCache) -> None:
    cache.stored(Rec("s1", "p", "10"))  # type: ignore[arg-type]
    assert merge(cache, "p", Rec("s1", "p", "9"), Rec("s0", "p", "3")) == [
        Rec("s0", "p", "3"),
        Rec("s1", "p", "10"),
    ]


def test_informer_at_the_same_or_newer_version_supersedes(cache: MutationCache) -> None:
    cache.stored(Rec("s1", "p", "10"))  # type: ignore[arg-type]
    cache.stored(Rec("s2", "p", "11"))  # type: ignore[arg-type]
    assert merge(cache, "p", Rec("s1", "p", "10"), Rec("s2", "p", "12")) == [
        Rec("s1", "p", "10"),
        Rec("s2", "p", "12"),
    ]
    assert len(cache) == 0
    # Superseded entries are gone: an older informer view no longer gets overridden.
    assert merge(cache, "p", Rec("s1", "p", "9")) == [Rec("s1", "p", "9")]


def test_version_compare_is_numeric(cache: MutationCache) -> None:
    cache.stored(Rec("s1", "p", "100"))  # type: ignore[arg-type]
    assert merge(cache, "p", Rec("s1", "p", "99")) == [Rec("s1", "p", "100")]


def test_deleted_slice_hidden_until_the_informer_drops_it(
    cache: MutationCache, clock: FakeClock
) -> None:
    cache.deleted("p", "s1", "uid-s1")
    assert merge(cache, "p", Rec("s1", "p", "4"), Rec("s2", "p", "4")) == [Rec("s2", "p", "4")]
    assert cache.expires_in("p") == pytest.approx(60)
    # The informer caught up: nothing left to hide, nothing to re-check.
    assert merge(cache, "p", Rec("s2", "p", "4")) == [Rec("s2", "p", "4")]
    assert cache.expires_in("p") is None


def test_delete_hides_only_that_object(cache: MutationCache) -> None:
    cache.deleted("p", "s1", "uid-old")
    assert merge(cache, "p", Rec("s1", "p", "7", uid="uid-new")) == [
        Rec("s1", "p", "7", uid="uid-new")
    ]


def test_deleted_entry_expires(cache: MutationCache, clock: FakeClock) -> None:
    cache.deleted("p", "s1", "uid-s1")
    clock.advance(61)
    assert merge(cache, "p", Rec("s1", "p", "4")) == [Rec("s1", "p", "4")]


def test_store_after_delete_and_delete_after_store(cache: MutationCache) -> None:
    cache.deleted("p", "s1", "uid-s1")
    cache.stored(Rec("s1", "p", "9"))  # type: ignore[arg-type]
    assert merge(cache, "p", Rec("s1", "p", "8")) == [Rec("s1", "p", "9")]
    cache.deleted("p", "s1", "uid-s1")
    assert merge(cache, "p") == []


def test_observed_version_supersedes_at_once(cache: MutationCache) -> None:
    cache.stored(Rec("s1", "p", "10"))  # type: ignore[arg-type]
    cache.observed(Rec("s1", "p", "9"))  # type: ignore[arg-type]
    assert merge(cache, "p") == [Rec("s1", "p", "10")]
    cache.observed(Rec("s1", "p", "10"))  # type: ignore[arg-type]
    # The informer had it, then lost it (deleted by someone): the cache must not revive it.
    assert merge(cache, "p") == []


def test_observed_delete_newer_than_our_write(cache: MutationCache) -> None:
    cache.stored(Rec("s1", "p", "10"))  # type: ignore[arg-type]
    cache.observed(Rec("s1", "p", "12"), deleted=True)  # type: ignore[arg-type]
    assert merge(cache, "p") == []
    assert cache.expires_in("p") is None


def test_observed_delete_confirms_our_delete(cache: MutationCache) -> None:
    cache.deleted("p", "s1", "uid-s1")
    cache.observed(Rec("s1", "p", "12"), deleted=True)  # type: ignore[arg-type]
    assert cache.expires_in("p") is None


def test_write_the_informer_already_delivered_is_not_kept(clock: FakeClock) -> None:
    # The watch event of a write can arrive before the write's response.
    informer = {"s1": Rec("s1", "p", "10"), "s2": Rec("s2", "p", "11")}
    cache = MutationCache(60, clock, informer.get)  # type: ignore[arg-type]
    cache.stored(Rec("s1", "p", "10"))  # type: ignore[arg-type]
    assert len(cache) == 0 and cache.expires_in("p") is None
    cache.stored(Rec("s2", "p", "12"))  # type: ignore[arg-type]
    cache.stored(Rec("s3", "p", "13"))  # type: ignore[arg-type]
    assert merge(cache, "p", *informer.values()) == [
        Rec("s1", "p", "10"),
        Rec("s2", "p", "12"),
        Rec("s3", "p", "13"),
    ]


def test_a_write_whose_object_the_watch_already_showed_deleted_is_not_cached(
    cache: MutationCache,
) -> None:
    # kubernetes#140011: an update, at once a delete by someone else, and the watch delivers
    # that delete before the update's response is stored. The response must not bring the
    # slice back to life for the next sync (which would then not recreate it).
    cache.observed(Rec("s1", "p", "12"), deleted=True)  # type: ignore[arg-type]
    cache.stored(Rec("s1", "p", "11"))  # type: ignore[arg-type]
    assert merge(cache, "p") == []
    assert cache.expires_in("p") is None
    # A new object of that name (another uid) written later is cached as usual.
    cache.stored(Rec("s1", "p", "13", uid="uid-new"))  # type: ignore[arg-type]
    assert merge(cache, "p") == [Rec("s1", "p", "13", uid="uid-new")]
