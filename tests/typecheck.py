"""mypy --strict on code a driver writes, with the project's settings: the tests that check
what the types catch (and what they let through) share this one run of it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def mypy(tmp_path: Path, **modules: str) -> dict[str, list[str]]:
    """mypy --strict's errors in each of ``modules`` (name -> code), checked in one run,
    each as ``<line>: error: <message>``."""
    pytest.importorskip("mypy", reason="mypy is in the dev extra")
    for name, code in modules.items():
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(code))
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir", os.devnull,
         "--python-version", "3.9", "--follow-imports", "silent",
         *(str(tmp_path / f"{name}.py") for name in modules)],
        capture_output=True, text=True, timeout=300, cwd=REPO,  # its pyproject.toml's settings
    )  # fmt: skip
    assert result.returncode in (0, 1), result.stdout + result.stderr
    return {
        name: [
            line.removeprefix(f"{tmp_path / name}.py:")
            for line in result.stdout.splitlines()
            if line.startswith(f"{tmp_path / name}.py:") and ": error: " in line
        ]
        for name in modules
    }
