"""Shared pieces of the commands: the argument groups (one per concern: data, run, metrics, models, outputs,
progress) and the one parse-then-check of metric options, the KEY=VALUE option grammar, layer pairs, loading
MODEL and DATA specs, and printing and writing a report. The paths a command writes are checked in `outputs`."""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
from typing import Any, Iterator, Sequence

from ..utils.rules import as_positive_int, split_layer_pair
from ..utils.text import counted, parse_assignment, parse_assignments


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


def emit_report(report: Any, out: str | None, csv: str | None, seconds: float, note: str = "") -> int:
    """Write ``report`` (a [`Report`][similarity_plugins.host.results.Report]) as JSON to ``out`` and as CSV to ``csv`` when
    given, all-or-none (`write_outputs`), then print it and the time it took (``seconds``, with ``note``
    after it): the files come first, so a closed pipe (``| head -1``) cannot lose them. Returns the exit code:
    0 when no row has an error, else 1."""
    files = {path: text for path, text in ((out, report.to_json() + "\n" if out is not None else None),
                                           (csv, report.to_csv() if csv is not None else None)) if path is not None}
    written = write_outputs(files, say=False)
    print(report)
    print(f"\n{counted(len(report), 'result')} in {seconds:.1f} s{note}")
    for path in written:
        print(f"wrote {path}")
    return 0 if all(r.error is None for r in report) else 1


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C would be, so that the finished rows are written the same way (exit 143)."""


def interrupted_code(exc: BaseException) -> int:
    """The exit code of a run stopped by ``exc``: 143 for SIGTERM (`Terminated`), 130 for Ctrl-C."""
    return 143 if isinstance(exc, Terminated) else 130


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM raises `Terminated` (a ``KeyboardInterrupt``) in the main thread, as
    Ctrl-C does; the previous handler comes back afterwards. Elsewhere than the main thread: nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        raise Terminated(f"terminated by signal {signum}")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def emit_interrupted(report: Any, out: str | None, csv: str | None, seconds: float,
                     interrupted: BaseException | None) -> int:
    """`emit_report` of a run that may have been stopped (``interrupted``: the ``KeyboardInterrupt``, a
    SIGTERM's included, or None): the finished rows are written and printed; returns 130/143 when stopped."""
    if interrupted is None:
        return emit_report(report, out, csv, seconds)
    finished = sum(r.error_type != "KeyboardInterrupt" for r in report)
    emit_report(report, out, csv, seconds, f" (interrupted: {finished} finished)")
    return interrupted_code(interrupted)


def parse_variant_options(items: Sequence[str] | None) -> dict:
    """``--variant-option`` items (``["swap_fraction=0.5"]``) as keyword arguments, read by the same grammar."""
    return parse_assignments(items or [], what="--variant-option")


def parse_layer(text: str) -> "str | tuple[str, str]":
    """``layer1`` -> ``"layer1"``; ``layer1:layer2`` or ``layer1->layer2`` -> ``("layer1", "layer2")``
    (`utils.rules.split_layer_pair`, the grammar every layer reads)."""
    return split_layer_pair(text) or text


def subset(dataset: Any, limit: int | None) -> Any:
    """The first ``limit`` samples of ``dataset`` (all of it when ``limit`` is None); ``limit`` must be >= 1."""
    if limit is not None and as_positive_int(limit) is None:
        raise ValueError(f"a sample limit must be a positive whole number (or none for all), got {limit!r}")
    if dataset is None or limit is None or limit >= len(dataset):
        return dataset
    from torch.utils.data import Subset

    return Subset(dataset, range(int(limit)))


def load_data(spec: str, max_train: int | None = None, max_test: int | None = None):
    """A DATA spec (``digits``, ``cifar10:ROOT``, ``folder:ROOT``, ``text:FILE``, ``pairs:DIR,FILE``) as ``Data``,
    each split cut to its limit."""
    from ..datasets import parse_data_spec
    from ..networks.data import Data

    data = parse_data_spec(spec)
    return Data(train=subset(data.train, max_train), test=subset(data.test, max_test))


def load_model(spec: str, num_classes: int | None, in_channels: int | None = None, data: Any = None,
               seed: int | None = None, progress: str = "auto"):
    """Build MODEL (initial weights from ``seed`` if given); for ``small-cnn`` the input channels and classes
    default to the data's. ``progress`` (`progress_of`) also switches transformers' own loading bars of an ``hf:``
    spec: they show only where the command's bars would."""
    from ..apps.zoo import build_model, split_model_spec

    scheme, _, query, _ = split_model_spec(spec)
    if data is not None:
        sample_split = data.train if data.train is not None else data.test
        if num_classes is None:
            num_classes = dataset_num_classes(sample_split)
        channels = _image_channels(sample_split)
        asked = [(f"--in-channels {in_channels}", in_channels)] if in_channels is not None else []
        if "in_channels" in query:
            asked.append((f"in_channels={query['in_channels']} in the model spec {spec!r}", query["in_channels"]))
        for what, value in asked:   # an explicit channel count is never overridden: it must match the data
            if channels is not None and value != channels:
                raise ValueError(f"{what} disagrees with the data, whose images have {channels} channel(s); "
                                 "drop it or use data with that many channels")
        if in_channels is None and "in_channels" not in query and scheme == "small-cnn":
            in_channels = channels
    from ..adapters.hf_load import transformers_bars
    from ..utils.progress import shows_progress

    with transformers_bars(shows_progress(progress), f"the model spec {spec!r}") if scheme == "hf" else contextlib.nullcontext():
        return build_model(spec, num_classes=num_classes, in_channels=in_channels, seed=seed)


def _image_channels(split: Any) -> int | None:
    """Channels C of a split's images (its first sample's x of shape (C, H, W)), or None when not images."""
    if split is None:
        return None
    x = split[0][0]
    return int(x.shape[0]) if hasattr(x, "shape") and len(x.shape) == 3 else None


def apply_variant(name: str, dataset: Any, seed: int, **kw: Any) -> Any:
    """Wrap ``dataset`` in the variant ``name``, passing ``seed`` when the variant takes one."""
    import inspect

    from ..datasets import make_variant
    from ..datasets.variants import variant_class

    if "seed" in inspect.signature(variant_class(name)).parameters:
        kw["seed"] = seed
    return make_variant(name, dataset, **kw)


def dataset_num_classes(dataset: Any) -> int | None:
    """The number of classes of a dataset (through ``Subset`` wrappers), or None when unknown."""
    from torch.utils.data import Subset

    from ..datasets.tensors import num_classes_of

    while isinstance(dataset, Subset):
        dataset = dataset.dataset
    return num_classes_of(dataset) if dataset is not None else None


def write_outputs(files: dict[str, Any], say: bool = True) -> list[str]:
    """Write ``{path: text or bytes}`` all-or-none (`write_all`) and, when
    ``say``, print ``wrote PATH`` for each; None paths (and None contents) are skipped. Returns the paths."""
    from ..utils.io import write_all

    written = write_all({p: c for p, c in files.items() if p is not None and c is not None})
    if say:
        for path in written:
            print(f"wrote {path}")
    return written


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


# Argument groups: one per concern, each flag declared once and meaning the same in every command that takes it.

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
