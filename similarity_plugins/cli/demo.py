"""The ``demo`` command: the paper's shortcut finding on built-in digits, in minutes."""

from __future__ import annotations

import argparse

from .arguments import add_output_args, add_run_args, progress_of


def cmd_demo(args: argparse.Namespace) -> int:
    from ..apps.studies import prepare_out_dir
    from ..apps.studies.shortcut import run_demo

    run_demo(out_dir=prepare_out_dir(args.out), quick=args.quick, seed=args.seed, progress=progress_of(args))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add this module's command(s) to the ``similarity-plugins`` parser."""
    p = sub.add_parser("demo", help="the paper's central claim on built-in digits, in minutes (= study shortcut)")
    add_output_args(p, "output folder (report.json, report.csv, report.html, similarity.png, iris.png)", csv=None,
                    default="similarity-demo")
    p.add_argument("--quick", action="store_true", help="a smaller run (fewer stitch epochs and IRI seeds)")
    add_run_args(p, device=None)
    p.set_defaults(func=cmd_demo)
