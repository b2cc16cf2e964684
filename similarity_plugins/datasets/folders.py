"""Image data from a user's folder: CIFAR-10 (torchvision's layout) and generic ImageFolder trees.

Nothing here downloads anything: the user points at data already on disk.
"""

from __future__ import annotations

import os
from pathlib import Path

from torch.utils.data import Dataset

from ..networks.data import Data

_SPLITS = ("train", "test")


def _check_split(split: str) -> None:
    if split not in _SPLITS:
        raise ValueError(f"unknown split {split!r}; expected 'train' or 'test'")


def to_tensor_transform(size: int | None):
    """torchvision transform to (C, H, W) float32 in [0, 1], resized and centre-cropped to ``size`` unless None."""
    from torchvision import transforms

    steps = []
    if size is not None:
        steps += [transforms.Resize(size), transforms.CenterCrop(size)]
    steps.append(transforms.ToTensor())  # (C, H, W) float32 in [0, 1]; no normalisation (the model's job)
    return transforms.Compose(steps)


def cifar10(root: str | os.PathLike, split: str = "train", size: int | None = None) -> Dataset:
    """CIFAR-10 from ``root`` (torchvision's ``cifar-10-batches-py`` layout), never downloaded.

    Samples are ``(x, y)``: ``x`` (3, 32, 32) float32 in [0, 1] (``size`` resizes), ``y`` int 0..9.
    Raises ``FileNotFoundError`` with the command to fetch it when the folder lacks the data.
    """
    _check_split(split)
    from torchvision.datasets import CIFAR10

    root = os.fspath(root)
    transform = to_tensor_transform(None if size in (None, 32) else size)
    try:
        ds = CIFAR10(root, train=(split == "train"), transform=transform, download=False)
    except RuntimeError as exc:  # torchvision: "Dataset not found or corrupted."
        raise FileNotFoundError(
            f"CIFAR-10 not found under {root}; download it yourself "
            f"(torchvision.datasets.CIFAR10({root!r}, download=True)) and pass cifar10:{root}"
        ) from exc
    ds.num_classes = len(ds.classes)
    return ds


def cifar10_data(root: str | os.PathLike, size: int | None = None) -> Data:
    """Both CIFAR-10 splits from ``root`` as ``Data(train, test)`` (50,000 / 10,000 images)."""
    return Data(train=cifar10(root, "train", size=size), test=cifar10(root, "test", size=size))


def image_folder(root: str | os.PathLike, split: str = "train", size: int | None = None) -> Dataset:
    """An ``ImageFolder`` tree at ``root/<split>/<class>/<image>`` as ``(x, y)`` samples.

    ``x`` (3, H, W) float32 in [0, 1]; with ``size`` every image is resized (short side) and centre-cropped
    to ``size`` x ``size`` (needed to batch images of different sizes). ``y`` int class index, classes
    sorted by folder name. Raises ``FileNotFoundError`` naming the expected layout when the folder is missing.
    """
    _check_split(split)
    from torchvision.datasets import ImageFolder

    folder = Path(root) / split
    if not folder.is_dir():
        raise FileNotFoundError(
            f"image folder {folder} not found; expected {Path(root)}/train/<class>/<image> and "
            f"{Path(root)}/test/<class>/<image> (torchvision ImageFolder layout)"
        )
    try:
        ds = ImageFolder(os.fspath(folder), transform=to_tensor_transform(size))
    except (FileNotFoundError, RuntimeError) as exc:
        raise FileNotFoundError(
            f"no images found under {folder}: put each class's images in {folder}/<class>/ ({exc})"
        ) from exc
    ds.num_classes = len(ds.classes)
    return ds


def image_folder_data(root: str | os.PathLike, size: int | None = None) -> Data:
    """Both splits of `image_folder` as ``Data(train, test)``; the two must share class folders."""
    train, test = image_folder(root, "train", size=size), image_folder(root, "test", size=size)
    if train.classes != test.classes:
        raise ValueError(
            f"train and test class folders under {root} differ: {train.classes} vs {test.classes}; "
            "give both splits the same class folders so label indices agree"
        )
    return Data(train=train, test=test)
