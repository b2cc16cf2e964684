"""What a command builds from its specs: DATA (each split cut to its limit, a variant applied) and MODEL (input
channels and classes defaulting to the data's)."""

from __future__ import annotations

import contextlib
from typing import Any

from ..utils.rules import as_positive_int


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
