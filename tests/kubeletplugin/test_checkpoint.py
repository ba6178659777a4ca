"""The checkpoint of prepared claims, with kubelet's own DRA client (the kubelet harness) and
claims on the real apiserver: what is recorded, when the driver is called again, what
unprepare is given, what a restart puts right, and what happens to a file that cannot be
read."""

from __future__ import annotations

import asyncio
import errno
import hashlib
import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest

from resourceslice import kubeletplugin
from resourceslice._http import send_json
from resourceslice.kubeletplugin import checkpoint as checkpoint_file
from resourceslice.testing.kubelet import KubeletHarness
from support.kubelet_env import allocated_claim, claims_path, delete_claim, driver_name, uid

pytestmark = pytest.mark.integration


class PartitionDriver:
    """A driver that makes something new for each claim it prepares (a "partition", with an
    ID of its own each time), writes the claim's CDI spec with it, and records it; unprepare
    notes what it was given."""

    def __init__(self, driver: str, cdi_dir: Path) -> None:
        self.driver = driver
        self.cdi = kubeletplugin.CDISpecWriter(driver, cdi_dir=cdi_dir)
        self.prepared: list[str] = []
        self.unprepared: list[tuple[str, Any]] = []
        self.unprepare_error: str | None = None
        self.data: Any = None  # what to record instead of the partition, when set
        self.fail_after_write: str | None = None  # prepare fails once the spec is written

    def prepare_resource_claims(
        self, claims: list[kubeletplugin.ResourceClaim]
    ) -> dict[str, kubeletplugin.PrepareResult]:
        return kubeletplugin.prepare_each(claims, self.prepare_claim)

    def prepare_claim(self, claim: kubeletplugin.ResourceClaim) -> kubeletplugin.PrepareResult:
        claim_uid = claim["metadata"]["uid"]
        self.prepared.append(claim_uid)
        partition = uuid.uuid4().hex[:8]
        mine = kubeletplugin.allocated_devices(claim, self.driver)
        ids = self.cdi.write_claim(
            claim_uid, {d.name: {"env": [f"PARTITION={partition}"]} for d in mine}
        )
        if self.fail_after_write is not None:
            raise RuntimeError(self.fail_after_write)
        data = {"partition": partition} if self.data is None else self.data
        return kubeletplugin.PrepareResult(
            devices=[d.prepared([ids[d.name]]) for d in mine], data=data
        )

    def unprepare_resource_claims(
        self, claims: list[kubeletplugin.ClaimRef]
    ) -> dict[str, BaseException | None]:
        results: dict[str, BaseException | None] = {}
        for claim in claims:
            self.unprepared.append((claim.uid, None if claim.record is None else claim.record.data))
            if self.unprepare_error is not None:
                results[claim.uid] = RuntimeError(self.unprepare_error)
                continue
            self.cdi.remove_claim(claim.uid)
            results[claim.uid] = None
        return results


class Node:
    """One test's node: kubelet's directories, a CDI directory, the plugins started."""

    def __init__(self, request: pytest.FixtureRequest, node_dir: Path, client: Any) -> None:
        self.driver = driver_name(request.node.name)
        self.dir = node_dir
        self.client = client
        self.cdi_dir = node_dir / "cdi"
        self.plugin_dir = node_dir / "plugins" / self.driver
        self.checkpoint = self.plugin_dir / checkpoint_file.FILE_NAME
        self.helper: kubeletplugin.Helper | None = None
        self.errors: list[tuple[BaseException, str]] = []
        self.claims: list[str] = []
        (node_dir / "registry").mkdir(exist_ok=True)

    def start(self, plugin: Any = None, **kwargs: Any) -> PartitionDriver:
        """A plugin process started anew (the previous one stopped): a new driver object."""
        self.stop()
        driver = plugin or PartitionDriver(self.driver, self.cdi_dir)
        self.helper = kubeletplugin.start(
            driver,
            driver=self.driver,
            api_client=self.client,
            registrar_dir=str(self.dir / "registry"),
            plugin_data_dir=str(self.plugin_dir),
            error_handler=lambda exc, msg: self.errors.append((exc, msg)),
            **kwargs,
        )
        return driver

    def reconciled(self) -> kubeletplugin.Reconciliation:
        assert self.helper is not None and self.helper.checkpoint is not None
        report = self.helper.checkpoint.wait_reconciled(60)
        assert report is not None
        return report

    def stop(self) -> None:
        if self.helper is not None:
            self.helper.stop()
            self.helper = None

    def claim(self, name: str, devices: list[str]) -> dict[str, Any]:
        claim = allocated_claim(
            self.client, self.driver, f"{self.driver.split('.')[0][:40]}-{name}", devices
        )
        self.claims.append(claim["metadata"]["name"])
        return claim

    def records(self) -> dict[str, Any]:
        """The file's records, as stored, once its checksum is checked here."""
        document = json.loads(self.checkpoint.read_text())
        assert document["version"] == 1
        body = document["checkpoint"]
        canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
        assert document["checksum"] == "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()
        claims: dict[str, Any] = body["claims"]
        return claims

    def close(self) -> None:
        self.stop()
        for name in self.claims:
            try:
                delete_claim(self.client, name)
            except kubernetes.client.ApiException as exc:
                if exc.status != 404:
                    raise


