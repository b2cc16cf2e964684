"""The ``study`` command: the paper's three studies (shortcut, robustness, unseen-cue) on built-in digits."""

from __future__ import annotations

import argparse
import sys

from ..apps.studies import STUDY_NAMES, check_study
from .arguments import add_output_args, add_run_args, progress_of


def cmd_study(args: argparse.Namespace) -> int:
    from ..apps.studies import prepare_out_dir, run_study

    out = prepare_out_dir(args.out if args.out is not None else f"study-{args.name}")
    run_study(args.name, out, quick=args.quick, seed=args.seed, progress=progress_of(args))
    return 0


def _study_name(value: str) -> str:
    try:
        return check_study(value)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def register(sub: argparse._SubParsersAction) -> None:
    """Add this module's command(s) to the ``similarity-plugins`` parser."""
    p = sub.add_parser("study", help="run one of the paper's studies: " + ", ".join(STUDY_NAMES),
                       description="The paper's studies on built-in digits: shortcut (clean vs shortcut donors; "
                       "demo is its short name), robustness (PGD-robust vs plain donors), unseen-cue (excess "
                       "agreement from a cue neither donor saw). Each writes report.json, report.csv and a figure.")
    p.add_argument("name", type=_study_name, metavar="{" + ",".join(STUDY_NAMES) + "}", help="which study")
    p.add_argument("--quick", action="store_true", help="a smaller run (fewer stitch epochs and IRI seeds)")
    add_output_args(p, "output folder (default: study-NAME)", csv=None)
    add_run_args(p, device=None)
    p.set_defaults(func=cmd_study)
