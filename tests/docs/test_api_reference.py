"""The API reference (mkdocs + mkdocstrings), built from the docstrings as ``make docs``
builds it. Its tools are development dependencies (the ``dev`` extra): .venv-oldest, which
has the package's declared dependencies only, leaves this module out (Makefile)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


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
