"""What ``compare`` and its unseen-cue experiment (``compare --excess-agreement``) read: the outputs and
options checked, then the data, the two models and the layers loaded; and which process writes the results."""

from __future__ import annotations

import argparse
from typing import Any

from .arguments import progress_of
from .loading import apply_variant, load_data, load_model
from .options import metric_options, parse_layer, parse_variant_options
from .outputs import input_files, resolve_outputs


def load_inputs(args: argparse.Namespace, default_metrics: str | None = None) -> tuple[dict, Any, Any, Any, list]:
    """Check the outputs and options, then load what the command compares: (options, data, front, end, layers).

    Every check runs before any work (exit 2 naming the path or option); ``default_metrics``: the metrics
    when ``--metrics`` is not given (None: all)."""
    from ..host.registry import select_metrics
    from ..runner.isolation import check_timeout

    resolve_outputs(args, ("--out", "--csv"), input_files(args.front, args.end))
    check_timeout(args.timeout)
    options = metric_options(args, select_metrics(args.metrics or default_metrics))
    data = load_data(args.data, args.max_train, args.max_test)
    if args.variant:
        from ..networks.data import Data

        variant_options = parse_variant_options(args.variant_option)
        train, test = data.train, data.test
        data = Data(train=None if train is None else apply_variant(args.variant, train, args.seed + 3, **variant_options),
                    test=None if test is None else apply_variant(args.variant, test, args.seed + 4, **variant_options))
    front = load_model(args.front, args.num_classes, args.in_channels, data, progress=progress_of(args))
    end = load_model(args.end, args.num_classes, args.in_channels, data, progress=progress_of(args))
    return options, data, front, end, [parse_layer(text) for text in args.layer]


def writes_files() -> bool:
    """True on the process that prints and writes the results (rank 0 under torchrun; the only one otherwise)."""
    from ..networks.parallel import current_world

    return current_world().is_main
