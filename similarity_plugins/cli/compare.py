"""The ``compare`` command: two models, one or more layers, the selected metrics, a report.

``compare --excess-agreement`` hands its arguments to the unseen-cue experiment (``excess.py``)."""

from __future__ import annotations

import argparse
import time
from typing import Any

from .arguments import (
    add_data_args,
    add_metric_args,
    add_model_args,
    add_output_args,
    add_run_args,
    add_variant_args,
    arg_group,
    progress_of,
)
from .compare_inputs import load_inputs, writes_files
from .excess import cmd_excess
from .interrupts import interrupted_code
from .outputs import emit_interrupted


def cmd_compare(args: argparse.Namespace) -> int:
    from ..runner.compare import compare

    options, data, front, end, layer_list = load_inputs(args)
    start = time.perf_counter()
    interrupted: BaseException | None = None
    try:
        report = compare(front, end, layer_list if len(layer_list) > 1 else layer_list[0], data, args.metrics,
                         seed=args.seed, device=args.device, options=options, timeout=args.timeout,
                         progress=progress_of(args) if writes_files() else "never")
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: the rows that finished, the others marked interrupted
        report, interrupted = getattr(exc, "report", None), exc
        if report is None:
            raise
    if not writes_files():  # under torchrun: every rank holds the same report; rank 0 prints and writes it
        return interrupted_code(interrupted) if interrupted else 0 if all(r.error is None for r in report) else 1
    return emit_interrupted(report, args.out, args.csv, time.perf_counter() - start, interrupted)


class _RunExcessAgreement(argparse.Action):
    """``compare --excess-agreement``: the arguments go to the unseen-cue experiment's command instead."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        namespace.excess_agreement = True
        namespace.func = cmd_excess


def register(sub: argparse._SubParsersAction) -> None:
    """Add this module's command(s) to the ``similarity-plugins`` parser."""
    p = sub.add_parser("compare", help="compare two models at one or more layers")
    models = arg_group(p, "models")
    models.add_argument("--front", required=True, help="MODEL spec of network A (the front)")
    models.add_argument("--end", required=True, help="MODEL spec of network B (the end)")
    models.add_argument("--layer", required=True, action="append",
                        help="layer name, or FRONT:END pair; repeat for a sweep")
    add_model_args(p)
    add_metric_args(p)
    add_data_args(p)
    add_variant_args(p, "compare on a variant of both splits (e.g. pixel-shortcut: every image carries its label's mark)")
    add_run_args(p, device="the front's device")
    run = arg_group(p, "run")
    run.add_argument("--timeout", type=float, default=None, metavar="S",
                     help="wall-clock limit in seconds for each metric at each layer; a late one gets a timeout error "
                          "row (docs/reliability.md)")
    add_output_args(p)
    excess = arg_group(p, "unseen-cue experiment")
    excess.add_argument("--excess-agreement", action=_RunExcessAgreement, nargs=0, default=False,
                        help="run the unseen-cue experiment instead: train the stitch on data with a label-coded cue "
                             "neither donor saw, report agreement with the end model with and without the cue "
                             "(metrics default to stitch-slm,iri-slm)")
    excess.add_argument("--cue-strength", type=float, default=0.5, help="intensity of the unseen cue (0, 1]")
    p.set_defaults(func=cmd_compare)
