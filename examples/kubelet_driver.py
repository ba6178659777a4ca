"""A whole node-local DRA driver in Python: it publishes its devices and prepares them.

Runs as a DaemonSet pod on each node (examples/kubelet-driver.yaml): it publishes the node's
devices as ResourceSlices (the Node owns them), registers with kubelet, and, when a pod that
was allocated some of its devices starts, writes a CDI spec for the pod's claim so that the
container runtime gives each container its devices (here: an environment variable per
device; a real driver adds device nodes and mounts).

    NODE_NAME=... POD_UID=... python examples/kubelet_driver.py   # in the pod

Needs ``pip install resourceslice[kubelet]``.
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

import kubernetes

import resourceslice as rs
from resourceslice import kubeletplugin

DRIVER = "demo.example.com"


class DemoDriver:
    """Four demo devices per node; preparing one gives the container ``DEMO_DEVICE_<n>=1``."""

    def __init__(self, cdi: kubeletplugin.CDISpecWriter, count: int = 4) -> None:
        self.cdi = cdi
        self.count = count

    def devices(self) -> list[rs.Device]:
        """The node's devices, in the REST JSON shape (what ``kubectl get -o json`` shows)."""
        return [
            {"name": f"demo-{i}", "attributes": {"index": {"int": i}}} for i in range(self.count)
        ]

    def container_edits(self, device: str) -> dict[str, Any]:
        """What a container given ``device`` gets: CDI container edits."""
        return {"env": [f"DEMO_DEVICE_{device.split('-')[-1]}=1"]}

    def prepare_resource_claims(
        self, claims: list[kubeletplugin.ResourceClaim]
    ) -> dict[str, kubeletplugin.PrepareResult]:
        results = {}
        for claim in claims:
            uid = claim["metadata"]["uid"]
            # A claim can hold devices of other drivers too: only ours are ours to prepare.
            allocated = [
                r
                for r in claim["status"]["allocation"]["devices"]["results"]
                if r["driver"] == self.cdi.driver
            ]
            edits = {r["device"]: self.container_edits(r["device"]) for r in allocated}
            try:
                cdi_ids = self.cdi.write_claim(uid, edits)
            except OSError as exc:  # this claim fails; kubelet retries it
                results[uid] = kubeletplugin.PrepareResult(error=exc)
                continue
            results[uid] = kubeletplugin.PrepareResult(
                devices=[
                    kubeletplugin.Device(
                        pool_name=r["pool"],
                        device_name=r["device"],
                        requests=[r["request"]],
                        cdi_device_ids=[cdi_ids[r["device"]]],
                    )
                    for r in allocated
                ]
            )
        return results

    def unprepare_resource_claims(
        self, claims: list[kubeletplugin.ClaimRef]
    ) -> dict[str, BaseException | None]:
        for claim in claims:
            self.cdi.remove_claim(claim.uid)
        return {claim.uid: None for claim in claims}


def run(
    api_client: kubernetes.client.ApiClient,
    node_name: str,
    *,
    pod_uid: str | None = None,
    cdi_dir: str = kubeletplugin.DEFAULT_CDI_DIR,
    devices: int = 4,
    **options: Any,
) -> kubeletplugin.Helper:
    """Start the kubelet plugin and publish the node's ``devices``; ``options`` go to
    :func:`kubeletplugin.start` (e.g. other directories than kubelet's defaults)."""
    driver = DemoDriver(kubeletplugin.CDISpecWriter(DRIVER, cdi_dir=cdi_dir), devices)
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
    kubernetes.config.load_incluster_config()  # type: ignore[no-untyped-call]
    client = kubernetes.client.ApiClient()
    helper = run(client, os.environ["NODE_NAME"], pod_uid=os.environ.get("POD_UID"))
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    stopping.wait()
    helper.stop()  # unregisters; the slices stay (the Node owns them, kubelet cleans up)


if __name__ == "__main__":
    main()