@pytest.fixture
def node_type() -> type[Node]:
    """This module's node for the shared ``node`` fixture."""
    return Node


def prepared(answer: dict[str, Any], claim: dict[str, Any]) -> dict[str, Any]:
    """A claim's entry of kubelet's answer, which must be a success."""
    assert "error" not in answer, answer
    entry: dict[str, Any] = answer["claims"][uid(claim)]
    assert entry["error"] == "", entry
    return entry


def test_a_prepared_claim_is_recorded_and_a_repeated_prepare_answered_from_it(
    node: Node, kubelet: KubeletHarness
) -> None:
    driver = node.start()
    kubelet.wait_registered(node.driver)
    claim = node.claim("one", ["dev-0", "dev-1"])
    first = prepared(kubelet.prepare(node.driver, [claim]), claim)

    # On disk, checksummed, before kubelet had the answer: the devices as kubelet got them,
    # the driver's data, the CDI spec the driver wrote.
    (partition,) = {d["data"]["partition"] for d in node.records().values()}
    record = node.records()[uid(claim)]
    assert [(d["device"], d["cdiDeviceIDs"]) for d in record["devices"]] == [
        (d["deviceName"], d["cdiDeviceIDs"]) for d in first["devices"]
    ]
    spec_path = node.cdi_dir / f"{node.driver}-{uid(claim)}.json"
    assert record["cdiSpecs"] == {str(spec_path): json.loads(spec_path.read_text())}
    assert f"PARTITION={partition}" in spec_path.read_text()

    # kubelet asks again (its retry, its restart): the record answers, the driver is not
    # called, neither by this process nor by a restarted one.
    assert prepared(kubelet.prepare(node.driver, [claim]), claim) == first
    assert driver.prepared == [uid(claim)]
    seen = len(kubelet.events())
    restarted = node.start()
    kubelet.wait_registered(node.driver, after=seen)
    assert prepared(kubelet.prepare(node.driver, [claim]), claim) == first
    assert restarted.prepared == []
    assert node.helper is not None and node.helper.checkpoint is not None
    assert node.helper.checkpoint.stats().answered == 1
    assert f"PARTITION={partition}" in spec_path.read_text()


def test_unprepare_gets_the_record_also_after_a_restart_and_removes_it_once_done(
    node: Node, kubelet: KubeletHarness
) -> None:
    node.start()
    kubelet.wait_registered(node.driver)
    claim = node.claim("one", ["dev-0"])
    prepared(kubelet.prepare(node.driver, [claim]), claim)
    data = node.records()[uid(claim)]["data"]

    seen = len(kubelet.events())
    driver = node.start()
    kubelet.wait_registered(node.driver, after=seen)
    driver.unprepare_error = "partition busy"
    answer = kubelet.unprepare(node.driver, [claim])
    assert answer["claims"][uid(claim)]["error"] == "RuntimeError: partition busy"
    assert driver.unprepared == [(uid(claim), data)]
    assert list(node.records()) == [uid(claim)]  # kept: kubelet retries

    driver.unprepare_error = None
    assert kubelet.unprepare(node.driver, [claim])["claims"][uid(claim)]["error"] == ""
    assert driver.unprepared == [(uid(claim), data), (uid(claim), data)]
    assert node.records() == {}
    assert not (node.cdi_dir / f"{node.driver}-{uid(claim)}.json").exists()

    # Repeated (kubelet retries until it has an answer): the driver is called, without one.
    assert kubelet.unprepare(node.driver, [claim])["claims"][uid(claim)]["error"] == ""
    assert driver.unprepared[-1] == (uid(claim), None)


