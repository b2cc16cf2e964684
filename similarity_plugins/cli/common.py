"""Shared pieces of the commands: the KEY=VALUE option grammar, layer pairs, loading MODEL and DATA specs,
and printing and writing a report."""

from __future__ import annotations

import argparse
from typing import Any, Sequence

from ..utils.text import parse_assignment, parse_assignments


def parse_options(items: Sequence[str]) -> dict:
    """``["epochs=5", "stitch-dm.lr=0.01", "stitch_bn=yes"]`` -> ``{"epochs": 5, "stitch-dm": {"lr": 0.01},
    "stitch_bn": True}``.

    Values are read by the one KEY=VALUE grammar of :func:`similarity_plugins.utils.text.parse_value`
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


def emit_report(report: Any, out: str | None, csv: str | None, seconds: float) -> int:
    """Print ``report`` (a :class:`~similarity_plugins.Report`) and the time it took (``seconds``), write it
    as JSON to ``out`` and as CSV to ``csv`` when given; return the exit code: 0 when no row has an error, else 1."""
    print(report)
    print(f"\n{len(report)} results in {seconds:.1f} s")
    if out:
        report.to_json(out)
        print(f"wrote {out}")
    if csv:
        report.to_csv(csv)
        print(f"wrote {csv}")
    return 0 if all(r.error is None for r in report) else 1


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
    """The first ``limit`` samples of ``dataset`` (all of it when ``limit`` is None or 0)."""
    if dataset is None or not limit or limit >= len(dataset):
        return dataset
    from torch.utils.data import Subset

    return Subset(dataset, range(int(limit)))


def load_data(spec: str, max_train: int | None = None, max_test: int | None = None):
    """A DATA spec (``digits``, ``cifar10:ROOT``, ``folder:ROOT``) as ``Data``, each split cut to its limit."""
    from ..core.data import Data
    from ..datasets import parse_data_spec

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
        if in_channels is None and split_model_spec(spec)[0] == "small-cnn" and sample_split is not None:
            in_channels = int(sample_split[0][0].shape[0])
    return build_model(spec, num_classes=num_classes, in_channels=in_channels, seed=seed)


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
