"""The figures of the reliability and security suite, counted while the tests run and
printed at the end of the run, with or without -s.

The modules that count register this plugin with `pytest_plugins = ["figures"]`; any run that
collects one of them prints the summary. (PYTEST_DONT_REWRITE: the modules import it before pytest
loads it as a plugin, and it holds no assertion.)
"""

from collections import Counter

import pytest

FIGURES = {
    "cases tried": "generated inputs sent to the extension's functions (hypothesis)",
    "lanes probed": "checks that a lane a role cannot read stayed out of its reach (role x path x lane)",
    "faults injected": "SIGKILLs of the postmaster during a bulk ingest",
    "records checked": "records verified whole after a crash, a soak or an upgrade",
}

COUNTS: Counter[str] = Counter()
BREAKDOWN: dict[str, Counter[str]] = {name: Counter() for name in FIGURES}


def add(figure: str, count: int = 1, detail: str | None = None) -> None:
    """Counts `count` more of a figure, optionally under a detail (a function, a path)."""
    if figure not in FIGURES:
        raise KeyError(f"unknown figure {figure!r}; known: {', '.join(FIGURES)}")
    COUNTS[figure] += count
    if detail is not None:
        BREAKDOWN[figure][detail] += count


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    terminalreporter.write_sep("=", "emem figures: reliability and security")
    for figure, meaning in FIGURES.items():
        terminalreporter.write_line(f"{figure:>16}: {COUNTS[figure]:>7}   ({meaning})")
        details = BREAKDOWN[figure]
        if details:
            terminalreporter.write_line(
                " " * 19 + ", ".join(f"{name} {count}" for name, count in sorted(details.items()))
            )
