from __future__ import annotations

import datetime
import json
from types import ModuleType

import pytest
from kubernetes import client as k8s

import resourceslice as rs
from resourceslice import _core, _pycore
from resourceslice._plain import to_plain_pools


def test_model_objects_become_rest_json() -> None:
    device = k8s.V1Device(
        name="gpu-0",
        attributes={"model": k8s.V1DeviceAttribute(string="a100")},
        capacity={"memory": k8s.V1DeviceCapacity(value="40Gi")},
        taints=[
            k8s.V1DeviceTaint(
                key="example.com/broken",
                effect="NoSchedule",
                time_added=datetime.datetime(2025, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc),
            )
        ],
    )
    selector = k8s.V1NodeSelector(
        node_selector_terms=[
            k8s.V1NodeSelectorTerm(
                match_expressions=[
                    k8s.V1NodeSelectorRequirement(key="rack", operator="In", values=["r1"])
                ],
            )
        ]
    )
    pools, errors = to_plain_pools(
        rs.DriverResources(pools={"p": rs.Pool(devices=[device], node_selector=selector)})
    )
    assert errors == []
    assert pools == {
        "p": {
            "devices": [
                {
                    "name": "gpu-0",
                    "attributes": {"model": {"string": "a100"}},
                    "capacity": {"memory": {"value": "40Gi"}},
                    "taints": [
                        {
                            "key": "example.com/broken",
                            "effect": "NoSchedule",
                            "timeAdded": "2025-01-02T03:04:05+00:00",
                        }
                    ],
                }
            ],
            "slices": None,
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1"]}]}
                ]
            },
            "allNodes": False,
            "nodeName": None,
            "generation": 0,
            "maxDevicesPerSlice": None,
        }
    }


def test_model_objects_nested_in_dicts_and_explicit_slices() -> None:
    counter_set = k8s.V1CounterSet(name="mem", counters={"m": k8s.V1Counter(value="8Gi")})
    pools, errors = to_plain_pools(
        rs.DriverResources(
            pools={
                "p": rs.Pool(
                    slices=[
                        rs.Slice(shared_counters=[counter_set]),
                        rs.Slice(
                            devices=[
                                {"name": "a", "capacity": {"m": k8s.V1DeviceCapacity(value="1")}}
                            ],
                            per_device_node_selection=True,
                            partition_type_attribute="gpu.example.com/profile",
                            skip_node_operations=("NodeUnprepareResources",),
                        ),
                    ],
                    all_nodes=True,
                    generation=3,
                )
            }
        )
    )
    assert errors == []
    assert pools["p"]["devices"] is None
    assert pools["p"]["allNodes"] is True
    assert pools["p"]["generation"] == 3
    assert pools["p"]["slices"] == [
        {
            "devices": [],
            "sharedCounters": [{"name": "mem", "counters": {"m": {"value": "8Gi"}}}],
            "perDeviceNodeSelection": None,
            "partitionTypeAttribute": None,
            "skipNodeOperations": None,
        },
        {
            "devices": [{"name": "a", "capacity": {"m": {"value": "1"}}}],
            "sharedCounters": None,
            "perDeviceNodeSelection": True,
            "partitionTypeAttribute": "gpu.example.com/profile",
            "skipNodeOperations": ["NodeUnprepareResources"],
        },
    ]


@pytest.mark.parametrize("core", [_core, _pycore], ids=["rust", "python"])
def test_desired_state_does_not_follow_later_changes_of_the_callers_data(
    core: ModuleType,
) -> None:
    attrs = {"model": {"string": "a"}}
    devices = [{"name": "a", "attributes": attrs}]
    pools, _ = to_plain_pools(rs.DriverResources(pools={"p": rs.Pool(devices=devices)}), "n1")
    # Plain device dicts are shared, not copied (memory); the core renders its own copy.
    assert pools["p"]["devices"][0] is devices[0]
    desired, errors = core.prepare_desired("d.example.com", pools, 1 << 20)
    assert errors == []
    attrs["model"]["string"] = "changed"
    devices.append({"name": "b"})
    (body,) = core.plan_pool(desired, "p", [], None, None).creates
    assert json.loads(body)["spec"]["devices"] == [
        {"name": "a", "attributes": {"model": {"string": "a"}}}
    ]


def test_shape_errors_are_all_reported_with_paths() -> None:
    _, errors = to_plain_pools(
        rs.DriverResources(
            pools={
                "a": rs.Pool(devices="gpu-0"),  # type: ignore[arg-type]
                "b": {"devices": []},  # type: ignore[dict-item]
                "c": rs.Pool(devices=[{"name": "x", "attributes": {1: {"int": 1}}}]),
                "d": rs.Pool(devices=[{"name": "x", "extra": {1, 2}}]),
                "e": rs.Pool(slices=["not a slice"]),  # type: ignore[list-item]
            }
        )
    )
    assert errors == [
        'pools["a"].devices: must be a list',
        'pools["b"]: must be a Pool, not dict',
        "pools[\"c\"].devices[0]['attributes']: key 1 must be a string",
        "pools[\"d\"].devices[0]['extra']: unsupported type set",
        'pools["e"].slices[0]: must be a Slice, not str',
    ]


def test_not_driver_resources() -> None:
    _, errors = to_plain_pools({"p": rs.Pool()})  # type: ignore[arg-type]
    assert errors == ["resources: must be a DriverResources, not dict"]


def test_validation_error_is_a_value_error_listing_every_problem() -> None:
    err = rs.ValidationError(["a: bad", "b: worse"])
    assert isinstance(err, ValueError)
    assert err.errors == ["a: bad", "b: worse"]
    assert "a: bad" in str(err) and "b: worse" in str(err)


def test_dropped_fields_error_names_pool_slice_paths_and_features() -> None:
    err = rs.DroppedFieldsError(
        "pool-a",
        "00001-x-abcde",
        1,
        ["spec.devices[0].taints", "spec.sharedCounters"],
        ["DRADeviceTaints", "DRAPartitionableDevices"],
    )
    assert (err.pool, err.slice_name, err.slice_index) == ("pool-a", "00001-x-abcde", 1)
    assert str(err) == (
        "pool 'pool-a', slice #1 ('00001-x-abcde'): the apiserver dropped "
        "spec.devices[0].taints, spec.sharedCounters, probably because these features are "
        "disabled: DRADeviceTaints DRAPartitionableDevices"
    )


def test_node_owner() -> None:
    assert rs.Owner(api_version="v1", kind="Node", name="n").is_node
    assert not rs.Owner(api_version="apps/v1", kind="Deployment", name="n").is_node
