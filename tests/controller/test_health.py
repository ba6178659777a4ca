"""The pieces of health() and the metrics, on plain data and an inactive controller."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest

import resourceslice as rs
from resourceslice import metrics
from resourceslice.connection import ApiError
from resourceslice.health import SYNC_SECONDS_BUCKETS, Observer, outcome_of


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


def test_collector_of_inactive_controllers_with_and_without_leadership() -> None:
    registry = CollectorRegistry()
    plain = rs.start_controller(None, driver="a.example.com")
    # Inactive (no client): it elects a leader, and is not one.
    elected = rs.start_controller(
        None, driver="b.example.com", leader_election=rs.LeaderElection("ns", "lease")
    )
    collector = metrics.register(plain, registry=registry)
    collector.add(elected)
    with pytest.raises(ValueError, match=r"a\.example\.com"):
        collector.add(rs.start_controller(None, driver="a.example.com"))

    def get(name: str, driver: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, {"driver": driver, **labels})

    for driver in ("a.example.com", "b.example.com"):
        assert get("resourceslice_synced", driver) == 0
        assert get("resourceslice_queue_depth", driver) == 0
        assert get("resourceslice_writes_total", driver, verb="delete", outcome="success") == 0
        assert get("resourceslice_sync_duration_seconds_bucket", driver, le="+Inf") == 0
    assert get("resourceslice_leader", "a.example.com") is None
    assert get("resourceslice_leader", "b.example.com") == 0
    text = generate_latest(registry).decode()
    assert "# TYPE resourceslice_writes_total counter" in text
    assert "# TYPE resourceslice_sync_duration_seconds histogram" in text
    # Names that follow Prometheus conventions: the prefix, counters in _total, units.
    names = {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")}
    assert all(name.startswith("resourceslice_") for name in names), names
    health = plain.health()
    assert (health.alive, health.synced, health.informer_connected) == (False, False, False)
