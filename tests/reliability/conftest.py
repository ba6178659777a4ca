"""Prints the fault table (fault → converged, time, writes, duplicates) after the session."""

from __future__ import annotations

import pytest

from .faults import FAULT_TABLE


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not FAULT_TABLE:
        return
    terminalreporter.write_sep("=", "fault table")
    terminalreporter.write_line(
        f"{'fault':<48} | converged | time      | {'writes':<26} | duplicates seen | takeover"
    )
    for outcome in FAULT_TABLE:
        terminalreporter.write_line(outcome.row())
