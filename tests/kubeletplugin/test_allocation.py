"""allocated_devices, decode_config and prepare_each on plain claims (test_config.py has them
on the real apiserver with kubelet)."""

from __future__ import annotations

import copy
import dataclasses
import enum
from typing import Any, Literal, Optional

import pydantic
import pytest

from resourceslice import kubeletplugin
from resourceslice.kubeletplugin import ConfigError, ResourceClaim, decode_config

DRIVER = "gpu.example.com"


def opaque(source: str, value: str, requests: list[str] | None = None, driver: str = DRIVER) -> Any:
    entry: dict[str, Any] = {
        "source": source,
        "opaque": {"driver": driver, "parameters": {"value": value}},
    }
    if requests is not None:
        entry["requests"] = requests
    return entry


def claim_with(results: list[dict[str, Any]], config: list[Any]) -> ResourceClaim:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "default", "uid": "uid-1"},
        "spec": {"devices": {}},
        "status": {"allocation": {"devices": {"results": results, "config": config}}},  # type: ignore[typeddict-item]
    }


def result(request: str, device: str, driver: str = DRIVER) -> dict[str, Any]:
    return {"request": request, "driver": driver, "pool": "node-1", "device": device}


def values(claim: ResourceClaim) -> dict[str, list[str]]:
    return {
        d.name: [c["value"] for c in d.configs]
        for d in kubeletplugin.allocated_devices(claim, DRIVER)
    }


def test_class_configuration_first_then_the_claims_each_for_its_requests() -> None:
    claim = claim_with(
        [
            result("a", "gpu-0"),
            result("b", "gpu-1"),
            result("a", "nic-0", driver="nic.example.com"),
        ],
        [
            # Listed out of order on purpose: the source decides, then the order in the list.
            opaque("FromClaim", "claim-all"),
            opaque("FromClass", "class-a", ["a"]),
            opaque("FromClaim", "claim-b", ["b"]),
            opaque("FromClass", "class-b", ["b"]),
            opaque("FromClaim", "other-driver", driver="nic.example.com"),
            {"source": "FromClaim"},  # no opaque: a kind of configuration newer than the API's
        ],
    )
    assert values(claim) == {
        "gpu-0": ["class-a", "claim-all"],
        "gpu-1": ["class-b", "claim-all", "claim-b"],
    }
    (gpu0, gpu1) = kubeletplugin.allocated_devices(claim, DRIVER)
    assert gpu1.config == {"value": "claim-b"}  # the last wins
    assert (gpu0.request, gpu0.pool, gpu0.name) == ("a", "node-1", "gpu-0")


def test_a_subrequest_matches_its_own_name_and_its_requests() -> None:
    claim = claim_with(
        [result("r/big", "gpu-0")],
        [
            opaque("FromClass", "class", ["r/big"]),
            opaque("FromClaim", "parent", ["r"]),
            opaque("FromClaim", "sub", ["r/big"]),
            opaque("FromClaim", "sibling", ["r/small"]),
            opaque("FromClaim", "other", ["q"]),
        ],
    )
    assert values(claim) == {"gpu-0": ["class", "parent", "sub"]}


def test_no_configuration_and_an_unknown_source() -> None:
    claim = claim_with([result("a", "gpu-0")], [])
    (device,) = kubeletplugin.allocated_devices(claim, DRIVER)
    assert device.configs == () and device.config is None
    with pytest.raises(ConfigError, match=r"config\[0\]: unknown source 'FromElsewhere'"):
        kubeletplugin.allocated_devices(
            claim_with([result("a", "gpu-0")], [opaque("FromElsewhere", "x")]), DRIVER
        )


def test_prepared_device_reports_request_and_share_id() -> None:
    shared = {**result("a", "gpu-0"), "shareID": "1f0e"}
    (device,) = kubeletplugin.allocated_devices(claim_with([shared], []), DRIVER)
    assert device.prepared(["gpu.example.com/gpu=x"]) == kubeletplugin.PreparedDevice(
        pool_name="node-1",
        device_name="gpu-0",
        requests=["a"],
        cdi_device_ids=["gpu.example.com/gpu=x"],
        share_id="1f0e",
    )


class Strategy(str, enum.Enum):
    TIME_SLICING = "TimeSlicing"
    SPACE_PARTITIONING = "SpacePartitioning"


@dataclasses.dataclass
class TimeSlicing:
    interval: Literal["Default", "Short", "Long"] = "Default"


@dataclasses.dataclass
class Sharing:
    strategy: Strategy
    time_slicing_config: Optional[TimeSlicing] = None  # noqa: UP045 (3.9 evaluates it)


@dataclasses.dataclass
class GpuConfig:
    api_version: Literal["gpu.example.com/v1"]
    kind: Literal["GpuConfig"]
    sharing: Optional[Sharing] = None  # noqa: UP045
    memory_fraction: float = 1.0
    replicas: int = 1
    labels: dict[str, str] = dataclasses.field(default_factory=dict)
    devices: list[str] = dataclasses.field(default_factory=list)


