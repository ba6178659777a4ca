"""health() and the metrics of inactive controllers."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest

import resourceslice as rs
from resourceslice import metrics


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
