"""The reference: docs/reference.md's option tables against the signatures they describe, and
the API reference (mkdocs + mkdocstrings) built from the docstrings without a warning."""

from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import resourceslice as rs
from resourceslice import kubeletplugin

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "reference.md"

DOCUMENTED: dict[str, Callable[..., Any]] = {
    "start_controller": rs.Controller.__init__,
    "LeaderElection": rs.LeaderElection,
    "kubeletplugin.start": kubeletplugin.start,
}


def table_options(heading: str) -> list[str]:
    """The first column of the table under ``## `heading` ``, in order."""
    section = REFERENCE.read_text().split(f"## `{heading}`\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `(\w+)` \|", section, flags=re.MULTILINE)


@pytest.mark.parametrize("heading", DOCUMENTED)
def test_option_table_names_every_parameter(heading: str) -> None:
    parameters = [
        name for name in inspect.signature(DOCUMENTED[heading]).parameters if name != "self"
    ]
    assert table_options(heading) == parameters


def test_api_reference_builds_without_warnings(tmp_path: Path) -> None:
    """``make docs``'s build: --strict fails on any warning (a link or anchor that points
    nowhere, a docstring mkdocstrings cannot read)."""
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    api = (tmp_path / "api" / "index.html").read_text()
    for documented in ("resourceslice.Controller.update", "resourceslice.kubeletplugin.Helper"):
        assert f'id="{documented}"' in api
