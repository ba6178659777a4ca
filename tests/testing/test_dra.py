"""resourceslice.testing.dra without a cluster: what it refuses, and what it builds from."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from resourceslice.testing import ClusterError, start_dra_cluster
from resourceslice.testing.cluster import DEFAULT_RELEASE, module_files, releases
from resourceslice.testing.dra import release_tags
from resourceslice.testing.plugin import dra_containers
from resourceslice.testing.runtime import runtime_available

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
    others = [tag_of(r) for r in releases() if r != DEFAULT_RELEASE]
    if release == DEFAULT_RELEASE:  # built without tags: every other release's excluded
        constraint = " && ".join(f"!{t}" for t in others)
    else:
        constraint = tag_of(release)
        # What the older releases share is built for each of them.
        assert build_line("release_beta.go") == f"//go:build {' || '.join(others)}"
    assert build_line(f"release_{release.replace('.', '_')}.go") == f"//go:build {constraint}"


def tag_of(release: str) -> str:
    (tag,) = release_tags(release)
    return tag


def build_line(name: str) -> str:
    return (DRACLUSTER / name).read_text().splitlines()[0]


@pytest.mark.parametrize(("timeout", "release"), [(0.5, DEFAULT_RELEASE), (20.0, "1.33")])
def test_a_binding_timeout_kube_scheduler_would_refuse_is_refused_first(
    timeout: float, release: str
) -> None:
    # Below 1 s (the scheduler's validation) or on a scheduler without binding conditions.
    with pytest.raises(ValueError, match=rf"binding_timeout={timeout}.*this is {release}"):
        start_dra_cluster(binding_timeout=timeout, release=release)


def test_containers_required_where_runc_cannot_run_are_refused_with_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert runtime_available() == "not root (uid 1000): rootless containers are not set up"
    with pytest.raises(ClusterError, match=r"containers=True, but runc cannot run containers "):
        start_dra_cluster(containers=True)


def test_the_ini_option_says_whether_containers_must_run(pytestconfig: pytest.Config) -> None:
    # This project's own DRA tests require running containers (pyproject.toml).
    assert dra_containers(pytestconfig) is True
