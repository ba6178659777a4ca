"""The release wheel as users get it: built once, installed into a clean virtualenv by pip
(dependencies resolved from the index, as `pip install resourceslice` would), and run from
there with no source tree on the path.

`make test` builds the wheel (`make wheel`) and passes it in RESOURCESLICE_WHEEL; run alone,
this module builds it with `make wheel` itself, once for the session.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import kubernetes.client
import pytest

from resourceslice.testing import TestCluster

pytestmark = pytest.mark.packaging

REPO = Path(__file__).resolve().parents[2]
GPU_NODE = REPO / "examples" / "gpu-node.yaml"
DRIVER = "wheel.example.com"
NODE = "wheel-node"
# pip's own names for these: PEP 425 tags, PEP 600 manylinux.
WHEEL_NAME = re.compile(
    r"resourceslice-[^-]+-(?P<python>[^-]+)-(?P<abi>[^-]+)-(?P<platform>[^-]+)\.whl"
)


@dataclass(frozen=True)
class Installed:
    """The wheel installed into a virtualenv of its own."""

    wheel: Path
    venv: Path
    workdir: Path  # an empty directory: the current directory of every command

    def run(
        self, *args: str, pure_python: bool = False, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """``args[0]`` from the virtualenv's bin/, with an environment that points nowhere
        else: no PYTHONPATH, no other virtualenv."""
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "RESOURCESLICE_PURE_PYTHON")
        }
        env["PATH"] = f"{self.venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        if pure_python:
            env["RESOURCESLICE_PURE_PYTHON"] = "1"
        command = [str(self.venv / "bin" / args[0]), *args[1:]]
        result = subprocess.run(
            command, cwd=self.workdir, env=env, capture_output=True, text=True, timeout=240
        )
        if check:
            assert result.returncode == 0, (command, result.stdout, result.stderr)
        return result

    def python(self, code: str, pure_python: bool = False) -> str:
        return self.run("python", "-c", code, pure_python=pure_python).stdout.strip()


def build_wheel() -> Path:
    """The wheel ``make wheel`` builds (the Makefile holds the one build command)."""
    given = os.environ.get("RESOURCESLICE_WHEEL")
    if given:
        return Path(given)
    subprocess.run(["make", "--no-print-directory", "wheel"], cwd=REPO, check=True, timeout=900)
    (wheel,) = (REPO / "target" / "wheels").glob("resourceslice-*.whl")
    return wheel


@pytest.fixture(scope="session")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    wheel = build_wheel()
    root = tmp_path_factory.mktemp("wheel")
    venv, workdir = root / "venv", root / "work"
    workdir.mkdir()
    # The interpreter this suite runs on, without its virtualenv (and so without python/).
    base = Path(sys.base_prefix) / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    subprocess.run([str(base), "-m", "venv", str(venv)], check=True, timeout=120)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    subprocess.run([*pip, "--upgrade", "pip"], check=True, timeout=300)
    subprocess.run([*pip, str(wheel)], check=True, timeout=600)
    return Installed(wheel, venv, workdir)


def test_the_wheel_is_abi3_and_manylinux2014(installed: Installed) -> None:
    match = WHEEL_NAME.fullmatch(installed.wheel.name)
    assert match, installed.wheel.name
    # One wheel for every CPython from 3.9 on (the declared lower bound) ...
    assert (match["python"], match["abi"]) == ("cp39", "abi3")
    # ... and every x86_64 Linux with glibc >= 2.17 (RHEL 8, Ubuntu 20.04, Debian 11 and
    # newer): maturin refuses a tag older than the glibc symbols the library links to.
    assert set(match["platform"].split(".")) == {"manylinux2014_x86_64", "manylinux_2_17_x86_64"}


def test_the_package_comes_from_the_wheel_not_the_source_tree(installed: Installed) -> None:
    where = json.loads(
        installed.python(
            "import json, resourceslice, resourceslice._core as c;"
            "print(json.dumps([resourceslice.__file__, c.__file__]))"
        )
    )
    site = installed.venv / "lib"
    for path in where:
        assert Path(path).is_relative_to(site), path
    assert not any(Path(path).is_relative_to(REPO) for path in where)


def test_both_cores_are_reachable(installed: Installed) -> None:
    code = "import resourceslice; print(resourceslice.core_backend())"
    assert installed.python(code) == "rust"
    assert installed.python(code, pure_python=True) == "python"


def test_help(installed: Installed) -> None:
    out = installed.run("resourceslice", "--help").stdout
    for command in ("plan", "publish", "status", "prune"):
        assert command in out
    assert (
        installed.run("resourceslice", "--version").stdout == "resourceslice 0.1.0 (core: rust)\n"
    )


def test_the_wheel_carries_the_license_and_its_metadata(installed: Installed) -> None:
    with zipfile.ZipFile(installed.wheel) as wheel:
        names = wheel.namelist()
        (license_name,) = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
        assert wheel.read(license_name) == (REPO / "LICENSE").read_bytes()
        metadata = wheel.read(next(n for n in names if n.endswith(".dist-info/METADATA")))
    lines = metadata.decode().splitlines()
    assert "License: Apache-2.0" in lines
    assert "Classifier: License :: OSI Approved :: Apache Software License" in lines
    assert any(line.startswith("Project-URL: ") for line in lines)
    assert "Provides-Extra: metrics" in lines
    # The demo needs the checkout's examples/: it is not shipped, rather than shipped broken.
    assert not any(name.startswith("resourceslice/demo") for name in names)
    assert (
        "No module named resourceslice.demo"
        in installed.run("python", "-m", "resourceslice.demo", check=False).stderr
    )


def test_plan_an_example_with_either_core(installed: Installed) -> None:
    args = ["resourceslice", "plan", str(GPU_NODE), "--driver", "gpu.example.com"]
    args += ["--node", "n1", "-o", "json"]
    rust = installed.run(*args)
    python = installed.run(*args, pure_python=True)
    assert rust.stderr.startswith("1 pool, 3 slices, 288 devices")
    slices = json.loads(rust.stdout)["items"]
    assert [len(s["spec"]["devices"]) for s in slices] == [128, 128, 32]
    # The two cores of the installed wheel agree to the byte.
    assert (python.stdout, python.stderr) == (rust.stdout, rust.stderr)


@pytest.fixture
def node(kube_client: kubernetes.client.ApiClient) -> Iterator[str]:
    core = kubernetes.client.CoreV1Api(kube_client)
    core.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})
    yield NODE
    kubernetes.client.ResourceV1Api(kube_client).delete_collection_resource_slice(
        field_selector=f"spec.driver={DRIVER}"
    )
    core.delete_node(NODE)


@pytest.mark.integration
def test_publish_from_the_wheel(installed: Installed, kube_cluster: TestCluster, node: str) -> None:
    kubeconfig = str(kube_cluster.kubeconfigs["admin"])
    common = ("--driver", DRIVER, "--node", node, "--kubeconfig", kubeconfig)
    published = installed.run(
        "resourceslice", "publish", str(GPU_NODE), *common, "--once", "--timeout", "60"
    )
    assert "3 creates, 0 updates, 0 deletes" in published.stdout

    status = installed.run("resourceslice", "status", *common)
    header, row = status.stdout.splitlines()
    assert header.split()[:2] == ["POOL", "NODE"]
    assert row.split() == [node, node, "1", "3/3", "288", "ok"]

    # The metrics extra is not installed here: the command says what to install.
    metrics = installed.run(
        "resourceslice", "publish", str(GPU_NODE), *common, "--once",
        "--metrics-address", "127.0.0.1:0", check=False,
    )  # fmt: skip
    assert metrics.returncode == 2
    assert "needs prometheus_client: the package's metrics extra" in metrics.stderr
