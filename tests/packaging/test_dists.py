"""The three distributions of ``make dist``, as users get them: each installed by pip into a
clean virtualenv (dependencies from the index) and run there against the real apiserver.

- the pure-Python wheel (``py3-none-any``) on the oldest declared Python and the newest;
- the sdist, built by pip (maturin, cargo) into the binary core;
- pip, offered both wheels, takes the binary one; offered the pure one alone, takes that.

``make dist`` is run once for the module (seconds when the wheel is cached), or the
distributions are taken from RESOURCESLICE_DIST.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import kubernetes.client
import pytest

from resourceslice.testing import TestCluster

from .test_wheel import GPU_NODE, REPO, Installed

pytestmark = [pytest.mark.packaging, pytest.mark.integration]

OLDEST, NEWEST = "3.9", f"{sys.version_info[0]}.{sys.version_info[1]}"
# cargo's cache of the sdist's builds: pip builds in a fresh directory each time, and the
# whole release build of the core would otherwise be redone on every run. One directory per
# sdist content: the sdist's files all carry one fixed time, older than any build, so cargo
# would take a build of older sources for up to date.
SDIST_CARGO_TARGETS = REPO / "target" / "sdist"


def sdist_cargo_target(sdist: Path) -> Path:
    """The cargo target directory of this sdist's build; those of other sdists removed."""
    key = hashlib.sha256(sdist.read_bytes()).hexdigest()[:16]
    SDIST_CARGO_TARGETS.mkdir(parents=True, exist_ok=True)
    for old in SDIST_CARGO_TARGETS.iterdir():
        if old.name == key:
            continue
        if old.is_dir():
            shutil.rmtree(old)
        else:
            old.unlink()  # cargo's own files, from before there was one directory per sdist
    return SDIST_CARGO_TARGETS / key


@pytest.fixture(scope="module")
def dists() -> dict[str, Path]:
    given = os.environ.get("RESOURCESLICE_DIST")
    directory = Path(given) if given else REPO / "dist"
    if not given:
        subprocess.run(["make", "--no-print-directory", "dist"], cwd=REPO, check=True, timeout=900)
    found = {
        "abi3": list(directory.glob("resourceslice-*-cp39-abi3-*.whl")),
        "pure": list(directory.glob("resourceslice-*-py3-none-any.whl")),
        "sdist": list(directory.glob("resourceslice-*.tar.gz")),
    }
    assert all(len(paths) == 1 for paths in found.values()), found
    assert len(list(directory.iterdir())) == 3, sorted(directory.iterdir())
    return {kind: paths[0] for kind, paths in found.items()}


def python_of(version: str) -> Path:
    """CPython ``version``: pyenv's newest patch release, else ``pythonX.Y`` on PATH. Missing
    is a failure: pyproject.toml declares it."""
    if version == NEWEST:
        return Path(sys.base_prefix) / "bin" / f"python{version}"
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    candidates = sorted(pyenv.glob(f"{version}.*/bin/python{version}"))
    on_path = subprocess.run(
        ["sh", "-c", f"command -v python{version}"], capture_output=True, text=True
    ).stdout.strip()
    found = candidates[-1] if candidates else Path(on_path) if on_path else None
    assert found is not None, f"no Python {version} (pyenv or PATH)"
    return found


