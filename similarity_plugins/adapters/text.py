"""Text and paired (multi-view) data: `text_data` and `paired_data` build a [`Data`][Data] whose samples are
strings, or dicts of views (``{"image": tensor, "text": str}``); each model reads the view of its kind."""

from __future__ import annotations

from typing import Any, Sequence

import torch
from torch.utils.data import Dataset

from ..networks.data import Data, split_size


class TextDataset(Dataset):
    """Strings with integer labels: item ``i`` is ``(texts[i], labels[i])`` (labels default to 0)."""

    def __init__(self, texts: Sequence[str], labels: Sequence[int] | None = None, what: str = "texts") -> None:
        if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
            raise TypeError(f"{what} must be a list of strings, got {type(texts).__name__}"
                            + ("" if isinstance(texts, str) else " with other items"))
        self.texts = list(texts)
        blank = [i for i, t in enumerate(self.texts) if not t.strip()]
        if blank:
            raise ValueError(f"{what} has {len(blank)} empty string(s) (first at index {blank[0]}); a sample needs "
                             "at least one token: drop them")
        self.labels = _labels(labels, len(self.texts), what)

    def __len__(self) -> int:
        return len(self.texts)

    def __getitem__(self, i: int) -> tuple[str, int]:
        return self.texts[i], self.labels[i]


class PairedDataset(Dataset):
    """Several views of each sample: item ``i`` is ``({view: views[view][i]}, labels[i])``."""

    def __init__(self, views: dict[str, Any], labels: Sequence[int] | None = None, what: str = "test") -> None:
        if not isinstance(views, dict) or len(views) < 2:
            raise TypeError(f"paired data ({what}) takes a dict of two or more views, such as "
                            "{'image': images, 'text': captions}")
        self.views = {name: (list(v) if isinstance(v, (list, tuple)) else v) for name, v in views.items()}
        lengths = {name: split_size(v) for name, v in self.views.items()}
        if len(set(lengths.values())) != 1:
            named = " and ".join(f"{name!r} has {n}" for name, n in lengths.items())
            raise ValueError(f"the views of the {what} split differ in length: {named} samples; each sample needs "
                             "every view (one caption per image)")
        self.size = next(iter(lengths.values()))
        self.labels = _labels(labels, self.size, what)

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i: int) -> tuple[dict[str, Any], int]:
        return {name: _item(view, i) for name, view in self.views.items()}, self.labels[i]


def _item(view: Any, i: int) -> Any:
    item = view[i]
    if isinstance(item, (tuple, list)) and not isinstance(view, (list, torch.Tensor)):
        return item[0]  # a dataset of (x, y): its input
    return item


def _labels(labels: Sequence[int] | None, n: int, what: str) -> list[int]:
    if labels is None:
        return [0] * n
    labels = [int(v) for v in labels]
    if len(labels) != n:
        raise ValueError(f"{what}: {len(labels)} labels for {n} samples; give one label per sample")
    return labels


def text_data(test: Sequence[str], train: Sequence[str] | None = None, *, test_labels: Sequence[int] | None = None,
              train_labels: Sequence[int] | None = None) -> Data:
    """A [`Data`][Data] of strings: each model tokenizes the same samples with its own tokenizer.

    Args:
        test: the test split, a list of strings (one sample each).
        train: the training split (for metrics that fit something), or None.
        test_labels: integer labels per test sample (default: all 0; activation measures ignore them).
        train_labels: the same for the training split.

    Returns:
        ``Data(train=TextDataset | None, test=TextDataset)``.
    """
    return Data(train=None if train is None else TextDataset(train, train_labels, "train texts"),
                test=TextDataset(test, test_labels, "test texts"))


def paired_data(test: dict[str, Any], train: dict[str, Any] | None = None, *,
                test_labels: Sequence[int] | None = None, train_labels: Sequence[int] | None = None) -> Data:
    """A [`Data`][Data] whose samples have several views, such as images and their captions.

    Args:
        test: ``{"image": images, "text": captions}``: images as an (N, C, H, W) float tensor in [0, 1] or a
            dataset of ``(x, y)``; captions as a list of N strings. Any view names; a wrapped model reads the one
            named by its ``view`` (``"text"`` for a model with a tokenizer, ``"image"`` otherwise).
        train: the same for a training split, or None.
        test_labels: integer labels per test sample (default: all 0).
        train_labels: the same for the training split.

    Returns:
        ``Data(train=PairedDataset | None, test=PairedDataset)``.

    Raises:
        ValueError: views of different lengths (naming both lengths), before any model runs.
    """
    return Data(train=None if train is None else PairedDataset(train, train_labels, "train"),
                test=PairedDataset(test, test_labels, "test"))
