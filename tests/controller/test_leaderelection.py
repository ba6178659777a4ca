"""LeaderElection's settings, checked before anything talks to a cluster."""

from __future__ import annotations

from typing import Any

import pytest

import resourceslice as rs


def test_defaults_are_client_gos() -> None:
    election = rs.LeaderElection("ns", "lease")
    assert (election.lease_duration, election.renew_deadline, election.retry_period) == (
        15.0,
        10.0,
        2.0,
    )
    assert election.identity is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"namespace": ""}, "namespace must not be empty"),
        ({"name": ""}, "name must not be empty"),
        ({"identity": ""}, "identity must not be empty"),
        # A plain leader under that name would be taken for a sharded group's replicas.
        ({"identity": "resourceslice.io/shards=4"}, "identity must not start with"),
        ({"lease_duration": 2.5}, "lease_duration must be whole seconds"),
        ({"lease_duration": 0}, "lease_duration must be whole seconds"),
        # The leader must stop before anyone may take over.
        ({"renew_deadline": 15.0}, "renew_deadline (15.0) must be positive and less than"),
        ({"renew_deadline": 0}, "renew_deadline (0) must be positive"),
        # Renewals must have time to be retried before the deadline.
        ({"retry_period": 9.0}, "retry_period (9.0) must be positive and less than"),
        ({"retry_period": 0}, "retry_period (0) must be positive"),
    ],
)
def test_bad_settings_are_refused(kwargs: dict[str, Any], message: str) -> None:
    settings: dict[str, Any] = {"namespace": "ns", "name": "lease", **kwargs}
    with pytest.raises(ValueError, match="LeaderElection: ") as info:
        rs.LeaderElection(**settings)
    assert message in str(info.value)


def test_an_inactive_controller_never_leads() -> None:
    ctrl = rs.start_controller(
        None, driver="gpu.example.com", leader_election=rs.LeaderElection("ns", "lease")
    )
    assert not ctrl.is_leader()
    ctrl.stop()
