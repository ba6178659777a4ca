"""docs/troubleshooting.md quotes each symptom's message as the code gives it: each is
reproduced here, and the page's quote must match it (``<...>`` in a quote stands for what
differs from cluster to cluster: a UID, a user, a directory)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest

import resourceslice as rs
from resourceslice import kubeletplugin
from resourceslice.testing import DRACluster, TestCluster, start_cluster, wait_until
from resourceslice.testing.kubelet import KubeletHarness
from security.rbac_env import bound_role, shipped_role, without_verb
from support.kubelet_env import RecordingPlugin, allocated_claim, delete_claim, uid

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "troubleshooting.md"
DRIVER = "gpu.example.com"


def sections() -> dict[str, str]:
    """The page's sections by heading."""
    parts = re.split(r"^## (.+)$", PAGE.read_text(), flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2]))


def quoted(heading: str) -> str:
    """The message a section quotes: its first ``text`` block."""
    [first, *_] = re.findall(r"```text\n(.*?)\n```", sections()[heading], re.S)
    return str(first)


def assert_quoted(heading: str, message: str) -> None:
    """The section quotes ``message``: all of it, but where the quote has ``<...>``."""
    quote = quoted(heading)
    pattern = "".join(
        ".+?" if re.fullmatch(r"<[\w …-]+>", part) else re.escape(part)
        for part in re.split(r"(<[\w …-]+>)", quote)
    )
    assert re.fullmatch(pattern, message, re.S), f"{heading}:\n  page: {quote}\n  code: {message}"


HEADINGS = {
    "not registered": "A pod stays in ContainerCreating: the driver is not registered",
    "unschedulable": "A pod stays Pending: cannot allocate all claims",
    "registry": "kubeletplugin.start fails: the registration directory is missing",
    "claims 403": "Preparing fails with 403 on resourceclaims",
    "cdi": "A container starts without its devices",
    "unsynced": "wait_synced() returns False",
    "dropped": "DroppedFieldsError: the apiserver dropped fields",
    "pool file": "A pool file is refused: ValidationError",
}


def test_every_symptom_is_reproduced_here() -> None:
    """A section added to the page needs its reproduction in this module."""
    assert set(sections()) == set(HEADINGS.values())


def test_a_quote_that_is_not_the_message_fails() -> None:
    heading = HEADINGS["not registered"]
    assert_quoted(
        heading, "prepare dynamic resources: DRA driver gpu.example.com is not registered"
    )
    for other in (
        "DRA driver gpu.example.com is not registered",  # a part is not the message
        "prepare dynamic resources: DRA driver tpu.example.com is not registered",
    ):
        with pytest.raises(AssertionError):
            assert_quoted(heading, other)