def test_a_claim_allocated_anew_is_unprepared_then_prepared_again(
    node: Node, kubelet: KubeletHarness
) -> None:
    driver = node.start()
    kubelet.wait_registered(node.driver)
    claim = node.claim("one", ["dev-0"])
    prepared(kubelet.prepare(node.driver, [claim]), claim)
    old = node.records()[uid(claim)]["data"]

    # Deallocated, and allocated again under the same UID (another device).
    path = f"{claims_path()}/{claim['metadata']['name']}/status"
    current = json.loads(send_json(node.client, "PUT", path, json.dumps({**claim, "status": {}})))
    current["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "req", "driver": node.driver, "pool": "node-1", "device": "dev-3"}
                ]
            }
        }
    }
    send_json(node.client, "PUT", path, json.dumps(current).encode())

    entry = prepared(kubelet.prepare(node.driver, [claim]), claim)
    assert [d["deviceName"] for d in entry["devices"]] == ["dev-3"]
    assert driver.unprepared == [(uid(claim), old)]
    assert driver.prepared == [uid(claim), uid(claim)]
    record = node.records()[uid(claim)]
    assert record["data"] != old and [d["device"] for d in record["devices"]] == ["dev-3"]


def test_what_prepare_returns_must_be_json_to_be_recorded(
    node: Node, kubelet: KubeletHarness
) -> None:
    driver = node.start()
    kubelet.wait_registered(node.driver)
    driver.data = {"handle": object()}
    claim = node.claim("one", ["dev-0"])
    error = kubelet.prepare(node.driver, [claim])["claims"][uid(claim)]["error"]
    assert error.startswith("the prepare result's data is not JSON")
    assert not node.checkpoint.exists() or node.records() == {}

    driver.data = None
    prepared(kubelet.prepare(node.driver, [claim]), claim)
    assert driver.prepared == [uid(claim), uid(claim)]  # not recorded: called again


