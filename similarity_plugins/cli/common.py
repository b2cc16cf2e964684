"""Shared pieces of the commands: the KEY=VALUE option grammar, layer pairs, loading MODEL and DATA specs,
and printing and writing a report."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import threading
from typing import Any, Iterator, Sequence

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


def emit_report(report: Any, out: str | None, csv: str | None, seconds: float, note: str = "") -> int:
    """Write ``report`` (a [`Report`][similarity_plugins.host.results.Report]) as JSON to ``out`` and as CSV to ``csv`` when
    given, all-or-none (`write_outputs`), then print it and the time it took (``seconds``, with ``note``
    after it): the files come first, so a closed pipe (``| head -1``) cannot lose them. Returns the exit code:
    0 when no row has an error, else 1."""
    files = {path: text for path, text in ((out, report.to_json() + "\n" if out is not None else None),
                                           (csv, report.to_csv() if csv is not None else None)) if path is not None}
    written = write_outputs(files, say=False)
    print(report)
    print(f"\n{len(report)} results in {seconds:.1f} s{note}")
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
    """``layer1`` -> ``"layer1"``; ``layer1:layer2`` or ``layer1->layer2`` -> ``("layer1", "layer2")``."""
    for sep in ("->", ":"):
        if sep in text:
            a, b = text.split(sep, 1)
            return (a.strip(), b.strip())
    return text


def subset(dataset: Any, limit: int | None) -> Any:
    """The first ``limit`` samples of ``dataset`` (all of it when ``limit`` is None); ``limit`` must be >= 1."""
    if limit is not None and (isinstance(limit, bool) or int(limit) != limit or limit < 1):
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
                seed: int | None = None):
    """Build MODEL (initial weights from ``seed`` if given); for ``small-cnn`` the input channels and classes
    default to the data's."""
    from ..apps.zoo import build_model, split_model_spec

    if data is not None:
        sample_split = data.train if data.train is not None else data.test
        if num_classes is None:
            num_classes = dataset_num_classes(sample_split)
        scheme, _, query, _ = split_model_spec(spec)
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


def add_variant_args(p: argparse.ArgumentParser, what: str) -> None:
    """``--variant NAME`` (``what`` says what the variant applies to) and repeatable ``--variant-option KEY=VALUE``."""
    p.add_argument("--variant", default=None, help=what)
    p.add_argument("--variant-option", action="append", metavar="KEY=VALUE", help="variant keyword argument")


def add_model_args(p: argparse.ArgumentParser) -> None:
    """The options every command that builds a MODEL takes: ``--num-classes`` and ``--in-channels``."""
    p.add_argument("--num-classes", type=int, default=None, help="classes of the model's head")
    p.add_argument("--in-channels", type=int, default=None, help="input channels (e.g. 1 for digits)")


def check_outputs(paths: dict[str, Any], inputs: dict[str, Any] | None = None) -> None:
    """Refuse, before any work, the output paths that cannot be written: ``{"--out": path, "--csv": path}``
    (None entries are skipped); ``inputs`` (``{"X": path}``) are files the command reads, which no output may be.

    Raises ``ValueError`` naming the option, the path and the reason: an empty path (an unset shell variable),
    ``-`` (the table already goes to stdout), a folder, a read-only file or folder, a path under a file, an
    input file, or two outputs that reach one file (the same name, a symbolic link to it or to a folder above
    it, or a hard link). The CLI exits 2 on it.
    """
    from ..utils.io import unwritable_reason

    seen: dict[str, tuple[str, str]] = {}   # resolved target -> (option, path)
    reads = {what: _resolved(path) for what, path in (inputs or {}).items() if path}
    for option, path in paths.items():
        if path is None:
            continue
        text = os.fspath(path)
        if not text.strip():
            raise ValueError(f"{option} is empty ({text!r}: an unset shell variable?); give a file name, or drop "
                             f"{option}")
        if text.strip() == "-":
            raise ValueError(f"{option} '-': the table already goes to stdout; give a file name")
        reason = unwritable_reason(text)
        if reason is not None:
            raise ValueError(f"cannot write {option} {text!r}: {reason}")
        target = _resolved(text)
        for what, source in reads.items():
            if _same_file(target, source):
                raise ValueError(f"{option} {text!r} is the input {what}; writing it would destroy what this "
                                 "command reads: give another file name")
        for other, (other_option, other_path) in seen.items():
            if _same_file(target, other):
                raise ValueError(f"{option} {text!r} and {other_option} {other_path!r} name the same file "
                                 f"({target}); give each its own")
        seen[target] = (option, text)