def test_a_refused_pool_file(tmp_path: Path) -> None:
    path = tmp_path / "pools.yaml"
    path.write_text(
        "pools:\n  gpus:\n    allNodes: true\n    devices:\n"
        "      - foreach: {gpu: -1}\n        device: {name: 'gpu-{gpu}'}\n"
    )
    with pytest.raises(rs.ValidationError) as refused:
        rs.load_resources(path)
    assert_quoted(HEADINGS["pool file"], str(refused.value))
    # The command says the same, and exits 2.
    done = subprocess.run(
        [sys.executable, "-m", "resourceslice.cli", "plan", str(path), "--driver", DRIVER],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert str(refused.value).splitlines()[1].strip() in done.stderr


def test_a_missing_registration_directory(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError) as missing:
        kubeletplugin.start(
            RecordingPlugin(DRIVER),
            driver=DRIVER,
            api_client=kubernetes.client.ApiClient(),
            node_name="node-1",
            registrar_dir=str(tmp_path / "plugins_registry"),
            plugin_data_dir=str(tmp_path / "plugins"),
        )
    assert_quoted(HEADINGS["registry"], f"FileNotFoundError: {missing.value}")


@pytest.mark.integration
def test_forbidden_claims(
    kube_cluster: TestCluster, kube_client: kubernetes.client.ApiClient
) -> None:
    """The plugin's account may not read claims: kubelet's prepare gets the 403, one line."""
    node_dir = Path(tempfile.mkdtemp(prefix="ts-", dir="/tmp"))  # short: socket paths
    client = kube_cluster.api_client("driver")  # no rights
    try:
        with KubeletHarness.start(node_dir / "registry") as kubelet, kubeletplugin.start(
            RecordingPlugin(DRIVER), driver=DRIVER, api_client=client, node_name="node-1",
            registrar_dir=str(node_dir / "registry"), plugin_data_dir=str(node_dir / "plugins"),
        ):  # fmt: skip
            kubelet.wait_registered(DRIVER)
            claim = allocated_claim(kube_client, DRIVER, "gpu-claim", ["gpu-0"])
            try:
                answer = kubelet.prepare(DRIVER, [claim])
            finally:
                delete_claim(kube_client, "gpu-claim")
        assert_quoted(HEADINGS["claims 403"], answer["claims"][uid(claim)]["error"])
    finally:
        client.close()
        shutil.rmtree(node_dir, ignore_errors=True)


@pytest.mark.integration
def test_wait_synced_false_and_why(kube_cluster: TestCluster) -> None:
    """A controller whose account may not create slices: not synced, the pool failing with
    the 403, and the error handler's message naming the pool."""
    reported: list[str] = []
    pools = {"rack-1": rs.Pool(devices=[{"name": "gpu-0"}], all_nodes=True)}
    with bound_role(kube_cluster, without_verb(shipped_role(), "create")):
        client = kube_cluster.api_client("driver")
        try:
            with rs.start_controller(
                client,
                driver="unsynced.example.com",
                resources=rs.DriverResources(pools=pools),
                error_handler=lambda exc, message: reported.append(message),
            ) as ctrl:
                assert ctrl.wait_synced(timeout=3) is False
                failing = wait_until(lambda: ctrl.health().failing, timeout=30)
        finally:
            client.close()
    assert list(failing) == ["rack-1"]
    assert_quoted(HEADINGS["unsynced"], failing["rack-1"])
    assert reported[0] == "syncing ResourceSlices of pool 'rack-1'"
    assert f"(`{reported[0]}: …`)" in sections()[HEADINGS["unsynced"]]


@pytest.fixture(scope="module")
def gated_cluster() -> Iterator[TestCluster]:
    with start_cluster(extra_args=["--feature-gates=DRADeviceBindingConditions=false"]) as cluster:
        yield cluster


@pytest.mark.integration
def test_dropped_fields(gated_cluster: TestCluster, caplog: pytest.LogCaptureFixture) -> None:
    """The default error handler's line for fields a disabled feature gate drops."""
    device: Any = {
        "name": "gpu-0",
        "bindingConditions": ["example.com/attached"],
        "bindingFailureConditions": ["example.com/attach-failed"],
        "bindsToNode": True,
    }
    pools = {"rack-1": rs.Pool(devices=[device], all_nodes=True)}
    client = gated_cluster.api_client("admin")
    try:
        with rs.start_controller(
            client, driver=DRIVER, resources=rs.DriverResources(pools=pools)
        ) as ctrl:
            assert ctrl.wait_synced(timeout=60)
            record = wait_until(
                lambda: next((r for r in caplog.records if "dropped" in r.getMessage()), None),
                timeout=30,
            )
    finally:
        client.close()
    assert record.levelname == "ERROR" and record.name == "resourceslice.controller"
    assert_quoted(HEADINGS["dropped"], record.getMessage())


class _EnvPerDevice:
    """Prepares each device with an environment variable, its CDI specs in ``cdi``."""

    def __init__(self, cdi: kubeletplugin.CDISpecWriter) -> None:
        self.cdi = cdi

    def prepare_resource_claims(
        self, claims: list[kubeletplugin.ResourceClaim]
    ) -> dict[str, kubeletplugin.PrepareResult]:
        return kubeletplugin.prepare_each(claims, self.prepare)

    def prepare(self, claim: kubeletplugin.ResourceClaim) -> list[kubeletplugin.PreparedDevice]:
        mine = kubeletplugin.allocated_devices(claim, DRIVER)
        ids = self.cdi.write_claim(
            claim["metadata"]["uid"], {d.name: {"env": ["GPU=1"]} for d in mine}
        )
        return [d.prepared(cdi_device_ids=[ids[d.name]]) for d in mine]

    def unprepare_resource_claims(
        self, claims: list[kubeletplugin.ClaimRef]
    ) -> dict[str, BaseException | None]:
        for claim in claims:
            self.cdi.remove_claim(claim.uid)
        return {c.uid: None for c in claims}


@pytest.mark.integration
def test_what_kubelet_the_scheduler_and_the_runtime_say(
    dra_cluster: DRACluster, tmp_path: Path
) -> None:
    """On the DRA cluster: a pod of a driver that published its devices but runs no plugin
    (kubelet); a pod of a class no device matches (the scheduler); a plugin whose CDI specs
    are not where the runtime reads them (the CDI library)."""
    node = dra_cluster.add_node("node-1")
    client = dra_cluster.api_client()
    owner = rs.Owner(api_version="v1", kind="Node", name="node-1")
    pools = {"node-1": rs.Pool(devices=[{"name": "gpu-0"}])}
    try:
        with rs.start_controller(
            client, driver=DRIVER, owner=owner, resources=rs.DriverResources(pools=pools)
        ) as ctrl:
            assert ctrl.wait_synced(timeout=60)
        dra_cluster.create_device_class("gpu", driver=DRIVER)
        dra_cluster.create_claim_template("one-gpu", device_class="gpu")
        dra_cluster.create_pod("training", claim_template="one-gpu")
        assert_quoted(HEADINGS["not registered"], dra_cluster.wait_prepare_failed("training"))

        dra_cluster.create_device_class("tpu", driver="tpu.example.com")
        dra_cluster.create_claim_template("one-tpu", device_class="tpu")
        dra_cluster.create_pod("nowhere", claim_template="one-tpu")
        assert_quoted(HEADINGS["unschedulable"], dra_cluster.wait_pod_unschedulable("nowhere"))

        elsewhere = kubeletplugin.CDISpecWriter(DRIVER, cdi_dir=tmp_path / "not-the-runtimes")
        with kubeletplugin.start(
            _EnvPerDevice(elsewhere), driver=DRIVER, api_client=client, node_name="node-1",
            registrar_dir=str(node.registry_dir), plugin_data_dir=str(node.plugin_data_dir(DRIVER)),
        ):  # fmt: skip
            dra_cluster.wait_registered("node-1", DRIVER)
            dra_cluster.delete_pod("training")  # its device goes to the next pod
            dra_cluster.create_pod("no-cdi", claim_template="one-gpu")
            failed = wait_until(
                lambda: "CDI" in (reason := dra_cluster.why_not_prepared("no-cdi")) and reason,
                timeout=60,
            )
        # The simulated runtime's words around the CDI library's error.
        [library] = re.findall(r"unresolvable CDI devices \S+", str(failed))
        assert_quoted(HEADINGS["cdi"], library)
    finally:
        client.close()
