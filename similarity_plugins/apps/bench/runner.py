"""``similarity-plugins bench``: validate the request, run the bundled pytest-benchmark suite in process,
print one table of (metric, workload, time, score, error) and turn the outcome into an exit code.

Exit codes: 0 every metric ran; 1 a metric errored (its row says why; the others still ran);
2 bad input (unknown metric or workload, malformed ``--compare-fail``, ``--compare`` with nothing saved);
3 ``--compare-fail`` tripped (a performance regression against the saved run; 3 also when a metric errored).
"""

from __future__ import annotations

import importlib.util
import math
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import pytest

from .workloads import Workload, select_workloads

EXIT_OK, EXIT_METRIC_ERROR, EXIT_BAD_INPUT, EXIT_REGRESSION = 0, 1, 2, 3
COMPARE_FAIL_GRAMMAR = ("FIELD:N% (percentage, integer N) or FIELD:SECONDS (absolute difference), "
                        "FIELD one of min, max, mean, median, stddev, iqr; e.g. mean:20% or min:0.05")


class BenchInputError(ValueError):
    """Bad ``bench`` input (exit code 2); the message names the valid choices."""


@dataclass
class BenchRequest:
    """What to benchmark and where pytest-benchmark keeps its files.

    ``metrics``: names or wildcards (None: all registered); ``workloads``: comma-separated names;
    ``rounds``/``warmup_rounds``: override the workloads' defaults; ``options``: metric options over the
    workloads' fast defaults; the rest map one to one onto pytest-benchmark's ``--benchmark-*`` flags
    (``compare``: None = off, True = the latest saved run, or a run id such as ``"0001"``).
    """

    metrics: str | Sequence[str] | None = None
    workloads: str | None = None
    rounds: int | None = None
    warmup_rounds: int | None = None
    options: dict = field(default_factory=dict)
    json: str | None = None
    storage: str | None = None
    autosave: bool = False
    save: str | None = None
    compare: bool | str | None = None
    compare_fail: list[str] = field(default_factory=list)
    verbose: bool = False


@dataclass
class BenchCase:
    """One benchmark: ``metric`` on ``workload``; ``run(benchmark)`` times it and records a row."""

    metric: str
    workload: Workload
    request: BenchRequest
    rows: list

    @property
    def id(self) -> str:
        return f"{self.workload.name}-{self.metric}"

    def run(self, benchmark: Any) -> None:
        """Benchmark the case (see ``measure.benchmark_metric``) and append its row; re-raise a failure."""
        from .measure import MetricFailed, benchmark_metric

        row = {"metric": self.metric, "workload": self.workload.name, "mean": None, "min": None, "rounds": 0,
               "score": None, "error": None}
        self.rows.append(row)
        try:
            result = benchmark_metric(benchmark, self.metric, self.workload, rounds=self.request.rounds,
                                      warmup_rounds=self.request.warmup_rounds, options=self.request.options)
            row["score"] = result.score
        except Exception as exc:
            row["error"] = str(exc) if isinstance(exc, MetricFailed) else f"{type(exc).__name__}: {exc}"
            raise
        finally:
            stats = getattr(getattr(benchmark, "stats", None), "stats", None)
            if stats is not None and stats.rounds:
                row.update(mean=stats.mean, min=stats.min, rounds=stats.rounds)


