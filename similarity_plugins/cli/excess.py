"""The unseen-cue experiment on the command line: ``compare --excess-agreement`` (``apps.experiments``)."""

from __future__ import annotations

import argparse
import json
import time

from .arguments import progress_of
from .compare_inputs import load_inputs, writes_files
from .outputs import write_outputs

DEFAULT_METRICS = "stitch-slm,iri-slm"


def cmd_excess(args: argparse.Namespace) -> int:
    """Train each metric's stitch on data carrying a cue neither donor saw; print and write the agreement with
    the end model with and without the cue. Returns the exit code (0)."""
    from ..apps.experiments import excess_agreement, format_excess
    from ..host.registry import select_metrics
    from ..utils.io import csv_text

    options, data, front, end, layer_list = load_inputs(args, DEFAULT_METRICS)
    metrics = select_metrics(args.metrics or DEFAULT_METRICS)
    start = time.perf_counter()
    rows = excess_agreement(front, end, layer_list, data, metrics, strength=args.cue_strength, seed=args.seed,
                            options=options, progress=progress_of(args))
    if not writes_files():   # under torchrun: every rank holds the rows; rank 0 prints and writes them
        return 0
    print(format_excess(rows))
    print(f"\nexcess agreement = agreement with the end model on test data carrying the unseen cue minus "
          f"the same without it ({time.perf_counter() - start:.1f} s)")
    header = list(rows[0].to_dict())
    payload = {"experiment": "excess-agreement", "cue_strength": args.cue_strength, "results": [r.to_dict() for r in rows]}
    write_outputs({args.out: json.dumps(payload, indent=2) + "\n" if args.out else None,
                   args.csv: csv_text(header, ([r.to_dict()[k] for k in header] for r in rows)) if args.csv else None})
    return 0
