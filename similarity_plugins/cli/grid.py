"""The ``grid`` command: several models, their layers, every selected metric on every pair of (model, layer) nodes."""

from __future__ import annotations

import argparse
import math
import os
import time
from typing import Any, Sequence

from ..utils.text import counted
from .arguments import add_data_args, add_metric_args, add_model_args, add_output_args, add_run_args, arg_group, progress_of
from .grid_calibrated import calibrated_text, check_calibrate
from .loading import load_data, load_model
from .options import metric_options
from .outputs import input_files, resolve_outputs, write_outputs

BYTE_UNITS = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}


def byte_size(text: str) -> int:
    """``argparse`` type of a memory size: bytes, or a number with ``K``, ``M``, ``G`` or ``T`` (powers of 1024,
    an optional trailing ``B`` or ``iB``): ``"512M"`` -> 536870912; argparse reports anything else (exit 2)."""
    word = text.strip().lower().removesuffix("ib").removesuffix("b")
    unit = word[-1:] if word[-1:] in BYTE_UNITS else ""
    try:
        value = float(word[: len(word) - len(unit)]) * BYTE_UNITS[unit]
    except ValueError:
        value = -1.0
    if not (value >= 0 and value == value and value != float("inf")):
        raise argparse.ArgumentTypeError(f"expected a size in bytes such as 1073741824, 512M or 4G, got {text!r}")
    return int(value)


FIGURE_FORMATS = ("png", "svg", "pdf")


def model_specs(items: Sequence[str]) -> list[tuple[str, str]]:
    """Read ``--model NAME=SPEC`` items.

    Args:
        items: e.g. ``["a=small-cnn@a.pt"]``.

    Returns:
        ``[(NAME, SPEC), ...]``, e.g. ``[("a", "small-cnn@a.pt")]``.

    Raises:
        ValueError: an item without ``NAME=``, or a NAME given twice.
    """
    specs = named_items(items, "--model")
    if len({n for n, _ in specs}) != len(specs):
        raise ValueError("--model: each NAME may be given once")
    return specs


def named_items(items: Sequence[str], what: str) -> list[tuple[str, str]]:
    """Read ``NAME=VALUE`` items of the flag ``what``: ``["a=small-cnn@a.pt"]`` -> ``[("a", "small-cnn@a.pt")]``.

    Raises:
        ValueError: an item without a NAME, an ``=`` or a VALUE, naming the flag.
    """
    out = []
    for item in items:
        name, eq, value = item.partition("=")
        if not eq or not name or not value:
            raise ValueError(f"{what} expects NAME=VALUE, got {item!r}")
        out.append((name, value))
    return out


def parse_layers(items: list[str], models: list[str]) -> "list[str] | dict[str, list[str]]":
    """``--layers L1,L2`` (every model) or ``--layers NAME=L1,L2`` (one model; repeat) as ``compare_grid``'s ``layers``."""
    plain = [i for i in items if "=" not in i]
    named = named_items([i for i in items if "=" in i], "--layers")
    if plain and named:
        raise ValueError("give --layers either once for every model (L1,L2,...) or as NAME=L1,L2 per model, not both")
    if plain:
        if len(plain) > 1:
            raise ValueError("--layers L1,L2,... is given once for every model; use NAME=L1,L2 per model otherwise")
        return [s for s in plain[0].split(",") if s]
    return {name: [s for s in value.split(",") if s] for name, value in named}


def check_grid_sources(args: argparse.Namespace) -> None:
    """``grid`` needs --model, --layers and --data, or --store (then --model and --data may be left out)."""
    if args.store is None:
        missing = [flag for flag, value in (("--model", args.model), ("--layers", args.layers), ("--data", args.data))
                   if not value]
        if missing:
            raise ValueError(f"grid needs {', '.join(missing)} (or --store DIR to run from an activation store)")
    elif args.model and not (args.layers and args.data):
        raise ValueError("grid --store with --model also needs --layers and --data (to extract what the store lacks);"
                         " leave --model out to run from the store alone")
    elif not args.model and args.layers and any("=" not in item for item in args.layers):
        raise ValueError("grid --store without --model chooses entries with --layers NAME=L1,L2 (one per model)")
    elif not args.model and args.data:
        raise ValueError("grid --store without --model runs from the store alone and would ignore --data: leave "
                         "--data out, or give --model and --layers too (to extract on this data, or to run stitching "
                         "and IRIs, which need the models)")
    if args.shared_samples and args.store is None:
        raise ValueError("--shared-samples pairs the samples of store entries: it needs --store DIR")


