"""docs/reference.md's option tables against the signatures they describe."""

from __future__ import annotations

import inspect
import re
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
    "start_binding_controller": rs.BindingController.__init__,
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
