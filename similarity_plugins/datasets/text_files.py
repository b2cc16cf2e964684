"""Text and image-caption data from files, for the command line: ``text:FILE`` and ``pairs:IMAGES_DIR,CAPTIONS``.

- ``text:FILE``: a UTF-8 text file, one sample a line (empty lines skipped); the test split.
- ``pairs:IMAGES_DIR,CAPTIONS_FILE[,SIZE]``: the image files of ``IMAGES_DIR`` (``.png``, ``.jpg``, ``.jpeg``,
  ``.bmp``, ``.webp``; sorted by file name) and ``CAPTIONS_FILE``, one caption a line in the same order (line i
  describes the i-th image by name). Images become (3, H, W) floats in [0, 1]; images of different sizes need
  ``SIZE`` (resized on the short side and centre-cropped to SIZE x SIZE). The test split, views ``"image"`` and
  ``"text"``.
"""

from __future__ import annotations

import os

import torch

from ..networks.data import Data
from ..networks.text import paired_data, text_data

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".webp")


def read_lines(path: str | os.PathLike) -> list[str]:
    """The non-empty lines of a UTF-8 text file, without their line ends."""
    if not os.path.isfile(path):
        raise ValueError(f"text file {os.fspath(path)!r} not found")
    with open(path, encoding="utf-8") as handle:
        return [line.rstrip("\r\n") for line in handle if line.strip()]


def text_file_data(path: str | os.PathLike) -> Data:
    """``Data(test=...)`` of the lines of ``path`` (see the module docstring)."""
    lines = read_lines(path)
    if not lines:
        raise ValueError(f"text file {os.fspath(path)!r} has no non-empty lines")
    return text_data(lines)


def pairs_file_data(images: str | os.PathLike, captions: str | os.PathLike, size: int | None = None) -> Data:
    """``Data(test=...)`` of paired views ``{"image", "text"}`` from a folder and a captions file (module docstring).

    Raises ``ValueError`` when the counts differ (naming both), or images differ in size without ``size``.
    """
    from PIL import Image

    from .folders import to_tensor_transform

    if not os.path.isdir(images):
        raise ValueError(f"images folder {os.fspath(images)!r} not found")
    files = sorted(f for f in os.listdir(images) if f.lower().endswith(IMAGE_SUFFIXES))
    texts = read_lines(captions)
    if len(files) != len(texts):
        raise ValueError(f"{os.fspath(images)!r} has {len(files)} images but {os.fspath(captions)!r} has {len(texts)} "
                         "captions; give one caption a line per image, in the images' file-name order")
    transform = to_tensor_transform(size)
    tensors = []
    for name in files:
        with Image.open(os.path.join(images, name)) as img:
            tensors.append(transform(img.convert("RGB")))
    shapes = sorted({tuple(t.shape) for t in tensors})
    if len(shapes) > 1:
        raise ValueError(f"the images have different sizes ({', '.join(map(str, shapes[:3]))}); add a SIZE: "
                         f"pairs:{os.fspath(images)},{os.fspath(captions)},224")
    return paired_data({"image": torch.stack(tensors), "text": texts})
