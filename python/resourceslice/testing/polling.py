"""Waiting on a condition that nothing signals, such as the state of a cluster."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    condition: Callable[[], T],
    timeout: float = 60.0,
    *,
    interval: float = 0.05,
    describe: Callable[[], str] | None = None,
) -> T:
    """Call ``condition`` until it returns something truthy, and return that.

    Raises AssertionError after ``timeout`` seconds, with ``describe()`` appended when given
    (say what was still wrong). For state that only polling can observe — what the apiserver
    holds, what a background thread has done; where an event exists, wait on the event.
    """
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            detail = f": {describe()}" if describe is not None else ""
            raise AssertionError(f"condition not met within {timeout}s{detail}")
        time.sleep(interval)
