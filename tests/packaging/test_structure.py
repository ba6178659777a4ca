"""The package's structure from its imports (``tools/imports.py``): no circle between the
library's modules, so that each can be read, tested and changed from the bottom up."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

TOOL = Path(__file__).resolve().parents[2] / "tools" / "imports.py"


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("imports_tool", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_python_modules_have_no_circle() -> None:
    tool = _tool()
    graph = tool.python_graph()
    assert "resourceslice.controller" in graph["resourceslice"]
    assert "resourceslice._core" in graph["resourceslice._backend"]
    assert tool.circles(graph) == []


def test_the_tool_finds_a_circle_and_its_floors() -> None:
    tool = _tool()
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert tool.circles(graph) == [["a", "b", "c"]]
    assert tool.floors(graph) == {"a": 0, "b": 0, "c": 0, "d": 1, "e": 0}
    assert tool.floors({"x": {"y"}, "y": set()}) == {"x": 1, "y": 0}


def test_the_command_prints_both_graphs() -> None:
    out = subprocess.run(
        [sys.executable, str(TOOL), "--rooms"], capture_output=True, text=True, check=True
    ).stdout
    assert out.startswith("Python: ")
    assert "\nRust: " in out
    assert "] crate -> " in out
