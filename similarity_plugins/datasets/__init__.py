"""Built-in data: scikit-learn's digits (no download), CIFAR-10 and image folders from a user path, and
variants that plant or remove label-coded cues. Every dataset yields ``(x, y)`` with ``x`` (C, H, W) float32
in [0, 1] and ``y`` an int64 class label."""

from .digits import digits, digits_data
from .folders import cifar10, cifar10_data, image_folder, image_folder_data
from .spec import parse_data_spec
from .tensors import ImageTensors, tensors_of
from .variants import (
    PatchPattern,
    PixelShortcut,
    RandomMark,
    ShortcutRandomised,
    ShortcutRemoved,
    UnseenCue,
    make_variant,
)

ShortcutRandomized = ShortcutRandomised

__all__ = [
    "ImageTensors",
    "PatchPattern",
    "PixelShortcut",
    "RandomMark",
    "ShortcutRandomised",
    "ShortcutRandomized",
    "ShortcutRemoved",
    "UnseenCue",
    "cifar10",
    "cifar10_data",
    "digits",
    "digits_data",
    "image_folder",
    "image_folder_data",
    "make_variant",
    "parse_data_spec",
    "tensors_of",
]
