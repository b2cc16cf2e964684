"""An in-memory image dataset (tensors indexed directly) and a helper to get tensors out of any dataset."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import Dataset


class ImageTensors(Dataset):
    """Images and labels held as two tensors: ``x`` (N, C, H, W) float32 in [0, 1], ``y`` (N,) int64.

    Indexing returns ``(x[i], y[i])``. ``.tensors`` is ``(x, y)`` like ``torch.utils.data.TensorDataset``,
    so batch code can slice the tensors directly instead of going through a DataLoader.
    """

    def __init__(self, x: torch.Tensor, y: torch.Tensor, num_classes: int | None = None,
                 classes: list[str] | None = None) -> None:
        if len(x) != len(y):
            raise ValueError(f"x has {len(x)} samples but y has {len(y)}; they must match")
        self.x = x
        self.y = y.long()
        self.num_classes = int(num_classes if num_classes is not None else (int(y.max()) + 1 if len(y) else 0))
        self.classes = classes if classes is not None else [str(i) for i in range(self.num_classes)]

    @property
    def tensors(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(x, y)``: (N, C, H, W) float32 and (N,) int64."""
        return self.x, self.y

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[index], self.y[index]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(n={len(self)}, shape={tuple(self.x.shape[1:])}, num_classes={self.num_classes})"


def tensors_of(dataset: Any) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Return ``(x, y)`` tensors if ``dataset`` holds them in memory (``.tensors`` or ``.x``/``.y``), else None.

    Variants in this package compute their tensors on first access (vectorised) and cache them.
    """
    t = getattr(dataset, "tensors", None)
    if isinstance(t, (tuple, list)) and len(t) >= 2 and all(isinstance(v, torch.Tensor) for v in t[:2]):
        return t[0], t[1].long()
    x, y = getattr(dataset, "x", None), getattr(dataset, "y", None)
    if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
        return x, y.long()
    return None


def num_classes_of(dataset: Any, default: int | None = None) -> int | None:
    """The dataset's number of classes from ``.num_classes`` or ``.classes`` when it has one, else ``default``."""
    n = getattr(dataset, "num_classes", None)
    if isinstance(n, int):
        return n
    classes = getattr(dataset, "classes", None)
    if isinstance(classes, (list, tuple)) and classes:
        return len(classes)
    return default
