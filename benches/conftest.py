"""The benches share the end-to-end tests' drivers (``tests/e2e``): their package on the path."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