def resolve_outputs(args: Any, options: Sequence[str], inputs: dict[str, Any] | None = None) -> None:
    """Check the output paths of ``args`` (`check_outputs`; ``options`` as ``"--out"``, read from ``args.out``)
    and make each one absolute, once, before any plugin runs: a plugin that changes the working folder
    (``os.chdir``) cannot move where the outputs go, and the path checked is the path written."""
    attrs = {option: option.lstrip("-").replace("-", "_") for option in options}
    check_outputs({option: getattr(args, attr) for option, attr in attrs.items()}, inputs)
    for attr in attrs.values():
        if getattr(args, attr) is not None:
            setattr(args, attr, os.path.abspath(os.fspath(getattr(args, attr))))


def _resolved(path: Any) -> str:
    """The absolute path ``path`` reaches, every symbolic link (of the file and of the folders above it) followed."""
    return os.path.realpath(os.path.abspath(os.fspath(path)))


def _same_file(a: str, b: str) -> bool:
    """Whether two resolved paths are one file: the same name, or one existing file under two names (a hard link)."""
    if a == b:
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist yet: only the names can agree
        return False


def input_files(*specs: "str | None") -> dict[str, str]:
    """The files named by model specs (``small-cnn@a.pt``: ``a.pt``) and ARRAY specs (``x.npz:KEY``: ``x.npz``)
    that exist, as ``{spec: path}``, for `check_outputs`."""
    found = {}
    for spec in specs:
        if not spec:
            continue
        path = spec.rpartition("@")[2] if "@" in spec else spec
        for candidate in (path, path.rpartition(":")[0]):
            if candidate and os.path.isfile(candidate):
                found[spec] = candidate
                break
    return found


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
    """Raise ``ValueError`` naming the option for the first bad value among ``{metric: options}`` (a number given
    as text, a sample limit that is not positive; `values`)."""
    from ..host.manager import get_plugin_manager
    from ..host.values import check_option_values

    info = get_plugin_manager().info
    for metric, options in per_metric.items():
        problem = check_option_values(options, info[metric].options if metric in info else None)
        if problem:
            raise ValueError(problem)


def positive_int(text: str) -> int:
    """``argparse`` type of the sample limits (``--max-train``, ``--max-test``, ``--max-seeds``): a whole number
    >= 1; argparse reports anything else naming the option (exit 2)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive whole number of samples, got {text!r}")
    return value


def add_progress_args(p: argparse.ArgumentParser) -> None:
    """``--progress`` / ``--no-progress`` on a command that lacks them (bars: only on a terminal by default)."""
    have = p._option_string_actions
    if "--progress" not in have:
        p.add_argument("--progress", dest="progress_always", action="store_true",
                       help="show progress bars even when stderr is not a terminal")
    if "--no-progress" not in have:
        p.add_argument("--no-progress", action="store_true", help="never show progress bars")


def progress_of(args: argparse.Namespace) -> "bool | str":
    """The ``progress`` argument for the library from a command's flags: ``False`` (``--no-progress``),
    ``"always"`` (``--progress``) or ``True`` (bars only when stderr is a terminal)."""
    if getattr(args, "no_progress", False):
        return False
    return "always" if getattr(args, "progress_always", False) else True
