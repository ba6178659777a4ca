"""Which devices of a claim wait to be attached: read as kube-scheduler's PreBind reads them
(``isClaimReadyForBinding``, v1.37.2): a device is settled once every binding condition is
True, or any failure condition is; anything else (missing, False, Unknown) keeps it
pending."""

from __future__ import annotations

from typing import Any

import pytest

from resourceslice._bindingclaims import BindingFailedError, conditions, pending_devices

DRIVER = "fabric.example.com"
READY, LINKED, FAILED = "x.io/Ready", "x.io/Linked", "x.io/Failed"


def claim(statuses: dict[str, str], **status: Any) -> dict[str, Any]:
    """One device with two binding conditions, its conditions ``statuses`` by type."""
    found = [{"type": t, "status": s, "reason": "R"} for t, s in statuses.items()]
    return {
        "metadata": {"namespace": "ns", "name": "c", "uid": "u"},
        "status": {
            "allocation": {
                "devices": {"results": [{
                    "request": "req", "driver": DRIVER, "pool": "p", "device": "d",
                    "bindingConditions": [READY, LINKED], "bindingFailureConditions": [FAILED]}]},
                "allocationTimestamp": "2026-03-01T10:00:00Z",
            },
            "reservedFor": [{"resource": "pods", "name": "pod", "uid": "1"}],
            "devices": [{"driver": DRIVER, "pool": "p", "device": "d", "conditions": found}],
            **status,
        },
    }  # fmt: skip


@pytest.mark.parametrize(
    ("statuses", "pending"),
    [
        ({}, True),
        ({READY: "True"}, True),  # all of them, not one
        ({READY: "True", LINKED: "Unknown"}, True),
        ({READY: "True", LINKED: "True"}, False),
        ({FAILED: "True"}, False),  # failed: the scheduler drops the allocation
        ({READY: "True", LINKED: "True", FAILED: "True"}, False),
        ({FAILED: "False"}, True),
    ],
)
def test_a_device_is_pending_until_its_conditions_settle_it(
    statuses: dict[str, str], pending: bool
) -> None:
    assert bool(pending_devices(claim(statuses), DRIVER, lambda pool: True)) is pending


def test_nobody_waiting_or_a_claim_being_deleted_is_not_pending() -> None:
    assert pending_devices(claim({}, reservedFor=[]), DRIVER, lambda pool: True) == []
    deleted = claim({})
    deleted["metadata"]["deletionTimestamp"] = "2026-03-01T10:01:00Z"
    assert pending_devices(deleted, DRIVER, lambda pool: True) == []
    assert pending_devices(claim({}), DRIVER, lambda pool: pool != "p") == []
    assert pending_devices(claim({}), "other.example.com", lambda pool: True) == []


def test_the_attaching_reason_marks_a_retry() -> None:
    (first,) = pending_devices(claim({READY: "False"}), DRIVER, lambda pool: True)
    assert not first.retry
    attaching = claim({})
    attaching["status"]["devices"][0]["conditions"] = conditions(first, "Attaching")
    (again,) = pending_devices(attaching, DRIVER, lambda pool: True)
    assert again.retry and again.same_allocation(first) and again != first


def test_the_outcomes_conditions() -> None:
    (device,) = pending_devices(claim({}), DRIVER, lambda pool: True)
    assert [(c["type"], c["status"], c["reason"]) for c in conditions(device, "Attached")] == [
        (READY, "True", "Attached"),
        (LINKED, "True", "Attached"),
    ]
    failed = conditions(device, "NoPath", BindingFailedError("no path", "NoPath"))
    assert [(c["type"], c["status"], c["message"]) for c in failed] == [
        (READY, "False", "no path"),
        (LINKED, "False", "no path"),
        (FAILED, "True", "no path"),
    ]