def test_a_checkpoint_not_written_fails_the_claim_and_the_retry_prepares_again(
    node: Node, kubelet: KubeletHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    driver = node.start()
    kubelet.wait_registered(node.driver)
    first, claim = node.claim("a", ["dev-0"]), node.claim("b", ["dev-1"])
    prepared(kubelet.prepare(node.driver, [first]), first)
    before = node.checkpoint.read_text()
    real_fsync = os.fsync

    def disk_full(fd: int) -> None:
        # The driver's CDI spec is written: the checkpoint's own write is the one that fails.
        if os.readlink(f"/proc/self/fd/{fd}").startswith(str(node.plugin_dir)):
            raise OSError(errno.ENOSPC, "No space left on device")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", disk_full)
    error = kubelet.prepare(node.driver, [claim])["claims"][uid(claim)]["error"]
    assert "prepared, but the checkpoint was not written" in error
    assert "No space left on device" in error
    assert node.checkpoint.read_text() == before
    assert [msg for _, msg in node.errors] == ["the checkpoint was not written"]
    assert [p.name for p in node.plugin_dir.iterdir() if "checkpoint" in p.name] == [
        checkpoint_file.FILE_NAME
    ]

    monkeypatch.setattr(os, "fsync", real_fsync)
    prepared(kubelet.prepare(node.driver, [claim]), claim)
    assert driver.prepared == [uid(first), uid(claim), uid(claim)]
    assert sorted(node.records()) == sorted([uid(first), uid(claim)])


def test_a_restart_restores_the_recorded_cdi_specs_and_removes_the_drivers_others(
    node: Node, kubelet: KubeletHarness
) -> None:
    node.start()
    kubelet.wait_registered(node.driver)
    claim = node.claim("one", ["dev-0"])
    prepared(kubelet.prepare(node.driver, [claim]), claim)
    spec = node.cdi_dir / f"{node.driver}-{uid(claim)}.json"
    content = json.loads(spec.read_text())
    node.stop()

    # A reboot emptied the CDI directory (a tmpfs); a crash left a spec of a claim that was
    # never recorded, and half of a write.
    shutil.rmtree(node.cdi_dir)
    node.cdi_dir.mkdir()
    stray = str(uuid.uuid4())
    orphan = node.cdi_dir / f"{node.driver}-{stray}.json"
    orphan.write_text("{}")
    half = node.cdi_dir / f".{node.driver}-{stray}.json.x1y2.tmp"
    half.write_text('{"cdiVer')
    # Not this driver's: another driver's spec (whose name starts like one of ours), a
    # file of another shape.
    others = [
        node.cdi_dir / f"{node.driver}-gpu-{uuid.uuid4()}.json",
        node.cdi_dir / f"{node.driver}-common.json",
        node.cdi_dir / f"other.example.com-{uuid.uuid4()}.json",
    ]
    for other in others:
        other.write_text("{}")

    seen = len(kubelet.events())
    driver = node.start()
    report = node.reconciled()
    assert report.cdi_specs_restored == [str(spec)]
    assert sorted(report.cdi_specs_removed) == sorted([str(orphan), str(half)])
    assert json.loads(spec.read_text()) == content
    assert sorted(node.cdi_dir.iterdir()) == sorted([spec, *others])
    kubelet.wait_registered(node.driver, after=seen)
    prepared(kubelet.prepare(node.driver, [claim]), claim)
    assert driver.prepared == []


def test_a_spec_of_a_prepare_that_never_finished_is_removed_at_start(
    node: Node, kubelet: KubeletHarness
) -> None:
    """The very first prepare on a node writes its spec and fails (or the plugin dies): the
    directory was recorded before the spec was written, so the next start finds it."""
    driver = node.start()
    kubelet.wait_registered(node.driver)
    driver.fail_after_write = "partition not ready"
    claim = node.claim("one", ["dev-0"])
    error = kubelet.prepare(node.driver, [claim])["claims"][uid(claim)]["error"]
    assert error == "RuntimeError: partition not ready"
    spec = node.cdi_dir / f"{node.driver}-{uid(claim)}.json"
    assert spec.exists() and node.records() == {}

    node.start()
    assert node.reconciled().cdi_specs_removed == [str(spec)]
    assert not spec.exists()


def test_a_claim_gone_while_the_plugin_was_down_is_unprepared_at_start(
    node: Node, kubelet: KubeletHarness
) -> None:
    node.start()
    kubelet.wait_registered(node.driver)
    gone, replaced, kept = (node.claim(n, [f"dev-{i}"]) for i, n in enumerate("abc"))
    for claim in (gone, replaced, kept):
        prepared(kubelet.prepare(node.driver, [claim]), claim)
    data = {u: r["data"] for u, r in node.records().items()}
    node.stop()

    delete_claim(node.client, gone["metadata"]["name"])
    delete_claim(node.client, replaced["metadata"]["name"])
    newer = node.claim("b", ["dev-1"])  # the same name, another claim
    assert uid(newer) != uid(replaced)

    driver = node.start()
    report = node.reconciled()
    assert sorted(ref.uid for ref in report.unprepared) == sorted([uid(gone), uid(replaced)])
    assert report.unprepare_failed == {} and report.unchecked == {}
    assert sorted(driver.unprepared) == sorted(
        [(uid(gone), data[uid(gone)]), (uid(replaced), data[uid(replaced)])]
    )
    assert list(node.records()) == [uid(kept)]
    assert node.helper is not None and node.helper.checkpoint is not None
    stats = node.helper.checkpoint.stats()
    assert (stats.claims_unprepared, stats.records) == (2, 1)

    # Once only: the next start finds nothing more to do.
    driver = node.start()
    assert node.reconciled().unprepared == [] and driver.unprepared == []


def test_the_metrics_count_what_the_checkpoint_did(node: Node, kubelet: KubeletHarness) -> None:
    from prometheus_client import CollectorRegistry

    from resourceslice.kubeletplugin import metrics

    node.start()
    kubelet.wait_registered(node.driver)
    claims = [node.claim("a", ["dev-0"]), node.claim("b", ["dev-1"])]
    for claim in claims:
        prepared(kubelet.prepare(node.driver, [claim]), claim)
    node.stop()
    delete_claim(node.client, claims[0]["metadata"]["name"])
    seen = len(kubelet.events())
    node.start()
    node.reconciled()
    kubelet.wait_registered(node.driver, after=seen)
    prepared(kubelet.prepare(node.driver, [claims[1]]), claims[1])

    registry = CollectorRegistry()
    assert node.helper is not None
    metrics.register(node.helper, registry=registry)

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, {"driver": node.driver, **labels})

    assert value("resourceslice_checkpoint_claims") == 1
    assert value("resourceslice_checkpoint_usable") == 1
    # This process's: the repeated prepare answered, the gone claim unprepared at start.
    assert value("resourceslice_checkpoint_prepares_total", source="checkpoint") == 1
    assert value("resourceslice_checkpoint_prepares_total", source="driver") == 0
    assert value("resourceslice_checkpoint_unprepares_total") == 1
    assert value("resourceslice_checkpoint_reconciled_total", action="claim_unprepared") == 1
    assert value("resourceslice_checkpoint_reconciled_total", action="cdi_spec_removed") == 0
    assert value("resourceslice_checkpoint_set_aside_total") == 0


