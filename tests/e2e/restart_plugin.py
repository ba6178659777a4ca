"""The driver of test_restarts.py, in a process of its own so that the test can SIGKILL it:
``python -m e2e.restart_plugin '<settings as JSON>'`` (run from tests/).

Each prepare makes a "partition" with an ID of its own, as a driver that creates a MIG device
or a network interface gets one it cannot choose: the container gets
``PARTITION_<device>=<id>`` through the claim's CDI spec, and the ID is recorded
(``PrepareResult.data``). Every call is appended to a log file, which outlives the process.

``kill`` names where the process SIGKILLs itself, at its first prepare:

- ``in-prepare``: inside the driver's prepare, once the claim's CDI spec is written;
- ``before-answer``: once the helper's prepare is done (the claim recorded in the
  checkpoint), before the answer goes back to kubelet.

On stdout, one JSON object a line: ``{"ready": true}`` once registered and published,
``{"reconciled": <report>}`` once the start's reconciliation is done. Stops (the helper's
``stop()``) when stdin closes.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sys
import uuid
from typing import Any

import resourceslice as rs
from resourceslice import kubeletplugin
from resourceslice._kubeclient import kubeconfig_client

DRIVER = "restart.e2e.example.com"
DEVICES = [{"name": f"part-{i}"} for i in range(4)]


def env_name(device: str) -> str:
    return f"PARTITION_{device.replace('-', '_')}"


class PartitionDriver:
    def __init__(self, cdi_dir: str, log: str, kill: str | None) -> None:
        self.cdi = kubeletplugin.CDISpecWriter(DRIVER, cdi_dir=cdi_dir)
        self.log_fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.kill = kill

    def log(self, entry: dict[str, Any]) -> None:
        os.write(self.log_fd, (json.dumps(entry) + "\n").encode())  # one write: one line

    def die(self) -> None:
        self.log({"call": "killed", "at": self.kill})
        os.kill(os.getpid(), signal.SIGKILL)

    def prepare_resource_claims(
        self, claims: list[kubeletplugin.ResourceClaim]
    ) -> dict[str, kubeletplugin.PrepareResult]:
        return kubeletplugin.prepare_each(claims, self.prepare_claim)

    def prepare_claim(self, claim: kubeletplugin.ResourceClaim) -> kubeletplugin.PrepareResult:
        claim_uid = claim["metadata"]["uid"]
        partition = uuid.uuid4().hex[:8]
        devices = kubeletplugin.allocated_devices(claim, DRIVER)
        ids = self.cdi.write_claim(
            claim_uid, {d.name: {"env": [f"{env_name(d.name)}={partition}"]} for d in devices}
        )
        self.log({"call": "prepare", "uid": claim_uid, "partition": partition})
        if self.kill == "in-prepare":
            self.die()
        return kubeletplugin.PrepareResult(
            devices=[d.prepared([ids[d.name]]) for d in devices], data={"partition": partition}
        )

    def unprepare_resource_claims(
        self, claims: list[kubeletplugin.ClaimRef]
    ) -> dict[str, BaseException | None]:
        for claim in claims:
            data = None if claim.record is None else claim.record.data
            self.log({"call": "unprepare", "uid": claim.uid, "data": data})
            self.cdi.remove_claim(claim.uid)
        return {claim.uid: None for claim in claims}


def kill_before_answering(driver: PartitionDriver) -> None:
    """The helper's prepare, then death before the gRPC answer is sent."""
    prepare = kubeletplugin.Helper.prepare

    def prepare_then_die(self: kubeletplugin.Helper, *args: Any, **kwargs: Any) -> Any:
        results = prepare(self, *args, **kwargs)
        if any(r.error is None for r in results.values()):
            driver.die()
        return results

    kubeletplugin.Helper.prepare = prepare_then_die  # type: ignore[method-assign]


def main() -> None:
    settings = json.loads(sys.argv[1])
    driver = PartitionDriver(settings["cdi_dir"], settings["log"], settings.get("kill"))
    if driver.kill == "before-answer":
        kill_before_answering(driver)
    client = kubeconfig_client(settings["kubeconfig"])
    with kubeletplugin.start(
        driver,
        driver=DRIVER,
        api_client=client,
        node_name=settings["node"],
        registrar_dir=settings["registry_dir"],
        plugin_data_dir=settings["plugin_data_dir"],
    ) as helper:
        helper.publish_resources(
            rs.DriverResources(pools={settings["node"]: rs.Pool(devices=list(DEVICES))})
        )
        assert helper.controller is not None and helper.controller.wait_synced(timeout=60)
        print(json.dumps({"ready": True}), flush=True)
        assert helper.checkpoint is not None
        report = helper.checkpoint.wait_reconciled(timeout=60)
        assert report is not None
        print(json.dumps({"reconciled": dataclasses.asdict(report)}), flush=True)
        sys.stdin.read()


if __name__ == "__main__":
    main()
