"""Text and image-caption data from files, for the command line: ``text:FILE`` and ``pairs:IMAGES_DIR,CAPTIONS``.

- ``text:FILE``: a UTF-8 text file, one sample a line (empty lines and a byte-order mark skipped); the test
  split. ``text:TRAIN_FILE,TEST_FILE``: a training split too (stitching two language models fits on it).
- ``pairs:IMAGES_DIR,CAPTIONS_FILE[,SIZE]``: the image files of ``IMAGES_DIR`` (``.png``, ``.jpg``, ``.jpeg``,
  ``.bmp``, ``.webp``; sorted by file name) and ``CAPTIONS_FILE``, one caption a line in the same order (line i
  describes the i-th image by name). Images become (3, H, W) floats in [0, 1]; images of different sizes need
  ``SIZE`` (resized on the short side and centre-cropped to SIZE x SIZE). The test split, views ``"image"`` and
  ``"text"``. ``pairs:TRAIN_IMAGES,TRAIN_CAPTIONS,TEST_IMAGES,TEST_CAPTIONS[,SIZE]``: a training split too.
"""

from __future__ import annotations

import os

import torch

from ..adapters.text import paired_data, text_data
from ..networks.data import Data

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".webp")


def read_lines(path: str | os.PathLike) -> list[str]:
    """The non-empty lines of a UTF-8 text file, without their line ends (and without a leading byte-order mark)."""
    if not os.path.isfile(path):
        raise ValueError(f"text file {os.fspath(path)!r} not found")
    with open(path, encoding="utf-8-sig") as handle:  # a byte-order mark (Windows editors) is not text
        return [line.rstrip("\r\n") for line in handle if line.strip()]


def _texts(path: str | os.PathLike) -> list[str]:
    lines = read_lines(path)
    if not lines:
        raise ValueError(f"text file {os.fspath(path)!r} has no non-empty lines")
    return lines


def text_file_data(path: str | os.PathLike, train: str | os.PathLike | None = None) -> Data:
    """``Data(train=..., test=...)`` of the lines of ``path`` (the test split) and of ``train`` (the training split,
    None: none); see the module docstring."""
    return text_data(_texts(path), None if train is None else _texts(train))


def pairs_file_data(images: str | os.PathLike, captions: str | os.PathLike, size: int | None = None,
                    train: tuple[str | os.PathLike, str | os.PathLike] | None = None) -> Data:
    """``Data(train=..., test=...)`` of paired views ``{"image", "text"}`` from a folder and a captions file (the test
    split) and, when ``train`` gives ``(images, captions)`` too, a training split (module docstring).

    Raises ``ValueError`` when the counts differ (naming both), or images differ in size without ``size``.
    """
    test = _pairs_views(images, captions, size)
    return paired_data(test, None if train is None else _pairs_views(train[0], train[1], size))


def _pairs_views(images: str | os.PathLike, captions: str | os.PathLike, size: int | None) -> dict:
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
    return {"image": torch.stack(tensors), "text": texts}
