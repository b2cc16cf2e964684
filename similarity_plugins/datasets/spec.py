"""Turn a short data spec string (as typed on the command line) into ``Data(train, test)``."""

from __future__ import annotations

from ..networks.data import Data

DATA_SPEC_FORMS = (
    "digits            scikit-learn's digits at 32x32 (shipped with scikit-learn, no download)",
    "digits:SIZE       the same at SIZE x SIZE pixels, e.g. digits:16",
    "cifar10:ROOT      CIFAR-10 already downloaded under ROOT (torchvision layout)",
    "folder:ROOT       an ImageFolder tree ROOT/train/<class>/*, ROOT/test/<class>/*",
    "text:FILE         one text sample a line (for hf:DIR language models)",
    "pairs:IMAGES_DIR,CAPTIONS_FILE[,SIZE]  images (sorted by file name) and one caption a line, in that order",
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
            raise ValueError(f"'text' needs a file: text:FILE; valid forms:\n  {_forms()}")
        return text_file_data(rest)
    parts = rest.split(",")
    if len(parts) not in (2, 3) or not all(parts):
        raise ValueError(f"bad pairs spec {spec!r}; use pairs:IMAGES_DIR,CAPTIONS_FILE[,SIZE]")
    try:
        size = int(parts[2]) if len(parts) == 3 else None
    except ValueError:
        raise ValueError(f"bad image SIZE {parts[2]!r} in {spec!r}; a number of pixels per side") from None
    return pairs_file_data(parts[0], parts[1], size=size)
