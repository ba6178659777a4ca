"""Which core computes plans: the Rust extension, or the pure-Python fallback.

Both expose the same functions (docs/core.md). The Rust one is used when it imports,
unless ``RESOURCESLICE_PURE_PYTHON=1``; the choice is made once, at import.
"""

from __future__ import annotations

import os
from types import ModuleType


def _select() -> tuple[ModuleType, str]:
    if os.environ.get("RESOURCESLICE_PURE_PYTHON", "") not in ("", "0"):
        from resourceslice import _pycore

        return _pycore, "python"
    try:
        from resourceslice import _core
    except ImportError:
        from resourceslice import _pycore

        return _pycore, "python"
    return _core, "rust"


core, backend = _select()


def core_backend() -> str:
    """``"rust"`` when the native core is active, ``"python"`` for the fallback."""
    return backend
