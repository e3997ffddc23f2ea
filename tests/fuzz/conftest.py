"""Print how many generated cases each fuzzed boundary tried (the figure docs/reliability.md records)."""

from __future__ import annotations

import pytest

from tests.fuzz._fuzz import COUNTS, PROFILE


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if COUNTS:
        parts = ", ".join(f"{name} {count}" for name, count in sorted(COUNTS.items()))
        terminalreporter.write_line(f"fuzz cases tried ({PROFILE} profile): {parts}")