GPU_CONFIG = {
    "apiVersion": "gpu.example.com/v1",
    "kind": "GpuConfig",
    "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}},
    "memoryFraction": 1,
    "labels": {"team": "a"},
    "devices": ["gpu-0"],
}


def test_a_dataclass_is_decoded_from_camel_case_json() -> None:
    assert decode_config(GPU_CONFIG, GpuConfig) == GpuConfig(
        api_version="gpu.example.com/v1",
        kind="GpuConfig",
        sharing=Sharing(Strategy.TIME_SLICING, TimeSlicing("Long")),
        memory_fraction=1.0,
        labels={"team": "a"},
        devices=["gpu-0"],
    )


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (
            {"sharing": {"strategy": "TimeSlicing", "timeslicing": {}}},
            r"parameters.sharing: unknown field 'timeslicing' "
            r"\(known: strategy, timeSlicingConfig\)",
        ),
        ({"kind": "CpuConfig"}, "parameters.kind: expected one of 'GpuConfig', got 'CpuConfig'"),
        ({"replicas": True}, "parameters.replicas: expected an integer, got a boolean"),
        ({"replicas": 1.5}, "parameters.replicas: expected an integer, got a number"),
        ({"memoryFraction": "1"}, "parameters.memoryFraction: expected a number, got a string"),
        ({"devices": ["gpu-0", 1]}, r"parameters.devices\[1\]: expected a string, got an integer"),
        ({"labels": {"team": None}}, "parameters.labels.team: expected a string, got null"),
        (
            {"sharing": {"strategy": "Both"}},
            "parameters.sharing.strategy: expected one of 'TimeSlicing', "
            "'SpacePartitioning', got 'Both'",
        ),
        ({"sharing": {}}, "parameters.sharing: missing field 'strategy'"),
        (
            {"sharing": []},
            "parameters.sharing: expected an object, got a list",
        ),
    ],
)
def test_what_does_not_fit_the_dataclass_is_named(change: dict[str, Any], problem: str) -> None:
    with pytest.raises(ConfigError, match=f"^{problem}$"):
        decode_config({**copy.deepcopy(GPU_CONFIG), **change}, GpuConfig)


def test_a_dataclass_without_api_version_refuses_it() -> None:
    @dataclasses.dataclass
    class Plain:
        size: int

    assert decode_config({"size": 2}, Plain) == Plain(2)
    with pytest.raises(ConfigError, match="unknown field 'apiVersion'"):
        decode_config({"apiVersion": "x/v1", "size": 2}, Plain)
    with pytest.raises(ConfigError, match="expected an object, got a string"):
        decode_config("size", Plain)
    with pytest.raises(TypeError, match="neither a dataclass nor a model"):
        decode_config({}, dict)


class GpuModel(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")
    kind: Literal["GpuConfig"]
    replicas: int = 1


def test_a_pydantic_model_decides_for_itself() -> None:
    assert decode_config({"kind": "GpuConfig", "replicas": 3}, GpuModel) == GpuModel(
        kind="GpuConfig", replicas=3
    )
    with pytest.raises(ConfigError, match=r"(?s)^where: .*replicas"):
        decode_config({"kind": "GpuConfig", "replicas": "many"}, GpuModel, "where")


def test_allocated_devices_decode_each_entry_and_name_the_bad_one() -> None:
    good = {"source": "FromClaim", "opaque": {"driver": DRIVER, "parameters": GPU_CONFIG}}
    bad = copy.deepcopy(good)
    bad["opaque"]["parameters"]["replicas"] = "two"
    (device,) = kubeletplugin.allocated_devices(
        claim_with([result("a", "gpu-0")], [good]), DRIVER, GpuConfig
    )
    assert isinstance(device.config, GpuConfig) and device.config.labels == {"team": "a"}
    with pytest.raises(ConfigError, match=r"config\[1\]\.opaque\.parameters\.replicas"):
        kubeletplugin.allocated_devices(
            claim_with([result("a", "gpu-0")], [good, bad]), DRIVER, GpuConfig
        )


def test_prepare_each_fails_only_the_claim_that_raised() -> None:
    ok = claim_with([result("a", "gpu-0")], [])
    failing = copy.deepcopy(ok)
    failing["metadata"]["uid"] = "uid-2"
    error = ConfigError("bad")

    def prepare(claim: ResourceClaim) -> list[kubeletplugin.PreparedDevice]:
        if claim["metadata"]["uid"] == "uid-2":
            raise error
        return [d.prepared() for d in kubeletplugin.allocated_devices(claim, DRIVER)]

    results = kubeletplugin.prepare_each([ok, failing], prepare)
    assert results == {
        "uid-1": kubeletplugin.PrepareResult(
            devices=[
                kubeletplugin.PreparedDevice(
                    pool_name="node-1", device_name="gpu-0", requests=["a"]
                )
            ]
        ),
        "uid-2": kubeletplugin.PrepareResult(error=error),
    }
