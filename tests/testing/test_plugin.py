"""The pytest plugin (registered for every pytest run once the package is installed) must
not break pytest where the machine lacks what only the test apiserver needs."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path


def test_pytest_runs_with_the_plugin_where_fcntl_is_missing(tmp_path: Path) -> None:
    (tmp_path / "test_nothing.py").write_text("def test_nothing():\n    pass\n")
    # fcntl is POSIX-only: None in sys.modules makes its import fail, as on Windows.
    code = textwrap.dedent(
        """
        import sys
        sys.modules["fcntl"] = None
        import resourceslice.testing.plugin  # what pytest loads through the entry point
        import pytest
        sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", "test_nothing.py"]))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout
