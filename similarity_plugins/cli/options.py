"""The command line's option grammar: ``--option KEY=VALUE`` items parsed and their values checked against the
selected metrics' declared options (one parse-then-check, run before any work), ``--variant-option`` items and
layer pairs."""

from __future__ import annotations

import argparse
from typing import Sequence

from ..utils.rules import split_layer_pair
from ..utils.text import parse_assignment, parse_assignments


def parse_options(items: Sequence[str]) -> dict:
    """``["epochs=5", "stitch-dm.lr=0.01", "stitch_bn=yes"]`` -> ``{"epochs": 5, "stitch-dm": {"lr": 0.01},
    "stitch_bn": True}``.

    Values are read by the one KEY=VALUE grammar of `similarity_plugins.utils.text.parse_value`
    (JSON, yes/no/on/off, none, else a string), the same as model-spec queries. ``METRIC.KEY`` scopes an
    option to one metric. Raises ``ValueError`` for an item without ``=``.
    """
    options: dict = {}
    for item in items:
        key, value = parse_assignment(item, what="--option")
        metric, dot, name = key.rpartition(".")
        if dot and metric:
            options.setdefault(metric, {})[name] = value
        else:
            options[key] = value
    return options


def check_metric_options(per_metric: dict[str, dict]) -> None:
    """Raise ``ValueError`` naming the option for the first bad value among ``{metric: options}``: a value its
    option's type refuses (`host.values`)."""
    from ..host.manager import get_plugin_manager
    from ..host.values import check_option_values

    info = get_plugin_manager().info
    for metric, options in per_metric.items():
        problem = check_option_values(options, info[metric].option_types if metric in info else None)
        if problem:
            raise ValueError(problem)


def metric_options(args: argparse.Namespace, metrics: Sequence[str]) -> dict:
    """The one parse-then-check of the metric flags, run before any work.

    Args:
        args: the parsed command line; ``args.option`` (``--option`` items) and ``args.epochs`` when the
            command has it.
        metrics: the selected metric names, whose declared options the values are checked against.

    Returns:
        The options (`parse_options`), ``--epochs`` over an ``epochs`` item.

    Raises:
        ValueError: an option no selected metric takes (with the valid names) or a bad value, naming the
            option (the CLI exits 2).
    """
    from ..host.registry import options_for_metrics

    options = parse_options(args.option or [])
    if getattr(args, "epochs", None) is not None:
        options["epochs"] = args.epochs
    check_metric_options(options_for_metrics(list(metrics), options))
    return options


def parse_variant_options(items: Sequence[str] | None) -> dict:
    """``--variant-option`` items (``["swap_fraction=0.5"]``) as keyword arguments, read by the same grammar."""
    return parse_assignments(items or [], what="--variant-option")


def parse_layer(text: str) -> "str | tuple[str, str]":
    """``layer1`` -> ``"layer1"``; ``layer1:layer2`` or ``layer1->layer2`` -> ``("layer1", "layer2")``
    (`utils.rules.split_layer_pair`, the grammar every layer reads)."""
    return split_layer_pair(text) or text
