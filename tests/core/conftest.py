"""Every core test runs against both cores: the pure-Python reference and the Rust one."""

from __future__ import annotations

import importlib
from types import ModuleType

import pytest


@pytest.fixture(params=["python", "rust"])
def core(request: pytest.FixtureRequest) -> ModuleType:
    """``resourceslice._pycore`` or ``resourceslice._core``; a missing Rust core fails."""
    name = "resourceslice._pycore" if request.param == "python" else "resourceslice._core"
    return importlib.import_module(name)
