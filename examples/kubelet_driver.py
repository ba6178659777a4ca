"""A whole node-local DRA driver in Python: it publishes its devices and prepares them.

Runs as a DaemonSet pod on each node (deployed by the chart in deploy/chart: docs/helm.md):
it publishes the node's devices as ResourceSlices (the Node owns them), registers with
kubelet, and, when a pod that was allocated some of its devices starts, writes a CDI spec for
the pod's claim so that the container runtime gives each container its devices (here: an
environment variable per device; a real driver adds device nodes and mounts), and reports
each device ``Ready`` in the claim's ``status.devices``.

    NODE_NAME=... POD_UID=... python examples/kubelet_driver.py   # in the pod

Needs the package with its ``kubelet`` extra: the wheel ``make dist`` builds, installed as
``pip install "dist/resourceslice-...whl[kubelet]"`` (it is on no index yet: docs/install.md).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import threading
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import kubernetes

import resourceslice as rs
from resourceslice import kubeletplugin

DRIVER = "demo.example.com"
log = logging.getLogger("demo-driver")


@dataclasses.dataclass
class DemoConfig:
    """The opaque configuration a DeviceClass or a claim gives the demo devices, e.g.
    ``{"apiVersion": "demo.example.com/v1", "kind": "DemoConfig", "greeting": "hi"}``."""

    api_version: Literal["demo.example.com/v1"]
    kind: Literal["DemoConfig"]
    greeting: str = "hello"


class DemoDriver:
    """Four demo devices per node; preparing one gives the container ``DEMO_DEVICE_<n>=1``
    (and ``DEMO_DEVICE_<n>_GREETING`` when configured)."""

    def __init__(
        self,
        cdi: kubeletplugin.CDISpecWriter,
        count: int = 4,
        device_status: rs.DeviceStatusWriter | None = None,
    ) -> None:
        self.cdi = cdi
        self.count = count
        self.device_status = device_status

    def devices(self) -> list[rs.Device]:
        """The node's devices, in the REST JSON shape (what ``kubectl get -o json`` shows)."""
        return [
            {"name": f"demo-{i}", "attributes": {"index": {"int": i}}} for i in range(self.count)
        ]

    def container_edits(self, device: str, config: DemoConfig | None) -> dict[str, Any]:
        """What a container given ``device`` gets: CDI container edits."""
        env = f"DEMO_DEVICE_{device.split('-')[-1]}"
        greeting = [] if config is None else [f"{env}_GREETING={config.greeting}"]
        return {"env": [f"{env}=1", *greeting]}

    def prepare_resource_claims(
        self, claims: list[kubeletplugin.ResourceClaim]
    ) -> dict[str, kubeletplugin.PrepareResult]:
        # A claim that raises (its CDI spec not written, its configuration not a DemoConfig)
        # fails alone; kubelet retries it.
        return kubeletplugin.prepare_each(claims, self.prepare_claim)

    def prepare_claim(
        self, claim: kubeletplugin.ResourceClaim
    ) -> list[kubeletplugin.PreparedDevice]:
        # This driver's devices only (a claim can hold other drivers' too), each with the
        # configuration that wins for it: the claim's over its DeviceClass's.
        devices = kubeletplugin.allocated_devices(claim, self.cdi.driver, DemoConfig)
        edits = {d.name: self.container_edits(d.name, d.config) for d in devices}
        cdi_ids = self.cdi.write_claim(claim["metadata"]["uid"], edits)
        for d in devices:
            self.report_ready(claim, d, edits[d.name]["env"])
        return [d.prepared([cdi_ids[d.name]]) for d in devices]

    def report_ready(
        self,
        claim: kubeletplugin.ResourceClaim,
        device: kubeletplugin.AllocatedDevice[Any],
        env: list[str],
    ) -> None:
        """The device's entry in the claim's status: Ready, and what its containers get. For
        this driver the status is information only: a failure to write it (a cluster that
        keeps no device status, as 1.32 by default) is logged and the device is prepared."""
        if self.device_status is None:
            return
        try:
            self.device_status.set(
                claim, pool=device.pool, device=device.name, share_id=device.share_id,
                conditions=[{"type": "Ready", "status": "True", "reason": "Prepared"}],
                data={"env": env},
            )  # fmt: skip
        except (rs.ResourceSliceError, rs.ApiError) as exc:
            log.warning("status of %s/%s not written: %s", device.pool, device.name, exc)

    def unprepare_resource_claims(
        self, claims: list[kubeletplugin.ClaimRef]
    ) -> dict[str, BaseException | None]:
        for claim in claims:
            self.cdi.remove_claim(claim.uid)
        return {claim.uid: None for claim in claims}


def run(
    api_client: rs.Connection | kubernetes.client.ApiClient,
    node_name: str,
    *,
    pod_uid: str | None = None,
    cdi_dir: str = kubeletplugin.DEFAULT_CDI_DIR,
    devices: int = 4,
    **options: Any,
) -> kubeletplugin.Helper:
    """Start the kubelet plugin and publish the node's ``devices``; ``options`` go to
    :func:`kubeletplugin.start` (e.g. other directories than kubelet's defaults)."""
    # Each device's status is written as this node's plugin ("<driver>/<node>/...").
    status = rs.DeviceStatusWriter(api_client, driver=DRIVER, node_name=node_name)
    driver = DemoDriver(kubeletplugin.CDISpecWriter(DRIVER, cdi_dir=cdi_dir), devices, status)
    helper = kubeletplugin.start(
        driver,
        driver=DRIVER,
        api_client=api_client,
        node_name=node_name,
        # The pod's UID: old and new pod of a rolling update register side by side.
        rolling_update_uid=pod_uid,
        **options,
    )
    helper.publish_resources(
        rs.DriverResources(pools={node_name: rs.Pool(devices=driver.devices())})
    )
    return helper


def main() -> None:
    # The Pod's service account, with the library's own connection: the node agent never
    # loads the kubernetes package (see docs/operations.md, "What a node agent costs").
    client = rs.Connection.in_cluster()
    # The chart's DaemonSet sets these (kubelet's directories as mounted, which are the
    # host's: kubelet dials the socket path the plugin registers); else kubelet's defaults.
    env = os.environ
    if env.get("DRIVER_NAME", DRIVER) != DRIVER:  # the chart's driver value
        raise SystemExit(f"DRIVER_NAME is {env['DRIVER_NAME']!r}: this driver is {DRIVER!r}")
    helper = run(
        client,
        env["NODE_NAME"],
        pod_uid=env.get("POD_UID"),
        cdi_dir=env.get("CDI_DIR", kubeletplugin.DEFAULT_CDI_DIR),
        registrar_dir=env.get("KUBELET_REGISTRAR_DIR", kubeletplugin.KUBELET_REGISTRY_DIR),
        plugin_data_dir=env.get(
            "KUBELET_PLUGIN_DATA_DIR", f"{kubeletplugin.KUBELET_PLUGINS_DIR}/{DRIVER}"
        ),
    )
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    stopping.wait()
    helper.stop()  # unregisters; the slices stay (the Node owns them, kubelet cleans up)


if __name__ == "__main__":
    main()
