"""The Observer: a controller's writes, syncs and failing pools counted, on plain data."""

from __future__ import annotations

import pytest

from resourceslice._observer import SYNC_SECONDS_BUCKETS, Observer, outcome_of
from resourceslice.connection import ApiError


@pytest.mark.parametrize(
    ("exc", "outcome"),
    [
        (None, "success"),
        (ApiError(status=404), "not_found"),
        (ApiError(status=409), "conflict"),
        (ApiError(status=422), "invalid"),
        (ApiError(status=429), "throttled"),
        (ApiError(status=403), "rejected"),
        (ApiError(status=500), "error"),
        (ConnectionResetError(), "error"),
    ],
)
def test_outcome_of_a_write(exc: BaseException | None, outcome: str) -> None:
    assert outcome_of(exc) == outcome


def test_observer_counts_writes_syncs_and_failing_pools() -> None:
    observer = Observer()
    with observer.writing("create"):
        pass
    with pytest.raises(ApiError), observer.writing("create"):
        raise ApiError(status=409)
    observer.sync_done("a", 0.003, None)
    observer.sync_done("b", 0.3, ApiError(status=403, reason="Forbidden"))
    observer.sync_done("c", 1e6, None)  # beyond the last bound: +Inf only
    health = observer.health(synced=False, informer_connected=True, alive=True)
    assert health.failing == {"b": "403 Forbidden"}
    assert health.last_sync_time is not None and not health.synced_once
    observer.sync_done("b", 0.01, None)
    assert observer.health(synced=True, informer_connected=True, alive=True).ok
    counts = observer._buckets
    assert counts[0] == 1 and counts[SYNC_SECONDS_BUCKETS.index(0.5)] == 1
    assert counts[SYNC_SECONDS_BUCKETS.index(0.01)] == 1 and counts[-1] == 1
    assert dict(observer._writes) == {("create", "success"): 1, ("create", "conflict"): 1}
