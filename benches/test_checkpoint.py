"""What the checkpoint of prepared claims costs a prepare: kubelet's NodePrepareResources of
one claim of 1 and 8 devices, as kubelet's DRA client sends it (the kubelet harness), against a
plugin with the checkpoint and one without (``checkpoint=False``), on the real apiserver.

Each round prepares a claim that is not prepared (an unprepare, not timed, before each), so
the driver runs — it writes the claim's CDI spec — and, with the checkpoint, the claim is
recorded (the file written and synced, the directory synced) before the answer. ``answered``:
the same claim prepared again, with the checkpoint: answered from the record, the driver not
called.

Run: ``.venv/bin/pytest benches/test_checkpoint.py --benchmark-enable -s``.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from resourceslice import kubeletplugin
from resourceslice._http import send_json
from resourceslice.testing import TestCluster
from resourceslice.testing.kubelet import KubeletHarness

DRIVER = "bench-checkpoint.example.com"
ROUNDS = 60


class CDIDriver:
    """The example driver's prepare: the claim's devices, one CDI spec per claim."""

    def __init__(self, cdi_dir: Path) -> None:
        self.cdi = kubeletplugin.CDISpecWriter(DRIVER, cdi_dir=cdi_dir)
        self.prepares = 0

    def prepare_resource_claims(
        self, claims: list[kubeletplugin.ResourceClaim]
    ) -> dict[str, kubeletplugin.PrepareResult]:
        return kubeletplugin.prepare_each(claims, self.prepare_claim)

    def prepare_claim(self, claim: kubeletplugin.ResourceClaim) -> kubeletplugin.PrepareResult:
        self.prepares += 1
        devices = kubeletplugin.allocated_devices(claim, DRIVER)
        edits = {d.name: {"env": [f"DEVICE_{d.name.replace('-', '_')}=1"]} for d in devices}
        ids = self.cdi.write_claim(claim["metadata"]["uid"], edits)
        return kubeletplugin.PrepareResult(
            devices=[d.prepared([ids[d.name]]) for d in devices], data={"devices": len(devices)}
        )

    def unprepare_resource_claims(
        self, claims: list[kubeletplugin.ClaimRef]
    ) -> dict[str, BaseException | None]:
        for claim in claims:
            self.cdi.remove_claim(claim.uid)
        return {claim.uid: None for claim in claims}


def allocated_claim(client: Any, name: str, devices: int) -> dict[str, Any]:
    """A claim of ``devices`` devices of DRIVER, allocated as the scheduler would."""
    path = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"
    request = {"name": "req", "exactly": {"deviceClassName": DRIVER, "count": devices}}
    body = {"metadata": {"name": name}, "spec": {"devices": {"requests": [request]}}}
    claim: dict[str, Any] = json.loads(send_json(client, "POST", path, json.dumps(body).encode()))
    results = [
        {"request": "req", "driver": DRIVER, "pool": "node-1", "device": f"dev-{i}"}
        for i in range(devices)
    ]
    claim["status"] = {"allocation": {"devices": {"results": results}}}
    allocated: dict[str, Any] = json.loads(
        send_json(client, "PUT", f"{path}/{name}/status", json.dumps(claim).encode())
    )
    return allocated


@pytest.fixture
def node_dir() -> Iterator[Path]:
    directory = Path(tempfile.mkdtemp(prefix="kpb-", dir="/tmp"))
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.mark.parametrize("devices", [1, 8])
@pytest.mark.parametrize("mode", ["without", "with", "answered"])
def test_prepare(
    benchmark: Any, kube_cluster: TestCluster, node_dir: Path, devices: int, mode: str
) -> None:
    client = kube_cluster.api_client("admin")
    name = f"bench-{mode}-{devices}"
    claim = allocated_claim(client, name, devices)
    uid = claim["metadata"]["uid"]
    driver = CDIDriver(node_dir / "cdi")
    (node_dir / "registry").mkdir()
    try:
        with (
            KubeletHarness.start(node_dir / "registry") as kubelet,
            kubeletplugin.start(
                driver,
                driver=DRIVER,
                api_client=client,
                registrar_dir=str(node_dir / "registry"),
                plugin_data_dir=str(node_dir / "plugins"),
                checkpoint=mode != "without",
            ) as helper,
        ):
            kubelet.wait_registered(DRIVER)

            def prepare() -> dict[str, Any]:
                answer: dict[str, Any] = kubelet.prepare(DRIVER, [claim])
                return answer

            def unprepare() -> None:
                assert kubelet.unprepare(DRIVER, [claim])["claims"][uid]["error"] == ""

            if mode == "answered":
                prepare()
                answer = benchmark.pedantic(prepare, rounds=ROUNDS, warmup_rounds=3)
                assert driver.prepares == 1  # every timed round answered from the record
            else:
                answer = benchmark.pedantic(
                    prepare, setup=unprepare, rounds=ROUNDS, warmup_rounds=3
                )
                # --benchmark-disable (make test's run of the benches): one call, no setup.
                assert driver.prepares == (1 if benchmark.disabled else ROUNDS + 3)
            entry = answer["claims"][uid]
            assert entry["error"] == "" and len(entry["devices"]) == devices
            recorded = helper.checkpoint.records() if helper.checkpoint is not None else {}
            assert list(recorded) == ([] if mode == "without" else [uid])
    finally:
        path = f"/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/{name}"
        send_json(client, "DELETE", path, b"{}")
        client.close()
