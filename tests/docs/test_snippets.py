"""Every ``python`` block of README.md and docs/ runs, as a reader would run it.

A page's blocks are one program, read top to bottom (a later block uses what an earlier one
defined). Each runs in a fresh interpreter, in the environment the page says it runs in: the
README's driver and the pages' drivers in a Pod (``NODE_NAME`` from the Downward API, the
in-cluster config: here the test apiserver's admin kubeconfig), docs/testing.md under pytest.
The only edits made to a block are the ones listed in ``IN_A_POD`` and ``ON_A_NODE``; each
must apply, so a snippet that drifts from them fails here rather than running unchecked.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import kubernetes.client
import pytest

from resourceslice._http import get_json, request, send_json
from resourceslice.testing import TestCluster, wait_until
from resourceslice.testing.kubelet import KubeletHarness
from support.kubelet_env import allocated_claim, delete_claim, uid
from typecheck import mypy

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# The pages whose blocks are a pytest module, not a script.
PYTEST_PAGES = {"docs/testing.md"}
# The site's home page shows the README's driver: the same block (checked below), run as the
# README's.
README_DRIVER_PAGES = {"docs/index.md"}
# The drivers the pages publish as: their slices and Leases are removed around each page.
DRIVERS = ("gpu.example.com", "net.example.com", "fabric.example.com")
LEASES = ("net-example-com-publisher", "fabric-example-com")

# A Pod's in-cluster config is the test apiserver's kubeconfig (KUBECONFIG) here.
IN_A_POD = {
    "kubernetes.config.load_incluster_config()": "kubernetes.config.load_kube_config()",
}
# kubelet's directories (and the CDI directory) are test directories here.
ON_A_NODE = {
    "kubeletplugin.CDISpecWriter(DRIVER)": (
        'kubeletplugin.CDISpecWriter(DRIVER, cdi_dir=os.environ["CDI_DIR"])'
    ),
    "node_name=node)": (
        'node_name=node, registrar_dir=os.environ["REGISTRAR_DIR"],'
        ' plugin_data_dir=os.environ["PLUGIN_DATA_DIR"])'
    ),
}

FENCE = re.compile(r"^(\s*)(```+)(.*)$")


def fences(path: Path) -> list[tuple[int, str]]:
    """(line number, info string) of each fence line: an opening fence names its language,
    a closing one nothing; text after a fence is not a fence."""
    return [
        (number, match.group(3))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if (match := FENCE.match(line))
    ]


def python_blocks(path: Path, info: str = "python") -> list[str]:
    """The fenced blocks of ``path`` whose info string is ``info``, in order (``py``: a
    sketch, or docs/kubelet-plugin.md's asyncio driver, a program of its own; renderers
    highlight it as Python too)."""
    blocks, current, language = [], [], None
    for line in path.read_text().splitlines():
        match = FENCE.match(line)
        if match and language is None:
            language = match.group(3).strip() or "text"
            current = []
        elif match:
            if language == info:
                blocks.append("\n".join(current) + "\n")
            language = None
        elif language is not None:
            current.append(line)
    return blocks


def program(path: Path, edits: dict[str, str], info: str = "python") -> str:
    source = "\n".join(python_blocks(path, info))
    for old, new in edits.items():
        assert old in source, f"{path.name}: no {old!r} left to stand in for: update this test"
        source = source.replace(old, new)
    return source


# docs/kubelet-plugin.md's asyncio driver: the README's driver in asyncio, typed.
ASYNC_DRIVER_PAGE = ROOT / "docs/kubelet-plugin.md"


def async_driver(edits: dict[str, str]) -> str:
    """The one ``py`` block of docs/kubelet-plugin.md that is a whole program (the page's
    other ``py`` blocks are sketches), with ``edits`` made as ``program`` makes them."""
    drivers = [b for b in python_blocks(ASYNC_DRIVER_PAGE, "py") if "asyncio.run(main())" in b]
    assert len(drivers) == 1, f"{ASYNC_DRIVER_PAGE.name}: {len(drivers)} asyncio drivers"
    source = drivers[0]
    for old, new in edits.items():
        assert old in source, f"asyncio driver: no {old!r} left to stand in for: update this test"
        source = source.replace(old, new)
    return source


def relative(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("page", PAGES, ids=relative)
def test_fences_are_balanced(page: Path) -> None:
    """Each fence is on a line of its own, and they pair up: a fence with text after it
    (```` ``` Go must be ````) made the rest of the README one code block."""
    found = fences(page)
    closing = found[1::2]
    assert len(found) % 2 == 0, f"{relative(page)}: an unclosed fence"
    stray = [(n, info) for n, info in closing if info.strip()]
    # An opening fence names one language: text after it is not rendered as code there.
    stray += [(n, info) for n, info in found[0::2] if len(info.split()) > 1]
    assert not stray, f"{relative(page)}: text after a fence at {stray}"


def test_every_python_block_is_run() -> None:
    """The pages with python blocks are the ones the tests below run: none is left out."""
    with_blocks = {relative(page) for page in PAGES if python_blocks(page)}
    assert with_blocks >= {"README.md", "docs/publishing.md", "docs/testing.md"}
    run_as_script = set(SCRIPT_PAGES)
    assert with_blocks == run_as_script | PYTEST_PAGES | README_DRIVER_PAGES | {"README.md"}


@pytest.mark.parametrize("page", sorted(README_DRIVER_PAGES))
def test_the_home_page_driver_is_the_readmes(page: str) -> None:
    assert python_blocks(ROOT / page) == python_blocks(ROOT / "README.md")


SCRIPT_PAGES = sorted(
    relative(page)
    for page in PAGES
    if python_blocks(page)
    and relative(page) not in PYTEST_PAGES | README_DRIVER_PAGES | {"README.md"}
)


def remove_driver_objects(client: kubernetes.client.ApiClient) -> None:
    for driver in DRIVERS:
        request(
            client,
            "DELETE",
            "/apis/resource.k8s.io/v1/resourceslices",
            query=[("fieldSelector", f"spec.driver={driver}")],
        )
    for lease in LEASES:
        request(
            client,
            "DELETE",
            "/apis/coordination.k8s.io/v1/namespaces/default/leases",
            query=[("fieldSelector", f"metadata.name={lease}")],
        )


@pytest.fixture
def node(kube_client: kubernetes.client.ApiClient) -> Iterator[str]:
    """A Node for the page's driver to run on; the drivers' objects removed around it."""
    name = "docs-node"
    remove_driver_objects(kube_client)
    body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}
    send_json(kube_client, "POST", "/api/v1/nodes", json.dumps(body).encode())
    try:
        yield name
    finally:
        send_json(kube_client, "DELETE", f"/api/v1/nodes/{name}", b"{}")
        remove_driver_objects(kube_client)


def pod_env(cluster: TestCluster, node: str) -> dict[str, str]:
    return {**os.environ, "KUBECONFIG": str(cluster.kubeconfigs["admin"]), "NODE_NAME": node}


@pytest.mark.parametrize("page", SCRIPT_PAGES)
def test_page_runs(page: str, kube_cluster: TestCluster, node: str) -> None:
    source = program(ROOT / page, IN_A_POD)
    done = subprocess.run(
        [sys.executable, "-c", source],
        cwd=ROOT,
        env=pod_env(kube_cluster, node),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, f"{page}:\n{done.stdout}\n{done.stderr}"


def test_testing_page_runs_under_pytest(tmp_path: Path) -> None:
    """docs/testing.md's blocks are a test module: pytest (with the fixtures the package
    registers on install) collects and passes every one of its tests."""
    source = program(ROOT / "docs/testing.md", {})
    tests = source.count("\ndef test_")
    assert tests >= 3  # the publisher, the kubelet plugin, a pod on the DRA cluster
    (tmp_path / "test_page.py").write_text(source)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_page.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{tests} passed" in done.stdout, done.stdout


def test_async_driver_passes_mypy_strict(tmp_path: Path) -> None:
    assert mypy(tmp_path, driver=async_driver({})) == {"driver": []}


@pytest.mark.parametrize("variant", ["threads", "asyncio"])
def test_readme_driver(
    kube_cluster: TestCluster, kube_client: kubernetes.client.ApiClient, node: str, variant: str
) -> None:
    """The README's driver (and its asyncio twin in docs/kubelet-plugin.md), as written, in a
    Pod on ``node``: kubelet registers it, its eight GPUs are published as the node's,
    kubelet's prepare of a claim writes the claim's CDI spec, and SIGTERM stops it cleanly."""
    edits = {**IN_A_POD, **ON_A_NODE}
    source = program(ROOT / "README.md", edits) if variant == "threads" else async_driver(edits)
    driver = "gpu.example.com"
    node_dir = Path(tempfile.mkdtemp(prefix="rd-", dir="/tmp"))  # short: socket paths
    env = {
        **pod_env(kube_cluster, node),
        "CDI_DIR": str(node_dir / "cdi"),
        "REGISTRAR_DIR": str(node_dir / "registry"),
        "PLUGIN_DATA_DIR": str(node_dir / "plugins" / driver),
    }
    claim_name = "readme-claim"
    try:
        with KubeletHarness.start(node_dir / "registry") as kubelet:
            process = subprocess.Popen(
                [sys.executable, "-c", source],
                cwd=node_dir,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            try:
                kubelet.wait_registered(driver)

                def devices() -> list[str]:
                    slices = json.loads(
                        get_json(
                            kube_client,
                            "/apis/resource.k8s.io/v1/resourceslices",
                            [("fieldSelector", f"spec.driver={driver},spec.nodeName={node}")],
                        )
                    )["items"]
                    return sorted(d["name"] for s in slices for d in s["spec"]["devices"])

                wait_until(lambda: len(devices()) == 8, timeout=60, describe=lambda: str(devices()))
                assert devices() == [f"gpu-{i}" for i in range(8)]

                claim = allocated_claim(kube_client, driver, claim_name, ["gpu-5"], node)
                answer = kubelet.prepare(driver, [claim])
                assert answer["claims"][uid(claim)]["devices"][0]["cdiDeviceIDs"] == [
                    f"{driver}/device={uid(claim)}-gpu-5"
                ]
                spec = json.loads((node_dir / "cdi" / f"{driver}-{uid(claim)}.json").read_text())
                assert spec["devices"][0]["containerEdits"]["env"] == ["GPU=gpu-5"]
                assert kubelet.unprepare(driver, [claim])["claims"][uid(claim)]["error"] == ""
                assert list((node_dir / "cdi").iterdir()) == []
            finally:
                process.send_signal(signal.SIGTERM)
                output, _ = process.communicate(timeout=60)
            assert process.returncode == 0, output
    finally:
        delete_claim(kube_client, claim_name)
        shutil.rmtree(node_dir, ignore_errors=True)