class BenchPlugin:
    """The pytest plugin object of one ``bench`` run: parametrises the suite and collects its outcome."""

    def __init__(self, cases: list[BenchCase]) -> None:
        self.cases = cases
        self.regressions: list[tuple[str, str]] = []

    def pytest_generate_tests(self, metafunc: Any) -> None:
        if "bench_case" in metafunc.fixturenames:
            metafunc.parametrize("bench_case", self.cases, ids=[c.id for c in self.cases])

    @pytest.hookimpl(wrapper=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> Any:
        # pytest-benchmark raises PerformanceRegression here after printing the comparison; stop it there
        # so that pytest finishes cleanly (unconfigures) and the exit code comes from self.regressions
        from pytest_benchmark.session import PerformanceRegression

        try:
            return (yield)
        except PerformanceRegression:
            return None

    def pytest_sessionfinish(self, session: Any) -> None:
        # pytest-benchmark's own sessionfinish wrapper has compared the runs by now
        bench_session = getattr(session.config, "_benchmarksession", None)
        self.regressions = list(getattr(bench_session, "performance_regressions", []) or [])


def validate(request: BenchRequest) -> tuple[list[str], list[Workload]]:
    """Check the request before anything runs; returns (metric names, workloads).

    Raises `BenchInputError` for an unknown metric or workload, an ``--option`` that no selected
    metric takes, a malformed ``--compare-fail`` or ``--save`` name, ``--compare-fail`` without ``--compare``, and
    ``--compare`` when the storage holds no saved run (or none matching the id).
    """
    from ...host.registry import options_for_metrics, select_metrics

    try:
        metrics = select_metrics(request.metrics)
        workloads = select_workloads(request.workloads)
        options_for_metrics(metrics, request.options)  # an option no selected metric takes
    except ValueError as exc:
        raise BenchInputError(str(exc)) from None
    _check_pass_through(request)
    if request.compare is not None:
        _check_saved_runs(request)
    for name, value in (("rounds", request.rounds), ("warmup-rounds", request.warmup_rounds)):
        if value is not None and value < (1 if name == "rounds" else 0):
            raise BenchInputError(f"--{name} must be {'>= 1' if name == 'rounds' else '>= 0'}, got {value}")
    return metrics, workloads


def _check_pass_through(request: BenchRequest) -> None:
    import argparse

    from pytest_benchmark.utils import parse_compare_fail

    for expression in request.compare_fail:
        try:
            parse_compare_fail(expression)
        except argparse.ArgumentTypeError:
            raise BenchInputError(f"malformed --compare-fail {expression!r}; expected {COMPARE_FAIL_GRAMMAR}") from None
    if request.save is not None:
        from pytest_benchmark.utils import parse_save

        try:
            parse_save(request.save)
        except argparse.ArgumentTypeError as exc:
            raise BenchInputError(f"bad --save name {request.save!r}: {exc}") from None
    if request.compare_fail and request.compare is None:
        raise BenchInputError("--compare-fail needs --compare (the saved run to compare against)")


def storage_path(request: BenchRequest) -> Path:
    """The folder pytest-benchmark saves runs in: ``--storage`` or ``./.benchmarks`` (absolute)."""
    text = request.storage or ".benchmarks"
    return Path(text.removeprefix("file://")).expanduser().resolve()


def saved_runs(storage: Path, run_id: str | None = None) -> list[Path]:
    """Saved run files (``NNNN_name.json``) of this machine type in ``storage``, oldest first; with
    ``run_id``, those whose name starts with it (as ``--benchmark-compare=ID`` matches them)."""
    from pytest_benchmark.utils import get_machine_id

    folder = storage / get_machine_id()
    if not folder.is_dir():
        return []
    pattern = f"{run_id.rstrip('*')}*.json" if run_id else "[0-9][0-9][0-9][0-9]_*.json"
    return sorted(folder.glob(pattern))


def _check_saved_runs(request: BenchRequest) -> None:
    storage = storage_path(request)
    run_id = None if request.compare is True else str(request.compare)
    if saved_runs(storage, run_id):
        return
    available = [p.stem for p in saved_runs(storage)]
    what = "no saved run" if run_id is None else f"no saved run matching {run_id!r}"
    hint = (f"saved runs: {', '.join(available)}" if available else
            "save one first with --autosave or --save NAME (same --storage)")
    raise BenchInputError(f"--compare: {what} in {storage}; {hint}")


def pytest_arguments(request: BenchRequest, config_file: str) -> list[str]:
    """The pytest command line of the bundled suite with the pass-through ``--benchmark-*`` flags."""
    spec = importlib.util.find_spec(__package__ + ".suite")
    suite = Path(spec.origin)  # type: ignore[union-attr, arg-type]
    args = [str(suite), "-c", config_file, "--rootdir", str(suite.parent), "--confcutdir", str(suite.parent),
            "-p", "no:cacheprovider",
            "-v" if request.verbose else "-q", "-rfE", "--tb=short" if request.verbose else "--tb=line",
            "--benchmark-group-by=group", "--benchmark-sort=name",
            "--benchmark-columns=min,max,mean,stddev,median,rounds",
            f"--benchmark-storage=file://{storage_path(request)}"]
    if request.json:
        args.append(f"--benchmark-json={request.json}")
    if request.autosave:
        args.append("--benchmark-autosave")
    if request.save:
        args.append(f"--benchmark-save={request.save}")
    if request.compare is True:
        args.append("--benchmark-compare")
    elif request.compare is not None:
        args.append(f"--benchmark-compare={request.compare}")
    args += [f"--benchmark-compare-fail={expression}" for expression in request.compare_fail]
    return args


def run_bench(request: BenchRequest) -> int:
    """Validate ``request``, run the benchmarks, print the summary table; return the exit code (module docstring)."""
    metrics, workloads = validate(request)
    rows: list[dict] = []
    cases = [BenchCase(m, w, request, rows) for w in workloads for m in metrics]
    plugin = BenchPlugin(cases)
    with tempfile.TemporaryDirectory(prefix="similarity-bench-") as folder:
        config_file = os.path.join(folder, "pytest.ini")
        Path(config_file).write_text("[pytest]\n", encoding="utf-8")
        code = int(pytest.main(pytest_arguments(request, config_file), plugins=[plugin]))
    print()
    print(format_table(rows))
    if plugin.regressions:
        print("\nperformance regressed (--compare-fail " + ", ".join(request.compare_fail) + "):")
        for name, why in plugin.regressions:
            print(f"  {name}: {why}")
        return EXIT_REGRESSION
    if any(row["error"] for row in rows) or len(rows) < len(cases):
        return EXIT_METRIC_ERROR
    if code in (pytest.ExitCode.USAGE_ERROR, pytest.ExitCode.NO_TESTS_COLLECTED):
        return EXIT_BAD_INPUT
    return EXIT_OK if code == 0 else EXIT_METRIC_ERROR


def _fmt(value: Any, spec: str) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return format(value, spec)


def format_table(rows: list[dict]) -> str:
    """The summary table: metric, workload, mean and min seconds per round, rounds, score, error."""
    header = ["metric", "workload", "mean s", "min s", "rounds", "score", "error"]
    body = [[r["metric"], r["workload"], _fmt(r["mean"], ".4f"), _fmt(r["min"], ".4f"), str(r["rounds"]),
             _fmt(r["score"], ".4f"), r["error"] or ""] for r in rows]
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header) - 1)]
    lines = []
    for line in [header, *body]:
        cells = [cell.ljust(w) if i < 2 else cell.rjust(w) for i, (cell, w) in enumerate(zip(line, widths))]
        lines.append("  ".join(cells + [line[-1]]).rstrip())
    return "\n".join(lines)
