"""The argument groups every command is built from, one per concern (data, run, metrics, models, outputs,
progress): each flag declared once and meaning the same in every command that takes it; the sample limits' type,
the library's ``progress`` from the flags, and the old spelling of a renamed flag."""

from __future__ import annotations

import argparse
import sys
from typing import Any, Sequence

from ..utils.rules import as_positive_int


def positive_int(text: str) -> int:
    """``argparse`` type of the sample limits (``--max-train``, ``--max-test``, ``--max-seeds``): a whole number
    >= 1; argparse reports anything else naming the option (exit 2)."""
    try:
        value = as_positive_int(int(text))
    except ValueError:
        value = None
    if value is None:
        raise argparse.ArgumentTypeError(f"expected a positive whole number of samples, got {text!r}")
    return value


def progress_of(args: argparse.Namespace) -> str:
    """The ``progress`` argument for the library from a command's flags: ``"never"`` (``--no-progress``),
    ``"always"`` (``--progress``) or ``"auto"`` (bars only when stderr is a terminal; `utils.progress`)."""
    if getattr(args, "no_progress", False):
        return "never"
    return "always" if getattr(args, "progress_always", False) else "auto"


DATA_SPECS = "digits, cifar10:ROOT, folder:ROOT, text:FILE, pairs:IMAGES_DIR,CAPTIONS_FILE[,SIZE]"
OPTION_HELP = ("a metric option (METRIC.KEY=VALUE for one metric); repeatable. Values: JSON numbers, lists, "
               "true/false/yes/no, none, else text. similarity-plugins info METRIC lists them")


def arg_group(p: argparse.ArgumentParser, title: str) -> Any:
    """The section of a command's ``--help`` for one concern, made on first use, so that a command adds its own
    flags of that concern beside the shared ones.

    Args:
        p: the command's parser.
        title: ``data``, ``run``, ``metrics``, ``models``, ``outputs`` or ``progress`` (or a command's own).

    Returns:
        The argparse argument group titled ``title``.
    """
    for group in p._action_groups:
        if group.title == title:
            return group
    return p.add_argument_group(title)


def add_data_args(p: argparse.ArgumentParser, *, required: bool = True, role: str = "",
                  limits: Sequence[str] = ("train", "test")) -> None:
    """Add the data flags: ``--data DATA`` and ``--max-train`` / ``--max-test N`` (the first N samples of that
    split, read by `load_data`).

    Args:
        p: the command's parser.
        required: whether ``--data`` must be given.
        role: what the command does with the data, appended to the help text.
        limits: the splits (``"train"``, ``"test"``) that get a ``--max-SPLIT`` flag.
    """
    g = arg_group(p, "data")
    g.add_argument("--data", required=required, default=None, help=f"DATA spec: {DATA_SPECS}" + (f"; {role}" if role else ""))
    for split in limits:
        g.add_argument(f"--max-{split}", type=positive_int, default=None, metavar="N",
                       help=f"use the first N {'training' if split == 'train' else split} samples")


def add_run_args(p: argparse.ArgumentParser, *, device: str | None = "the models' device",
                 seed: str | None = "seed of every random draw of the run") -> None:
    """Add the run flags: ``--seed`` (an int, default 0) and ``--device``.

    Args:
        p: the command's parser.
        device: the default device in words, or None for a command without ``--device``.
        seed: what the seed seeds, or None for a command without ``--seed``.
    """
    g = arg_group(p, "run")
    if seed is not None:
        g.add_argument("--seed", type=int, default=0, help=f"{seed} (default 0)")
    if device is not None:
        g.add_argument("--device", default=None, help=f"cpu, cuda, cuda:1 ... (default: {device})")


def add_metric_args(p: argparse.ArgumentParser, *, default: str = "all", epochs: bool = True,
                    option: str = OPTION_HELP) -> None:
    """Add the metric flags: ``--metrics``, repeatable ``--option KEY=VALUE`` (metric options, read by
    `metric_options`) and ``--epochs N`` (the metric option ``epochs``: stitch training epochs).

    Args:
        p: the command's parser.
        default: which metrics run without ``--metrics``, in words.
        epochs: whether the command takes ``--epochs`` (its metrics train stitches).
        option: the help text of ``--option``.
    """
    g = arg_group(p, "metrics")
    g.add_argument("--metrics", default=None, help=f"comma-separated names or wildcards (default: {default})")
    g.add_argument("--option", action="append", metavar="KEY=VALUE", help=option)
    if epochs:
        from ..stitch.settings import StitchSettings

        g.add_argument("--epochs", type=int, default=None, metavar="N",
                       help=f"stitch training epochs of the stitching metrics (default {StitchSettings.epochs}); "
                            "the same as --option epochs=N")


def add_model_args(p: argparse.ArgumentParser) -> None:
    """The options every command that builds a MODEL takes: ``--num-classes`` and ``--in-channels``."""
    g = arg_group(p, "models")
    g.add_argument("--num-classes", type=int, default=None, help="classes of the model's head")
    g.add_argument("--in-channels", type=int, default=None, help="input channels (e.g. 1 for digits)")


def add_variant_args(p: argparse.ArgumentParser, what: str) -> None:
    """``--variant NAME`` (``what`` says what the variant applies to) and repeatable ``--variant-option KEY=VALUE``."""
    g = arg_group(p, "data")
    g.add_argument("--variant", default=None, help=what)
    g.add_argument("--variant-option", action="append", metavar="KEY=VALUE", help="variant keyword argument")


def add_output_args(p: argparse.ArgumentParser, out: str = "write the report as JSON",
                    csv: str | None = "write the report as CSV", *, required: bool = False,
                    default: str | None = None) -> Any:
    """Add the output flags: ``--out`` and ``--csv``.

    Args:
        p: the command's parser.
        out: what ``--out`` writes (its help text).
        csv: what ``--csv`` writes, or None for a command without it.
        required: whether ``--out`` must be given.
        default: the value of ``--out`` when it is not given.

    Returns:
        The ``outputs`` group, for the command's other outputs.
    """
    g = arg_group(p, "outputs")
    g.add_argument("--out", required=required, default=default, help=out)
    if csv is not None:
        g.add_argument("--csv", default=None, help=csv)
    return g


def add_progress_args(p: argparse.ArgumentParser) -> None:
    """``--progress`` / ``--no-progress`` on a command that lacks them (bars: only on a terminal by default)."""
    have = p._option_string_actions
    g = arg_group(p, "progress")
    if "--progress" not in have:
        g.add_argument("--progress", dest="progress_always", action="store_true",
                       help="show progress bars even when stderr is not a terminal")
    if "--no-progress" not in have:
        g.add_argument("--no-progress", action="store_true", help="never show progress bars")


def add_renamed(p: Any, old: str, new: str, why: str = "") -> None:
    """Accept the old spelling of a renamed flag for one more release: the same action and destination as the
    new flag, and a warning on stderr naming it.

    Args:
        p: the parser (or group) that holds ``new``.
        old: the old spelling, e.g. ``"--option"``.
        new: the flag's name now, already added to ``p``, e.g. ``"--tuning"``.
        why: the reason it was renamed, shown in the warning.
    """
    action = p._option_string_actions[new]

    class Renamed(type(action)):  # type: ignore[misc]
        def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
            print(f"warning: {option_string} is deprecated and will be removed in the next release; use {new}"
                  + (f" ({why})" if why else ""), file=sys.stderr)
            super().__call__(parser, namespace, values, option_string)

    p.add_argument(old, action=Renamed, dest=action.dest, type=action.type, metavar=action.metavar,
                   default=argparse.SUPPRESS, help=f"deprecated spelling of {new}")
