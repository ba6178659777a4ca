"""The generated gRPC code comes from the Kubernetes release of the test apiserver: the kubelet
harness pins the same release, and the committed .proto copies are that release's files."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import resourceslice.kubeletplugin
import resourceslice.testing

REPO = Path(__file__).resolve().parents[2]
TESTING = Path(resourceslice.testing.__file__).parent
PB = Path(resourceslice.kubeletplugin.__file__).parent / "_pb"


def pinned(gomod: Path, module: str) -> str:
    """The version of ``module`` that ``gomod`` builds with (its replacement's, if any)."""
    text = gomod.read_text()
    name = re.escape(module)
    match = re.search(rf"^\s*{name} => \S+ (v\S+)", text, re.M) or re.search(
        rf"^\s*{name} (v\S+)", text, re.M
    )
    assert match, f"{module} not in {gomod}"
    return match.group(1)


def test_harness_pins_the_apiserver_release() -> None:
    harness, apiserver = TESTING / "kubeletharness" / "go.mod", TESTING / "apiserver" / "go.mod"
    assert pinned(harness, "k8s.io/kubernetes") == pinned(apiserver, "k8s.io/kubernetes")
    # Every staging module (k8s.io/kubelet among them) at the matching v0 release.
    assert pinned(harness, "k8s.io/kubelet") == pinned(apiserver, "k8s.io/kubelet")


def test_protos_are_those_of_the_pinned_kubelet_module() -> None:
    # The Makefile's list of <api dir>:<copy name>, the one place it is written.
    makefile = (REPO / "Makefile").read_text()
    listed = re.search(r"^KUBELET_PROTOS := ((?:.*\\\n)*.*)$", makefile, re.M)
    assert listed
    entries = listed.group(1).replace("\\\n", " ").split()
    module_dir = subprocess.run(
        ["go", "list", "-m", "-f", "{{.Dir}}", "k8s.io/kubelet"],
        cwd=TESTING / "kubeletharness",
        env=dict(os.environ, GOFLAGS="-mod=readonly"),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    apis = Path(module_dir) / "pkg" / "apis"
    copies = {path.stem for path in PB.glob("*.proto")}
    assert copies == {entry.split(":")[1] for entry in entries}
    for entry in entries:
        source, copy = entry.split(":")
        assert (PB / f"{copy}.proto").read_bytes() == (apis / source / "api.proto").read_bytes()
        assert (PB / f"{copy}_pb2.py").is_file() and (PB / f"{copy}_pb2_grpc.py").is_file()
