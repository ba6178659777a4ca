"""One knob for every bench's size.

``make bench`` runs the sizes BENCHMARKS.md reports. ``make test`` runs each bench once more at
a small size with timing off (``RESOURCESLICE_BENCH_SMALL=1``, pytest-benchmark's
``--benchmark-disable``), so that a bench whose assertions or setup went stale fails CI
instead of the next person who wants its figures.
"""

from __future__ import annotations

import os
from typing import TypeVar

T = TypeVar("T")

#: Whether the benches run at their small size (a check that they still run, no figures).
SMALL = os.environ.get("RESOURCESLICE_BENCH_SMALL") == "1"


def sized(full: T, small: T) -> T:
    """``full`` for ``make bench``, ``small`` for ``make test``'s run of the benches."""
    return small if SMALL else full