def _check_figure(path: str | None) -> None:
    if path is not None:
        ext = os.path.splitext(path)[1].lstrip(".").lower()
        if ext not in FIGURE_FORMATS:
            raise ValueError(f"--figure {path!r}: the extension must be one of {', '.join(FIGURE_FORMATS)}")


def failure_notes(grid: Any) -> tuple[dict[tuple, int], str]:
    """Why cells failed, each distinct reason once: ``({cell: its reason's number}, the numbered reasons as text)``.

    Args:
        grid: a finished `Grid`.

    Returns:
        The number (from 1) of each failed cell's error and the lines ``(1) N cells of METRIC: ERROR``; ``""``
            when no cell failed.
    """
    reasons: dict[str, int] = {}
    numbers: dict[tuple, int] = {}
    counts: dict[str, dict[str, int]] = {}
    for cell, result in grid.cells.items():
        if result.error is None:
            continue
        numbers[cell] = reasons.setdefault(result.error, len(reasons) + 1)
        per_metric = counts.setdefault(result.error, {})
        per_metric[cell[0]] = per_metric.get(cell[0], 0) + 1
    lines = [f"  ({k}) " + ", ".join(f"{counted(n, 'cell')} of {m}" for m, n in counts[error].items()) + f": {error}"
             for error, k in reasons.items()]
    return numbers, ("failed cells (a cell's number says why):\n" + "\n".join(lines)) if lines else ""


def _matrix_text(grid, metric: str, failed: dict[tuple, int]) -> str:
    """The metric's matrix: a score per cell, ``(k)`` for a cell that failed for reason k (`failure_notes`), blank
    for a cell that was not asked for."""
    from ..utils.io import text_table

    labels = [f"{m}:{layer}" for m, layer in grid.nodes]
    values = grid.matrix(metric)

    def shown(i: int, j: int) -> str:
        if (metric, i, j) in failed:
            return f"({failed[(metric, i, j)]})"
        return "" if math.isnan(values[i, j]) else f"{values[i, j]:.4f}"

    rows = [[label] + [shown(i, j) for j in range(len(labels))] for i, label in enumerate(labels)]
    return f"{metric} (rows: front, columns: end)\n" + text_table(["front \\ end"] + labels, rows)


def _best_pairs_text(grid, pairs: str) -> str:
    """One line per metric and block of two models (or each model's own block, for one model or ``within``):
    the best layer pair (in a model's own block, of two different layers), its score and its family-wise p-value
    when the grid ran permutations."""
    from .grid_calibrated import blocks_of

    lines = []
    for metric in grid.metrics:
        for front, end in blocks_of(grid, pairs):
            try:
                best = grid.best_pair(metric, front, end, other_layers=True)
            except ValueError as exc:  # no scored cell, or cells missing: the block has no best pair
                lines.append(f"best {metric}: {front} x {end}: not given: {exc}")
                continue
            p = "" if best["p_value"] is None else f" (family-wise p = {best['p_value']:.4g})"
            lines.append(f"best {metric}: {front}:{best['front_layer']} x {end}:{best['end_layer']} = "
                         f"{best['score']:.4f}{p}")
    return "\n".join(lines)


