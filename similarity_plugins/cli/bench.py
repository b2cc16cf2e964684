"""The ``bench`` command: time the selected registered metrics on standard workloads with pytest-benchmark."""

from __future__ import annotations

import argparse
import sys

from ..utils.extras import require
from .arguments import add_metric_args
from .options import parse_options


def cmd_bench(args: argparse.Namespace) -> int:
    require("pytest_benchmark", "test", "similarity-plugins bench")  # MissingExtra: one line, exit 2 (main)
    from ..apps.bench.runner import EXIT_BAD_INPUT, BenchInputError, BenchRequest, run_bench

    request = BenchRequest(
        metrics=args.metrics, workloads=args.workload, rounds=args.rounds, warmup_rounds=args.warmup_rounds,
        options=parse_options(args.option or []), json=args.json, storage=args.storage, autosave=args.autosave,
        save=args.save, compare=args.compare, compare_fail=args.compare_fail or [], verbose=args.verbose,
    )
    try:
        return run_bench(request)
    except BenchInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``bench`` command to the ``similarity-plugins`` parser."""
    from ..apps.bench.workloads import WORKLOADS

    p = sub.add_parser(
        "bench", help="benchmark registered metrics on standard workloads (pytest-benchmark)",
        description="Time every selected metric (built-in or third-party) on standard workloads through "
        "pytest-benchmark: one benchmark per metric and workload, grouped by workload, score and workload in "
        "extra_info. Each round gets fresh caches (activations, stitches, IRIs are recomputed); donor training "
        "and data loading are not timed. Exit codes: 0 ok, 1 a metric errored, 2 bad input, 3 --compare-fail "
        "tripped.")
    p.add_argument("--workload", default="small",
                   help="comma-separated workloads: " + "; ".join(f"{w.name} ({w.description})" for w in WORKLOADS.values())
                   + " (default: small)")
    p.add_argument("--rounds", type=int, default=None, help="timed rounds per benchmark (default: the workload's)")
    p.add_argument("--warmup-rounds", type=int, default=None, help="untimed rounds first (default: the workload's)")
    add_metric_args(p, default="all registered", epochs=False,
                    option="a metric option over the workload's fast defaults (METRIC.KEY=VALUE for one metric)")
    g = p.add_argument_group("pytest-benchmark (passed through as --benchmark-*)")
    g.add_argument("--json", default=None, metavar="PATH", help="write pytest-benchmark's JSON report")
    g.add_argument("--storage", default=None, metavar="DIR", help="where runs are saved (default: ./.benchmarks)")
    g.add_argument("--autosave", action="store_true", help="save this run in the storage (numbered)")
    g.add_argument("--save", default=None, metavar="NAME", help="save this run in the storage under NAME")
    g.add_argument("--compare", nargs="?", const=True, default=None, metavar="ID",
                   help="compare with the latest saved run, or the run whose name starts with ID (e.g. 0001)")
    g.add_argument("--compare-fail", action="append", metavar="EXPR",
                   help="fail (exit 3) when a benchmark regressed past EXPR against --compare, e.g. mean:20%% "
                        "or min:0.05 (seconds); repeatable")
    p.add_argument("-v", "--verbose", action="store_true", help="pytest's verbose output")
    p.set_defaults(func=cmd_bench)
