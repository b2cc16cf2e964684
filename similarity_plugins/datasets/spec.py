"""Turn a short data spec string (as typed on the command line) into ``Data(train, test)``."""

from __future__ import annotations

import os

from ..networks.data import Data

DATA_SPEC_FORMS = (
    "digits            scikit-learn's digits at 32x32 (shipped with scikit-learn, no download)",
    "digits:SIZE       the same at SIZE x SIZE pixels, e.g. digits:16",
    "cifar10:ROOT      CIFAR-10 already downloaded under ROOT (torchvision layout)",
    "folder:ROOT       an ImageFolder tree ROOT/train/<class>/*, ROOT/test/<class>/*",
    "text:FILE         one text sample a line (for hf: language models); the test split",
    "text:TRAIN_FILE,TEST_FILE  the same with a training split (stitching language models fits on it)",
    "pairs:IMAGES_DIR,CAPTIONS_FILE[,SIZE]  images (sorted by file name) and one caption a line, in that order",
    "pairs:TRAIN_IMAGES,TRAIN_CAPTIONS,TEST_IMAGES,TEST_CAPTIONS[,SIZE]  the same with a training split",
)


def _forms() -> str:
    return "\n  ".join(DATA_SPEC_FORMS)


def parse_data_spec(spec: str, *, size: int | None = None) -> Data:
    """Build ``Data(train, test)`` from ``spec``: "digits", "digits:SIZE", "cifar10:ROOT" or "folder:ROOT".

    ``size`` (pixels per side) resizes the images; for digits it is the side length (default 32; a size in
    the spec wins over it). Raises ``ValueError`` listing the valid forms for an unknown spec.
    """
    from .digits import digits_data
    from .folders import cifar10_data, image_folder_data

    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"empty data spec; valid forms:\n  {_forms()}")
    spec = spec.strip()
    scheme, sep, rest = spec.partition(":")
    scheme = scheme.lower()
    if scheme == "digits":
        side = size if size is not None else 32
        if sep:
            try:
                side = int(rest)
            except ValueError:
                raise ValueError(f"bad digits size {rest!r} in {spec!r}; use e.g. digits:16 (pixels per side)") from None
        return digits_data(size=side)
    if scheme in ("cifar10", "folder"):
        if not rest:
            raise ValueError(f"{scheme!r} needs a folder: {scheme}:ROOT; valid forms:\n  {_forms()}")
        if scheme == "cifar10":
            return cifar10_data(rest, size=size)
        return image_folder_data(rest, size=size)
    if scheme in ("text", "pairs"):
        return _text_spec(scheme, rest, spec)
    raise ValueError(f"unknown data spec {spec!r}; valid forms:\n  {_forms()}")


def _text_spec(scheme: str, rest: str, spec: str) -> Data:
    from .text_files import pairs_file_data, text_file_data

    if scheme == "text":
        if not rest:
            raise ValueError(f"'text' needs a file: text:FILE or text:TRAIN_FILE,TEST_FILE; valid forms:\n  {_forms()}")
        if os.path.isfile(rest):   # a file whose name holds a comma
            return text_file_data(rest)
        parts = rest.split(",")
        if len(parts) > 2 or not all(parts):
            raise ValueError(f"bad text spec {spec!r}; use text:FILE (the test split) or text:TRAIN_FILE,TEST_FILE")
        return text_file_data(parts[-1], train=parts[0] if len(parts) == 2 else None)
    parts = rest.split(",")
    forms = ("use pairs:IMAGES_DIR,CAPTIONS_FILE[,SIZE] (the test split) or "
             "pairs:TRAIN_IMAGES,TRAIN_CAPTIONS,TEST_IMAGES,TEST_CAPTIONS[,SIZE]")
    size = None
    if len(parts) in (3, 5):
        last = parts.pop()
        try:
            size = int(last)
        except ValueError:
            raise ValueError(f"bad pairs spec {spec!r}: its last part {last!r} is no SIZE (pixels per side); "
                             f"{forms}") from None
    if len(parts) not in (2, 4) or not all(parts):
        raise ValueError(f"bad pairs spec {spec!r}; {forms}")
    return pairs_file_data(parts[-2], parts[-1], size=size, train=(parts[0], parts[1]) if len(parts) == 4 else None)
