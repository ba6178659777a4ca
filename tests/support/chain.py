"""What the end-to-end tests share (and the kubelet plugin, security and bench tests that run
the example driver): a kubelet plugin that prepares whatever of its driver a claim was
allocated, the example driver, and starting a plugin on a simulated node."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from kubernetes.client import ApiClient

import resourceslice as rs
from resourceslice import kubeletplugin
from resourceslice.testing import DRACluster, SimulatedNode

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "kubelet_driver.py"


def load_example() -> ModuleType:
    """examples/kubelet_driver.py, the README's whole driver, as a module."""
    spec = importlib.util.spec_from_file_location("kubelet_driver", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # As a script's __main__ is: its classes' annotations resolve in it (a config dataclass).
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def plugin_dirs(node: SimulatedNode, driver: str) -> dict[str, str]:
    """The directories of ``node``'s kubelet that a plugin of ``driver`` uses."""
    return {
        "registrar_dir": str(node.registry_dir),
        "plugin_data_dir": str(node.plugin_data_dir(driver)),
    }


class EnvDriver(load_example().DemoDriver):  # type: ignore[misc]
    """The example's plugin for any driver and devices: a container given a device gets
    ``DEVICE_<device>=1`` (dashes as underscores). With ``prepare_error`` set, every prepare
    fails with it instead."""

    def __init__(self, driver: str, cdi_dir: Path) -> None:
        super().__init__(kubeletplugin.CDISpecWriter(driver, cdi_dir=cdi_dir))
        self.prepare_error: str | None = None

    @staticmethod
    def env_of(device: str) -> str:
        return f"DEVICE_{device.replace('-', '_')}=1"

    def container_edits(self, device: str, config: Any) -> dict[str, Any]:
        return {"env": [self.env_of(device)]}

    def prepare_resource_claims(
        self, claims: list[kubeletplugin.ResourceClaim]
    ) -> dict[str, kubeletplugin.PrepareResult]:
        if self.prepare_error is not None:
            error = RuntimeError(self.prepare_error)
            return {c["metadata"]["uid"]: kubeletplugin.PrepareResult(error=error) for c in claims}
        results: dict[str, kubeletplugin.PrepareResult] = super().prepare_resource_claims(claims)
        return results


def start_env_plugin(
    cluster: DRACluster,
    client: ApiClient,
    node: SimulatedNode,
    driver: str,
    devices: Sequence[dict[str, Any]] | None = None,
    pool: rs.Pool | None = None,
    plugin: EnvDriver | None = None,
) -> tuple[EnvDriver, kubeletplugin.Helper]:
    """An :class:`EnvDriver` plugin on ``node`` (or ``plugin``, one made for it), registered
    with its kubelet; it publishes the node's pool (``devices``, or ``pool``) when given one."""
    plugin = plugin if plugin is not None else EnvDriver(driver, node.cdi_dir)
    after = len(cluster.events())
    helper = kubeletplugin.start(
        plugin, driver=driver, api_client=client, node_name=node.name, **plugin_dirs(node, driver)
    )
    if devices is not None or pool is not None:
        chosen = pool if pool is not None else rs.Pool(devices=list(devices or []))
        helper.publish_resources(rs.DriverResources(pools={node.name: chosen}))
        assert helper.controller is not None and helper.controller.wait_synced(timeout=60)
    cluster.wait_registered(node.name, driver, after=after)
    return plugin, helper
