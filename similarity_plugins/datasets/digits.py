"""scikit-learn's handwritten digits (1,797 8x8 images, shipped with scikit-learn) as small image tensors."""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch
import torch.nn.functional as F

from ..networks.data import Data
from ..utils.rules import as_positive_int
from .tensors import ImageTensors


@lru_cache(maxsize=8)
def _all_digits(size: int) -> tuple[torch.Tensor, torch.Tensor]:
    from sklearn.datasets import load_digits

    bunch = load_digits()
    images = torch.as_tensor(np.asarray(bunch.images, dtype=np.float32) / 16.0).unsqueeze(1)  # (N, 1, 8, 8)
    if size != 8:
        images = F.interpolate(images, size=(size, size), mode="bilinear", align_corners=False)
    images = images.clamp_(0.0, 1.0).contiguous()
    labels = torch.as_tensor(np.asarray(bunch.target, dtype=np.int64))
    return images, labels


@lru_cache(maxsize=8)
def _split_indices(test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    labels = np.asarray(load_digits().target)
    idx = np.arange(len(labels))
    train_idx, test_idx = train_test_split(idx, test_size=test_fraction, random_state=seed, stratify=labels)
    return np.sort(train_idx), np.sort(test_idx)


def digits(split: str | None = "train", size: int = 32, test_fraction: float = 0.25, seed: int = 0) -> ImageTensors:
    """scikit-learn's digits as an in-memory dataset.

    Each sample is ``(x, y)``: ``x`` (1, size, size) float32 in [0, 1] (8x8 originals upsampled bilinearly),
    ``y`` an int64 label 0..9. ``split`` is "train", "test" (a deterministic stratified split holding
    ``test_fraction`` of each class, fixed by ``seed``) or None for all 1,797 images. Nothing is downloaded.
    """
    if not isinstance(size, int) or as_positive_int(size) is None:
        raise ValueError(f"size must be a positive integer (pixels per side), got {size!r}")
    if split not in ("train", "test", None):
        raise ValueError(f"unknown split {split!r}; expected 'train', 'test' or None (all images)")
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction!r}")
    x, y = _all_digits(size)
    if split is not None:
        train_idx, test_idx = _split_indices(float(test_fraction), int(seed))
        idx = torch.as_tensor(train_idx if split == "train" else test_idx)
        x, y = x[idx], y[idx]
    return ImageTensors(x.clone(), y.clone(), num_classes=10)


def digits_data(size: int = 32, test_fraction: float = 0.25, seed: int = 0) -> Data:
    """Both splits of `digits` as ``Data(train, test)`` (1,347 / 450 images at the default fraction)."""
    return Data(
        train=digits("train", size=size, test_fraction=test_fraction, seed=seed),
        test=digits("test", size=size, test_fraction=test_fraction, seed=seed),
    )
