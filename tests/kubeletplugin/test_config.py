"""Opaque configuration from a real apiserver of each release to the driver's own type,
through kubelet's DRA manager: the DeviceClass's and the claim's configuration in the order
that decides, and a claim whose configuration does not decode failing alone."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Literal

import kubernetes.client
import pytest

from resourceslice import kubeletplugin
from resourceslice._apiversion import ResourceSliceAPI
from resourceslice.testing import TestCluster
from resourceslice.testing.kubelet import KubeletHarness
from support.kubelet_env import allocated_claim, delete_claim, uid

pytestmark = pytest.mark.integration

DRIVER = "config.example.com"


@dataclasses.dataclass
class DemoConfig:
    api_version: Literal["config.example.com/v1"]
    kind: Literal["DemoConfig"]
    greeting: str
    repeat: int = 1


def demo(greeting: str, **more: object) -> dict[str, object]:
    parameters = {"apiVersion": "config.example.com/v1", "kind": "DemoConfig", **more}
    return {"opaque": {"driver": DRIVER, "parameters": {"greeting": greeting, **parameters}}}


class ConfiguredPlugin:
    """Prepares each device with the configuration that wins, named in its CDI device ID."""

    def prepare_resource_claims(
        self, claims: list[kubeletplugin.ResourceClaim]
    ) -> dict[str, kubeletplugin.PrepareResult]:
        return kubeletplugin.prepare_each(claims, self.prepare)

    def prepare(self, claim: kubeletplugin.ResourceClaim) -> list[kubeletplugin.PreparedDevice]:
        devices = kubeletplugin.allocated_devices(claim, DRIVER, DemoConfig)
        return [
            d.prepared(
                [f"{DRIVER}/x={d.name}-{'.'.join(c.greeting * c.repeat for c in d.configs)}"]
            )
            for d in devices
        ]

    def unprepare_resource_claims(
        self, claims: list[kubeletplugin.ClaimRef]
    ) -> dict[str, BaseException | None]:
        return {claim.uid: None for claim in claims}


def test_opaque_config_decoded_per_claim_on_each_release(
    release_cluster: TestCluster,
    release_client: kubernetes.client.ApiClient,
    node_dir: Path,
    kubelet: KubeletHarness,
) -> None:
    version = ResourceSliceAPI(release_client).current().version
    helper = kubeletplugin.start(
        ConfiguredPlugin(),
        driver=DRIVER,
        api_client=release_client,
        registrar_dir=str(node_dir / "registry"),
        plugin_data_dir=str(node_dir / "plugins"),
        node_v1=release_cluster.release not in ("1.32", "1.33"),
    )
    other_driver = {"opaque": {"driver": "other.example.com", "parameters": {"any": "thing"}}}
    good = allocated_claim(
        release_client,
        DRIVER,
        "configured",
        ["dev-0", "dev-1"],
        version=version,
        class_config=[demo("class")],
        config=[demo("hi", repeat=2), other_driver],
    )
    # A misspelt key: this claim fails with the reason, the other of the same call prepares.
    bad = allocated_claim(
        release_client,
        DRIVER,
        "misconfigured",
        ["dev-2"],
        version=version,
        config=[demo("hi", repet=2)],
    )
    try:
        kubelet.wait_registered(DRIVER)
        answer = kubelet.prepare(DRIVER, [good, bad])["claims"]
        assert answer[uid(good)]["error"] == ""
        assert [d["cdiDeviceIDs"] for d in answer[uid(good)]["devices"]] == [
            [f"{DRIVER}/x=dev-0-class.hihi"],
            [f"{DRIVER}/x=dev-1-class.hihi"],
        ]
        assert answer[uid(bad)]["devices"] == []
        assert answer[uid(bad)]["error"] == (
            "ConfigError: status.allocation.devices.config[0].opaque.parameters: unknown field "
            "'repet' (known: apiVersion, greeting, kind, repeat)"
        )
    finally:
        helper.stop()
        delete_claim(release_client, "configured", version)
        delete_claim(release_client, "misconfigured", version)
