"""The conversions of ResourceSlices between v1 and the older versions, on plain data.

The real apiservers of each release check the same conversions end to end (the other
modules here); these pin the shapes, including the fields v1beta1 keeps outside ``basic``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

import resourceslice as rs
from resourceslice._apiversion import SliceVersion

DEVICE = {
    "name": "gpu-0",
    "attributes": {"index": {"int": 0}},
    "capacity": {"memory": {"value": "80Gi", "requestPolicy": {"default": "1Gi"}}},
    "consumesCounters": [{"counterSet": "mem", "counters": {"memory": {"value": "1Gi"}}}],
    "taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}],
    "bindsToNode": True,
    "bindingConditions": ["example.com/ready"],
}
SLICE = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceSlice",
    "metadata": {"name": "s", "resourceVersion": "7"},
    "spec": {
        "driver": "d.example.com",
        "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
        "nodeName": "n1",
        "sharedCounters": [{"name": "mem", "counters": {"memory": {"value": "8Gi"}}}],
        "devices": [DEVICE, {"name": "bare"}],
    },
}


def as_bytes(obj: Any) -> bytes:
    return json.dumps(obj).encode()


def test_v1_passes_through_unchanged() -> None:
    body = as_bytes(SLICE)
    v1 = SliceVersion("v1")
    assert v1.to_served(body) is body
    assert v1.object_to_v1(body) is body
    assert v1.event_to_v1(body) is body


def test_v1beta2_changes_only_the_api_version() -> None:
    v1beta2 = SliceVersion("v1beta2")
    sent = json.loads(v1beta2.to_served(as_bytes(SLICE)))
    assert sent == {**SLICE, "apiVersion": "resource.k8s.io/v1beta2"}
    assert v1beta2.path == "/apis/resource.k8s.io/v1beta2/resourceslices"


def test_v1beta1_wraps_every_device_field_but_the_name_in_basic() -> None:
    v1beta1 = SliceVersion("v1beta1")
    sent = json.loads(v1beta1.to_served(as_bytes(SLICE)))
    assert sent["apiVersion"] == "resource.k8s.io/v1beta1"
    assert sent["spec"]["devices"] == [
        {"name": "gpu-0", "basic": {k: v for k, v in DEVICE.items() if k != "name"}},
        {"name": "bare", "basic": {}},
    ]
    # Slice-level fields are the same in both versions.
    assert {k: v for k, v in sent["spec"].items() if k != "devices"} == {
        k: v for k, v in SLICE["spec"].items() if k != "devices"
    }
    assert sent["metadata"] == SLICE["metadata"]


@pytest.mark.parametrize("version", ["v1beta1", "v1beta2"])
def test_round_trip_of_an_object_a_list_and_a_watch_event(version: str) -> None:
    served = SliceVersion(version)
    stored = json.loads(served.to_served(as_bytes(SLICE)))
    back = json.loads(served.object_to_v1(as_bytes(stored)))
    assert back["spec"] == SLICE["spec"]

    listed = {"kind": "ResourceSliceList", "metadata": {"resourceVersion": "9"}, "items": [stored]}
    assert json.loads(served.object_to_v1(as_bytes(listed)))["items"][0]["spec"] == SLICE["spec"]

    event = json.loads(served.event_to_v1(as_bytes({"type": "MODIFIED", "object": stored})))
    assert event["type"] == "MODIFIED" and event["object"]["spec"] == SLICE["spec"]


@pytest.mark.parametrize(
    "event",
    [
        {
            "type": "BOOKMARK",
            "object": {"kind": "ResourceSlice", "metadata": {"resourceVersion": "5"}},
        },
        {"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old"}},
        {"type": "ADDED", "object": {"kind": "ResourceSlice", "spec": {"driver": "d"}}},
    ],
)
def test_events_without_devices_keep_their_content(event: dict[str, Any]) -> None:
    assert json.loads(SliceVersion("v1beta1").event_to_v1(as_bytes(event))) == event


def test_a_v1beta1_device_without_basic_keeps_its_name() -> None:
    stored = {**SLICE, "spec": {**SLICE["spec"], "devices": [{"name": "composite"}]}}
    back = json.loads(SliceVersion("v1beta1").object_to_v1(as_bytes(stored)))
    assert back["spec"]["devices"] == [{"name": "composite"}]


def slice_with(**spec: Any) -> bytes:
    return as_bytes({**SLICE, "spec": {"driver": "d", "pool": SLICE["spec"]["pool"], **spec}})


LIST_ATTRIBUTE = {"name": "a", "attributes": {"ids": {"ints": [1]}, "n": {"int": 1}}}
CONSUMER = {"name": "c", "consumesCounters": [{"counterSet": "mem", "counters": {}}]}
COUNTERS = [{"name": "mem", "counters": {}}]


@pytest.mark.parametrize(
    ("release", "spec", "problem"),
    [
        ((1, 33), {"devices": [LIST_ATTRIBUTE]}, "devices[0].attributes['ids']: list-typed"),
        ((1, 32), {"devices": [LIST_ATTRIBUTE]}, "devices[0].attributes['ids']: list-typed"),
        ((1, 33), {"devices": [{"name": "x"}, CONSUMER]}, "devices[1].consumesCounters"),
        ((1, 32), {"perDeviceNodeSelection": True}, "spec.perDeviceNodeSelection"),
    ],
)
def test_what_an_older_release_would_reject_is_refused_before_sending(
    release: tuple[int, int], spec: dict[str, Any], problem: str
) -> None:
    with pytest.raises(rs.ValidationError) as info:
        SliceVersion("v1beta1", release).to_served(slice_with(**spec))
    [error] = info.value.errors
    assert error.startswith("ResourceSlice 's': spec.") and problem in error
    assert f"Kubernetes {release[0]}.{release[1]}" in error


@pytest.mark.parametrize(
    ("release", "spec"),
    [
        (None, {"devices": [LIST_ATTRIBUTE]}),  # a cluster with v1: not checked here
        ((1, 33), {"perDeviceNodeSelection": True}),
        ((1, 33), {"sharedCounters": COUNTERS, "devices": [CONSUMER]}),  # 1.33's own layout
        ((1, 32), {"devices": [CONSUMER]}),  # dropped by 1.32, not invalid
    ],
)
def test_what_the_release_takes_or_only_drops_is_sent(
    release: tuple[int, int] | None, spec: dict[str, Any]
) -> None:
    sent = json.loads(SliceVersion("v1beta2", release).to_served(slice_with(**spec)))
    assert sent["spec"] == {"driver": "d", "pool": SLICE["spec"]["pool"], **spec}


def test_v1beta1_claim_requests_get_their_fields_under_exactly() -> None:
    claim: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1beta1",
        "metadata": {"name": "c", "uid": "u"},
        "spec": {
            "devices": {
                "requests": [
                    # adminAccess false is a value (Go tests for nil), an empty class is not.
                    {"name": "a", "deviceClassName": "gpu", "count": 2, "adminAccess": False},
                    {"name": "b", "deviceClassName": "", "firstAvailable": [{"name": "x"}]},
                ],
                "config": [{"requests": ["a"], "opaque": {"driver": "d", "parameters": {}}}],
            }
        },
        "status": {"allocation": {"devices": {"results": []}}},
    }
    got = SliceVersion("v1beta1").claim_to_v1(json.loads(json.dumps(claim)))
    assert got["apiVersion"] == "resource.k8s.io/v1"
    assert got["spec"]["devices"]["requests"] == [
        {"name": "a", "exactly": {"deviceClassName": "gpu", "count": 2, "adminAccess": False}},
        {"name": "b", "firstAvailable": [{"name": "x"}]},
    ]
    assert got["spec"]["devices"]["config"] == claim["spec"]["devices"]["config"]
    assert got["status"] == claim["status"]


@pytest.mark.parametrize("version", ["v1", "v1beta2"])
def test_v1_and_v1beta2_claims_change_only_the_api_version(version: str) -> None:
    requests = [{"name": "a", "exactly": {"deviceClassName": "gpu"}}]
    claim = {
        "apiVersion": f"resource.k8s.io/{version}",
        "spec": {"devices": {"requests": requests}},
    }
    got = SliceVersion(version).claim_to_v1(json.loads(json.dumps(claim)))
    assert got == {**claim, "apiVersion": "resource.k8s.io/v1"}