def test_a_failed_unprepare_at_start_is_reported_and_the_record_kept(
    node: Node, kubelet: KubeletHarness
) -> None:
    node.start()
    kubelet.wait_registered(node.driver)
    claim = node.claim("one", ["dev-0"])
    prepared(kubelet.prepare(node.driver, [claim]), claim)
    node.stop()
    delete_claim(node.client, claim["metadata"]["name"])

    driver = PartitionDriver(node.driver, node.cdi_dir)
    driver.unprepare_error = "partition busy"
    node.start(driver)
    report = node.reconciled()
    assert report.unprepare_failed == {uid(claim): "RuntimeError: partition busy"}
    assert len(driver.unprepared) == 1  # once
    assert list(node.records()) == [uid(claim)]
    assert any(uid(claim) in msg for _, msg in node.errors)


def test_an_unreadable_checkpoint_is_set_aside_and_reported(
    node: Node, kubelet: KubeletHarness
) -> None:
    node.start()
    kubelet.wait_registered(node.driver)
    claim = node.claim("one", ["dev-0"])
    prepared(kubelet.prepare(node.driver, [claim]), claim)
    node.stop()
    # One record's device changed behind the checksum's back.
    text = node.checkpoint.read_text().replace('"dev-0"', '"dev-9"')
    node.checkpoint.write_text(text)

    seen = len(kubelet.events())
    driver = node.start()
    report = node.reconciled()
    assert report.set_aside is not None
    aside = Path(report.set_aside)
    assert aside.parent == node.plugin_dir and aside.name.startswith(checkpoint_file.FILE_NAME)
    assert aside.read_text() == text  # kept for whoever looks
    assert not node.checkpoint.exists()
    assert [msg for _, msg in node.errors] == [
        "checkpoint records lost: the driver prepares those claims again"
    ]
    assert f"kept as {aside}" in str(node.errors[0][0])
    assert "checksum 'sha256:" in str(node.errors[0][0])  # what was wrong with it
    # Serving: with nothing recorded, the driver prepares the claim again, and it is recorded.
    kubelet.wait_registered(node.driver, after=seen)
    prepared(kubelet.prepare(node.driver, [claim]), claim)
    assert driver.prepared == [uid(claim)]
    assert list(node.records()) == [uid(claim)]
    assert node.helper is not None and node.helper.checkpoint is not None
    assert node.helper.checkpoint.stats().set_aside == 1


@pytest.mark.parametrize("content", ["not JSON", '{"version": 1, "checkpoint": {}}'])
def test_a_checkpoint_that_is_not_one_is_set_aside(
    node: Node, kubelet: KubeletHarness, content: str
) -> None:
    node.plugin_dir.mkdir(parents=True)
    node.checkpoint.write_text(content)
    node.start()
    report = node.reconciled()
    assert report.set_aside is not None and Path(report.set_aside).read_text() == content
    kubelet.wait_registered(node.driver)
    claim = node.claim("one", ["dev-0"])
    prepared(kubelet.prepare(node.driver, [claim]), claim)


