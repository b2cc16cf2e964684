"""Ratios between paired benchmarks, stored in ``extra_info`` so that saved runs keep them.

Each benchmark of a pair runs as its own test in one ``benchmark.group`` (pytest-benchmark times it alone);
:func:`record` keeps the finished fixture under a name, and :func:`share_ratio` writes
``median(numerator) / median(denominator)`` into the ``extra_info`` of both once both have run (in either
order). pytest-benchmark serialises ``extra_info`` at the end of the session, so a ratio added to the first
benchmark after it finished is still saved with it (``--benchmark-autosave``, ``--benchmark-json``).
"""

from __future__ import annotations

from typing import Any

RUNS: dict[str, Any] = {}


def median_seconds(name: str) -> float:
    """Median wall time in seconds of the recorded benchmark ``name``."""
    return float(RUNS[name].stats.stats.median)


def record(name: str, benchmark: Any) -> None:
    """Keep a finished benchmark fixture under ``name`` for later ratios."""
    RUNS[name] = benchmark


def share_ratio(key: str, numerator: str, denominator: str) -> float | None:
    """Store ``median(numerator) / median(denominator)`` as ``extra_info[key]`` on both; None if one is missing (or
    was not timed: ``--benchmark-disable`` runs each benchmark once, without statistics)."""
    if any(name not in RUNS or RUNS[name].stats is None for name in (numerator, denominator)):
        return None
    ratio = median_seconds(numerator) / median_seconds(denominator)
    for name in (numerator, denominator):
        RUNS[name].extra_info[key] = round(ratio, 3)
    return ratio


def record_pairs(name: str, benchmark: Any, pairs: dict[str, tuple[str, str]]) -> None:
    """`record` ``benchmark`` as ``name`` and `share_ratio` every ratio of ``pairs`` (``{key: (numerator,
    denominator)}``) that names it, once both of its benchmarks have run."""
    record(name, benchmark)
    for key, (numerator, denominator) in pairs.items():
        if name in (numerator, denominator):
            share_ratio(key, numerator, denominator)


def print_lines(request: Any, tag: str, lines: list[str]) -> None:
    """Write ``lines`` to the terminal past pytest's output capturing, each prefixed by ``[tag]``."""
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capman = request.config.pluginmanager.get_plugin("capturemanager")
    if lines and reporter is not None and capman is not None:
        with capman.global_and_fixture_disabled():
            reporter.write_line("")
            for line in lines:
                reporter.write_line(f"[{tag}] {line}")