def cmd_grid(args: argparse.Namespace) -> int:
    from ..networks.parallel import current_world
    from ..runner.grid.compare_grid import compare_grid
    from ..runner.score import select_score_metrics

    args.model = args.model or []
    check_grid_sources(args)
    resolve_outputs(args, ("--out", "--csv", "--figure", "--resume"),
                    input_files(*(spec.partition("=")[2] for spec in args.model)))  # before any work
    if args.store is not None:  # absolute, like the outputs: a plugin's chdir cannot move it
        args.store = os.path.abspath(args.store)
    _check_figure(args.figure)
    options = metric_options(args, select_score_metrics(args.metrics))
    if args.calibrate:
        check_calibrate(options, select_score_metrics(args.metrics))
    specs = model_specs(args.model)
    layers = parse_layers(args.layers, [n for n, _ in specs]) if args.layers else None
    data = load_data(args.data, args.max_train, args.max_test) if args.data else None
    models = {name: load_model(spec, args.num_classes, args.in_channels, data, progress=progress_of(args))
              for name, spec in specs} or None
    start = time.perf_counter()
    interrupted = False
    try:
        grid = compare_grid(models, layers, data, args.metrics, pairs=args.pairs, seed=args.seed, options=options,
                            device=args.device, progress=progress_of(args), resume=args.resume, store=args.store,
                            cache_bytes=args.cache_bytes, shared_samples=args.shared_samples)
    except KeyboardInterrupt as exc:  # Ctrl-C: the cells that finished are written (and are in --resume)
        grid, interrupted = getattr(exc, "grid", None), True
        if grid is None:
            raise
    if not current_world().is_main:
        return 130 if interrupted else 0
    failed, reasons = failure_notes(grid)
    for metric in grid.metrics:
        print(_matrix_text(grid, metric, failed) + "\n")
    for text in (_best_pairs_text(grid, args.pairs), calibrated_text(grid, args.pairs) if args.calibrate else "",
                 reasons):
        if text:
            print(text + "\n")
    print(f"{counted(len(grid.cells), 'cell')} ({len(failed)} failed) in {time.perf_counter() - start:.1f} s"
          + (" (interrupted)" if interrupted else ""))
    fmt = os.path.splitext(args.figure)[1].lstrip(".").lower() if args.figure else None
    write_outputs({args.out: grid.to_json() + "\n" if args.out else None,
                   args.csv: grid.report.to_csv() if args.csv else None,
                   args.figure: grid.heatmap_bytes(fmt) if args.figure else None})
    return 130 if interrupted else (0 if not failed else 1)


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``grid`` command to the ``similarity-plugins`` parser."""
    p = sub.add_parser("grid", help="every metric on every pair of (model, layer) nodes: layer x layer and model zoos")
    models = arg_group(p, "models")
    models.add_argument("--model", action="append", metavar="NAME=SPEC",
                        help="a model and its MODEL spec; repeat for a zoo (one model: its own layer x layer grid)")
    models.add_argument("--layers", action="append", metavar="L1,L2,...|NAME=L1,L2,...",
                        help="layers of every model, or NAME=L1,L2 for one model (repeat per model)")
    models.add_argument("--pairs", default="all", choices=["all", "across", "within"],
                        help="all ordered node pairs, pairs across models, or pairs within one model")
    add_model_args(p)
    add_metric_args(p, default="every activation-only metric")
    add_data_args(p, required=False)
    arg_group(p, "data").add_argument(
        "--store", default=None, metavar="DIR",
        help="an activation store: test activations are read from it (what it lacks is extracted first); "
             "without --model the grid runs from the store alone")
    arg_group(p, "data").add_argument(
        "--shared-samples", action="store_true",
        help="with --store: keep the samples every entry holds (says how many each loses) instead of refusing "
             "entries whose sample ids differ")
    arg_group(p, "run").add_argument(
        "--cache-bytes", type=byte_size, default=None, metavar="SIZE",
        help="hold at most SIZE bytes (e.g. 4G) of per-node Gram matrices and RDMs, and of activations read from "
             "--store; the least recently used are rebuilt or read again (same values, more time)")
    add_run_args(p, device="the first model's device")
    outputs = add_output_args(p, "write the grid as JSON (Grid.from_json reads it)",
                              "write the flat report (one row per metric and cell) as CSV")
    outputs.add_argument("--figure", default=None, help="write the heatmaps (.png, .svg or .pdf)")
    outputs.add_argument("--calibrate", action="store_true",
                         help="also print each cell's calibrated score and each block's calibrated max and mean "
                              "(needs --option permutations=K; docs: significance, calibrated scores)")
    outputs.add_argument("--resume", default=None, metavar="PATH",
                         help="finished-cells file: cells in it are read back, new ones appended as they finish")
    p.set_defaults(func=cmd_grid)
