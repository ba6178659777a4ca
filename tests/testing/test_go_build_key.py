"""The build cache key of the Go programs resourceslice.testing builds: it covers the shared
JSON-lines module (``jsonlines/``) that each program's go.mod takes with a replace directive,
so that a change there rebuilds them."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from resourceslice.testing import cluster

TESTING = Path(cluster.__file__).resolve().parent
REPO = Path(__file__).resolve().parents[2]
#: Each Go program, its module files (one per release it is built for), and the shared module
#: they take: the package's own copy for the programs that ship in it (installed or not), the
#: source tree's for the bench driver, which lives beside the package.
PROGRAMS = [
    (TESTING / "dracluster", ["go.mod", "go-1.33.mod", "go-1.32.mod"], TESTING / "jsonlines"),
    (TESTING / "kubeletharness", ["go.mod"], TESTING / "jsonlines"),
    (
        REPO / "benches" / "godriver",
        ["go.mod"],
        REPO / "python" / "resourceslice" / "testing" / "jsonlines",
    ),
]


@pytest.mark.parametrize(
    ("src", "gomods", "shared"), PROGRAMS, ids=[src.name for src, _, _ in PROGRAMS]
)
def test_every_module_file_takes_the_shared_loop_from_the_package(
    src: Path, gomods: list[str], shared: Path
) -> None:
    for gomod in gomods:
        (replacement,) = cluster._local_replacements(src / gomod)
        assert (src / replacement).resolve() == shared.resolve(), gomod


def test_a_change_to_the_shared_module_changes_the_key(tmp_path: Path) -> None:
    shutil.copytree(TESTING / "kubeletharness", tmp_path / "kubeletharness")
    shutil.copytree(TESTING / "jsonlines", tmp_path / "jsonlines")
    go = cluster._go()

    def key() -> str:
        return cluster._source_key(tmp_path / "kubeletharness", go, "go.mod", "go.sum", ())

    before = key()
    assert key() == before
    shared = tmp_path / "jsonlines" / "jsonlines.go"
    shared.write_text(shared.read_text() + "\n// changed\n")
    assert key() != before