def install(dist: Path, python: Path, root: Path) -> Installed:
    venv, workdir = root / "venv", root / "work"
    workdir.mkdir(parents=True)
    subprocess.run([str(python), "-m", "venv", str(venv)], check=True, timeout=120)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    subprocess.run([*pip, "--upgrade", "pip"], check=True, timeout=300)
    env = {**os.environ}
    if dist.name.endswith(".tar.gz"):
        env["CARGO_TARGET_DIR"] = str(sdist_cargo_target(dist))
    env.pop("RESOURCESLICE_PURE_PYTHON", None)
    # Not from pip's cache: it keeps the wheel it built from a local resourceslice-0.1.0.tar.gz
    # under that path, so an sdist of newer sources would install the old build.
    done = subprocess.run(
        [*pip, "--no-cache-dir", str(dist)], env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return Installed(dist, venv, workdir)


def test_the_pure_wheel_is_the_binary_one_without_the_core(dists: dict[str, Path]) -> None:
    with zipfile.ZipFile(dists["abi3"]) as binary, zipfile.ZipFile(dists["pure"]) as pure:
        binary_names, pure_names = set(binary.namelist()), set(pure.namelist())
        wheel_file = next(n for n in pure_names if n.endswith(".dist-info/WHEEL"))
        tags = [line for line in pure.read(wheel_file).decode().splitlines() if "Tag" in line]
        same = all(binary.read(n) == pure.read(n) for n in pure_names if n.endswith(".py"))
    assert binary_names - pure_names == {"resourceslice/_core.abi3.so"}
    assert pure_names == binary_names - {"resourceslice/_core.abi3.so"}
    assert tags == ["Tag: py3-none-any"]
    assert same


@pytest.fixture
def node(kube_client: kubernetes.client.ApiClient, request: pytest.FixtureRequest) -> Iterator[str]:
    name = f"dist-{request.node.callspec.id.replace('.', '')}"
    core = kubernetes.client.CoreV1Api(kube_client)
    core.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
    yield name
    kubernetes.client.ResourceV1Api(kube_client).delete_collection_resource_slice(
        field_selector=f"spec.nodeName={name}"
    )
    core.delete_node(name)


@pytest.mark.parametrize(
    ("kind", "version", "backend"),
    [("pure", OLDEST, "python"), ("pure", NEWEST, "python"), ("sdist", NEWEST, "rust")],
    ids=["pure-oldest", "pure-newest", "sdist"],
)
def test_plan_publish_status_from_a_clean_venv(
    dists: dict[str, Path],
    kind: str,
    version: str,
    backend: str,
    tmp_path: Path,
    kube_cluster: TestCluster,
    node: str,
) -> None:
    installed = install(dists[kind], python_of(version), tmp_path)
    assert installed.python("import sys; print(sys.version_info[:2])") == str(
        tuple(map(int, version.split(".")))
    )
    assert installed.run("resourceslice", "--version").stdout == (
        f"resourceslice 0.1.0 (core: {backend})\n"
    )
    driver = f"{node}.example.com"
    common = ("--driver", driver, "--node", node)
    planned = installed.run("resourceslice", "plan", str(GPU_NODE), *common, "-o", "json")
    assert [len(s["spec"]["devices"]) for s in json.loads(planned.stdout)["items"]] == [
        128,
        128,
        32,
    ]
    access = (*common, "--kubeconfig", str(kube_cluster.kubeconfigs["admin"]))
    published = installed.run(
        "resourceslice", "publish", str(GPU_NODE), *access, "--once", "--timeout", "120"
    )
    assert "3 creates, 0 updates, 0 deletes" in published.stdout
    status = installed.run("resourceslice", "status", *access, "-o", "json")
    pools = json.loads(status.stdout)["pools"]
    assert [(p["pool"], p["slices"], p["devices"], p["ok"]) for p in pools] == [
        (node, 3, 288, True)
    ]


def pip_choice(find_links: Path, tmp_path: Path) -> str:
    """The file pip would install for ``resourceslice`` from ``find_links`` alone."""
    report = tmp_path / "report.json"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--dry-run", "--ignore-installed",
         "--no-deps", "--no-index", "--find-links", str(find_links), "--report", str(report),
         "resourceslice"],
        check=True,
        timeout=120,
    )  # fmt: skip
    (chosen,) = json.loads(report.read_text())["install"]
    return Path(chosen["download_info"]["url"]).name


def test_pip_prefers_the_binary_wheel(dists: dict[str, Path], tmp_path: Path) -> None:
    both = tmp_path / "both"
    both.mkdir()
    for kind in ("abi3", "pure"):
        (both / dists[kind].name).symlink_to(dists[kind])
    assert pip_choice(both, tmp_path) == dists["abi3"].name
    (both / dists["abi3"].name).unlink()
    assert pip_choice(both, tmp_path) == dists["pure"].name
