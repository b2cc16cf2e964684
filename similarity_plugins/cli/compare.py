"""The ``compare`` command: two models, one or more layers, the selected metrics, a report.

``compare --excess-agreement`` hands its arguments to the unseen-cue experiment (``excess.py``)."""

from __future__ import annotations

import argparse
import time
from typing import Any

from .common import (
    add_model_args,
    add_variant_args,
    apply_variant,
    check_metric_options,
    emit_interrupted,
    input_files,
    interrupted_code,
    load_data,
    load_model,
    parse_layer,
    parse_options,
    parse_variant_options,
    positive_int,
    progress_of,
    resolve_outputs,
)


def load_inputs(args: argparse.Namespace, default_metrics: str | None = None) -> tuple[dict, Any, Any, Any, list]:
    """Check the outputs and options, then load what the command compares: (options, data, front, end, layers).

    Every check runs before any work (exit 2 naming the path or option); ``default_metrics``: the metrics
    when ``--metrics`` is not given (None: all)."""
    from ..host.registry import options_for_metrics, select_metrics
    from ..runner.isolation import check_timeout

    resolve_outputs(args, ("--out", "--csv"), input_files(args.front, args.end))
    check_timeout(args.timeout)
    options = parse_options(args.option or [])
    if args.epochs is not None:
        options["epochs"] = args.epochs
    check_metric_options(options_for_metrics(select_metrics(args.metrics or default_metrics), options))
    data = load_data(args.data, args.max_train, args.max_test)
    if args.variant:
        from ..networks.data import Data

        variant_options = parse_variant_options(args.variant_option)
        train, test = data.train, data.test
        data = Data(train=None if train is None else apply_variant(args.variant, train, args.seed + 3, **variant_options),
                    test=None if test is None else apply_variant(args.variant, test, args.seed + 4, **variant_options))
    front = load_model(args.front, args.num_classes, args.in_channels, data)
    end = load_model(args.end, args.num_classes, args.in_channels, data)
    return options, data, front, end, [parse_layer(text) for text in args.layer]


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


def writes_files() -> bool:
    """True on the process that prints and writes the results (rank 0 under torchrun; the only one otherwise)."""
    from ..networks.parallel import current_world

    return current_world().is_main


class _RunExcessAgreement(argparse.Action):
    """``compare --excess-agreement``: the arguments go to the unseen-cue experiment's command instead."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        from .excess import cmd_excess

        namespace.excess_agreement = True
        namespace.func = cmd_excess


def register(sub: argparse._SubParsersAction) -> None:
    """Add this module's command(s) to the ``similarity-plugins`` parser."""
    p = sub.add_parser("compare", help="compare two models at one or more layers")
    p.add_argument("--front", required=True, help="MODEL spec of network A (the front)")
    p.add_argument("--end", required=True, help="MODEL spec of network B (the end)")
    p.add_argument("--layer", required=True, action="append",
                   help="layer name, or FRONT:END pair; repeat for a sweep")
    p.add_argument("--metrics", default=None, help="comma-separated names or wildcards (default: all)")
    p.add_argument("--data", required=True,
                   help="DATA spec: digits, cifar10:ROOT, folder:ROOT, text:FILE, pairs:IMAGES_DIR,CAPTIONS_FILE[,SIZE]")
    p.add_argument("--out", default=None, help="write the report as JSON")
    p.add_argument("--csv", default=None, help="write the report as CSV")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:1 ... (default: the front's device)")
    p.add_argument("--epochs", type=int, default=None, help="stitch training epochs (default 30)")
    p.add_argument("--option", action="append", metavar="KEY=VALUE",
                   help="a metric option (METRIC.KEY=VALUE for one metric); repeatable. Values: JSON numbers, "
                        "lists, true/false/yes/no, none, else text. `similarity-plugins info METRIC` lists them")
    p.add_argument("--max-train", type=positive_int, default=None, help="use the first N training samples")
    p.add_argument("--max-test", type=positive_int, default=None, help="use the first N test samples")
    p.add_argument("--timeout", type=float, default=None, metavar="S",
                   help="wall-clock limit in seconds for each metric at each layer; a late one gets a timeout error row "
                        "(docs/reliability.md)")
    p.add_argument("--excess-agreement", action=_RunExcessAgreement, nargs=0, default=False,
                   help="run the unseen-cue experiment instead: train the stitch on data with a label-coded cue "
                        "neither donor saw, report agreement with the end model with and without the cue "
                        "(metrics default to stitch-slm,iri-slm)")
    p.add_argument("--cue-strength", type=float, default=0.5, help="intensity of the unseen cue (0, 1]")
    add_variant_args(p, "compare on a variant of both splits (e.g. pixel-shortcut: every image carries its label's mark)")
    add_model_args(p)
    p.set_defaults(func=cmd_compare)
