"""The data a comparison runs on: a train split (to fit stitches, seed IRIs) and a test split (to score)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

import torch
from torch.utils.data import DataLoader, Dataset


@dataclass
class Data:
    """Train and test splits for a comparison.

    Each split is a ``torch.utils.data.Dataset`` or a ``DataLoader`` yielding ``(x, y)`` pairs, where
    ``x`` is an input tensor (for images: ``(C, H, W)`` float in ``[0, 1]`` per sample, normalisation
    belongs inside the model) and ``y`` an integer class label. Either split may be ``None`` when no
    selected metric needs it (CKA needs only ``test``; stitching needs both).
    """

    train: Dataset | DataLoader | None = None
    test: Dataset | DataLoader | None = None

    def split(self, name: str) -> Dataset | DataLoader:
        """Return the split called ``name`` ("train" or "test"), or raise a clear error if it is missing."""
        if name not in ("train", "test"):
            raise ValueError(f"unknown split {name!r}; expected 'train' or 'test'")
        value = getattr(self, name)
        if value is None:
            raise ValueError(
                f"this metric needs a {name} split, but Data.{name} is None; "
                f"pass Data(train=..., test=...) with a {name} dataset"
            )
        return value


class BadData(ValueError):
    """A split whose values cannot be used: NaN/Inf inputs, labels that are not class indices (the message says
    which split and sample)."""


def check_batch(x: torch.Tensor, y: torch.Tensor, first: int = 0, what: str = "the data split") -> None:
    """Raise `BadData` unless the float inputs ``x`` (B, ...) are finite and the labels ``y`` (B,) are integer
    class indices >= 0. ``first``: the index of the batch's first sample (for the message)."""
    if x.is_floating_point() or x.is_complex():
        finite = torch.isfinite(x.reshape(len(x), -1)).all(1) if x.ndim else torch.isfinite(x).reshape(1)
        if not bool(finite.all()):
            bad = (~finite).nonzero().flatten()
            raise BadData(f"{what} has NaN or Inf inputs (sample {first + int(bad[0])}, and {len(bad) - 1} more in "
                          "its batch); clean the data or leave those samples out")
    if y.is_floating_point() or y.is_complex() or y.dtype == torch.bool:
        raise BadData(f"{what} has {y.dtype} labels (sample {first}: {y.reshape(-1)[0].item()!r}); labels must be "
                      "integer class indices: convert them with .long() if they are whole numbers")
    if y.numel() and int(y.min()) < 0:
        raise BadData(f"{what} has a negative label ({int(y.min())}); labels must be class indices 0 .. classes-1")


def iterate_batches(split: Dataset | DataLoader, batch_size: int = 256,
                    what: str = "the data split") -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Yield ``(x, y)`` batches from a Dataset (in order, no shuffling) or from a DataLoader as it is.

    ``x``: (B, ...) float tensor; ``y``: (B,) int64 tensor. Raises ``ValueError`` for an empty split and
    `BadData` (naming ``what``) for NaN/Inf inputs or labels that are not integer class indices.
    """
    loader = split if isinstance(split, DataLoader) else DataLoader(split, batch_size=batch_size, shuffle=False)
    seen = 0
    for batch in loader:
        if not isinstance(batch, (tuple, list)) or len(batch) < 2:
            raise TypeError("data must yield (x, y) pairs; got a batch of type " + type(batch).__name__)
        x, y = batch[0], batch[1]
        x = torch.as_tensor(x)
        y = torch.as_tensor(y)
        check_batch(x, y, seen, what)
        y = y.long()
        seen += len(x)
        yield x, y
    if seen == 0:
        raise ValueError(f"{what} is empty: it yielded no samples")


def load_all(split: Dataset | DataLoader, batch_size: int = 256,
             what: str = "the data split") -> tuple[torch.Tensor, torch.Tensor]:
    """Materialise a whole split as ``(X, Y)``: X (N, ...) float, Y (N,) int64, on the CPU (checked as
    `iterate_batches` does; ``what`` names the split in errors)."""
    xs, ys = [], []
    for x, y in iterate_batches(split, batch_size, what):
        xs.append(x.detach().cpu())
        ys.append(y.detach().cpu())
    return torch.cat(xs), torch.cat(ys)


def split_size(split: Any) -> int | None:
    """Number of samples in a split if known without iterating (len of a Dataset or a loader's dataset)."""
    if isinstance(split, DataLoader):
        split = split.dataset
    try:
        return len(split)
    except TypeError:
        return None