def test_a_checkpoint_of_another_version_is_kept_and_calls_fail_until_it_is_moved(
    node: Node, kubelet: KubeletHarness
) -> None:
    node.plugin_dir.mkdir(parents=True)
    newer = '{"version": 2, "checksum": "sha512:...", "checkpoint": {"claims": {}}}\n'
    node.checkpoint.write_text(newer)
    driver = node.start()
    report = node.reconciled()
    assert report.unusable is not None and "version 2" in report.unusable
    kubelet.wait_registered(node.driver)
    claim = node.claim("one", ["dev-0"])
    error = kubelet.prepare(node.driver, [claim])["claims"][uid(claim)]["error"]
    assert f"the checkpoint {node.checkpoint} is of version 2" in error
    assert "move the file away" in error
    error = kubelet.unprepare(node.driver, [claim])["claims"][uid(claim)]["error"]
    assert "version 2" in error
    assert driver.prepared == [] and driver.unprepared == []
    assert node.checkpoint.read_text() == newer  # not overwritten
    assert node.helper is not None and node.helper.checkpoint is not None
    assert not node.helper.checkpoint.stats().usable
    assert [msg for _, msg in node.errors] == [
        "the checkpoint cannot be used: prepare and unprepare fail until it can"
    ]

    # Moved away by an operator, and the plugin restarted: it serves again.
    node.checkpoint.rename(node.plugin_dir / "newer.json")
    seen = len(kubelet.events())
    node.start()
    kubelet.wait_registered(node.driver, after=seen)
    prepared(kubelet.prepare(node.driver, [claim]), claim)


class AsyncPartitionDriver(PartitionDriver):
    """The same driver with coroutine callbacks, which write their specs on the loop."""

    async def prepare_resource_claims(  # type: ignore[override]
        self, claims: list[kubeletplugin.ResourceClaim]
    ) -> dict[str, kubeletplugin.PrepareResult]:
        await asyncio.sleep(0)
        return PartitionDriver.prepare_resource_claims(self, claims)

    async def unprepare_resource_claims(  # type: ignore[override]
        self, claims: list[kubeletplugin.ClaimRef]
    ) -> dict[str, BaseException | None]:
        return PartitionDriver.unprepare_resource_claims(self, claims)


def test_a_coroutine_callbacks_specs_are_recorded_too(node: Node, kubelet: KubeletHarness) -> None:
    """The specs written on the event loop are the call's: the record follows the call's
    context into the coroutine's task."""
    driver = node.start(AsyncPartitionDriver(node.driver, node.cdi_dir))
    kubelet.wait_registered(node.driver)
    claim = node.claim("one", ["dev-0"])
    prepared(kubelet.prepare(node.driver, [claim]), claim)
    spec = node.cdi_dir / f"{node.driver}-{uid(claim)}.json"
    assert node.records()[uid(claim)]["cdiSpecs"] == {str(spec): json.loads(spec.read_text())}
    data = node.records()[uid(claim)]["data"]
    assert kubelet.unprepare(node.driver, [claim])["claims"][uid(claim)]["error"] == ""
    assert driver.unprepared == [(uid(claim), data)]


def test_a_driver_that_keeps_its_own_turns_it_off(node: Node, kubelet: KubeletHarness) -> None:
    driver = node.start(checkpoint=False)
    assert node.helper is not None and node.helper.checkpoint is None
    kubelet.wait_registered(node.driver)
    claim = node.claim("one", ["dev-0"])
    prepared(kubelet.prepare(node.driver, [claim]), claim)
    prepared(kubelet.prepare(node.driver, [claim]), claim)
    assert driver.prepared == [uid(claim), uid(claim)]
    assert kubelet.unprepare(node.driver, [claim])["claims"][uid(claim)]["error"] == ""
    assert driver.unprepared == [(uid(claim), None)]
    assert not node.checkpoint.exists()


def test_the_checkpoint_needs_one_call_at_a_time(node: Node) -> None:
    with pytest.raises(ValueError, match="serialize"):
        node.start(serialize=False)
    node.start(serialize=False, checkpoint=False)
