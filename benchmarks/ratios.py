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
    """Store ``median(numerator) / median(denominator)`` as ``extra_info[key]`` on both; None if one is missing."""
    if numerator not in RUNS or denominator not in RUNS:
        return None
    ratio = median_seconds(numerator) / median_seconds(denominator)
    for name in (numerator, denominator):
        RUNS[name].extra_info[key] = round(ratio, 3)
    return ratio
