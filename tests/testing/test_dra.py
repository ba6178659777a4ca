"""resourceslice.testing.dra without a cluster: what it refuses, and what it builds from."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from resourceslice.testing import ClusterError, start_dra_cluster
from resourceslice.testing.cluster import DEFAULT_RELEASE, module_files, releases

DRACLUSTER = Path(__file__).resolve().parents[2] / "python/resourceslice/testing/dracluster"


def test_an_unknown_release_is_refused_with_the_known_ones() -> None:
    with pytest.raises(ClusterError, match=r"no test server for Kubernetes 1\.20: known releases"):
        start_dra_cluster(release="1.20")


@pytest.mark.parametrize("release", releases())
def test_every_release_of_the_apiserver_has_its_components(release: str) -> None:
    # The same pins as the apiserver's, and the Go code of the release's APIs.
    gomod, gosum = module_files(release, DRACLUSTER)
    assert (DRACLUSTER / gomod).is_file() and (DRACLUSTER / gosum).is_file()
    pins = [
        re.findall(r"\tk8s\.io/kubernetes (v\S+)\n", (directory / name).read_text())
        for directory, name in (
            (DRACLUSTER, gomod),
            (DRACLUSTER.parent / "apiserver", module_files(release)[0]),
        )
    ]
    assert pins[0] == pins[1] and pins[0][0].startswith(f"v{release}.")
    tag = "!k8s133 && !k8s132" if release == DEFAULT_RELEASE else f"k8s{release.replace('.', '')}"
    code = (DRACLUSTER / f"release_{release.replace('.', '_')}.go").read_text()
    assert f"//go:build {tag}\n" in code
