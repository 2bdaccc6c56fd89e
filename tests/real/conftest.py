"""Prints what the real-server tests measured (boot times, TTFT, decode rates) at the end of
the run, so CI logs carry the numbers."""

from __future__ import annotations

import pytest
from realutil import NUMBERS


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if NUMBERS:
        terminalreporter.section("real-server numbers")
        for name, value in NUMBERS:
            terminalreporter.write_line(f"{name}: {value}")
