"""Reading back the JSON files this package wrote: one validated reader, errors that name the file.

Every JSON file the package reads back (a grid's JSON, a grid's finished-cells file) goes through these
functions: a file that cannot be read, is not JSON, or does not hold what it should raises `BadFile`, a
``ValueError`` whose message names the file (and the line, for JSON-lines files) and what is wrong, never a
bare ``KeyError`` or ``JSONDecodeError``. The CLI exits 2 on it (a bad input), not 1 (a cell failed).
Non-finite floats are written as the strings ``"inf"``, ``"-inf"`` and ``"nan"`` where a reader must get them
back (`encode_float`, `decode_float`): standard JSON has no such numbers.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from typing import Any, Callable

_NON_FINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


class BadFile(ValueError):
    """A file the package wrote and reads back is damaged, changed or of another kind; the message names it."""


def read_json(path: str | os.PathLike, what: str) -> Any:
    """The JSON value in the file ``path`` (``what`` names the kind of file in messages, e.g. "grid file").

    Raises `BadFile` naming the file when it cannot be read as UTF-8 or is not JSON; ``FileNotFoundError``
    when it does not exist."""
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except UnicodeDecodeError as exc:
        raise BadFile(f"{what} {path!r} is not a text file ({exc.reason} at byte {exc.start})") from None
    except IsADirectoryError:
        raise BadFile(f"{what} {path!r} is a folder; give the file") from None
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except (json.JSONDecodeError, ValueError) as exc:
        raise BadFile(f"{what} {path!r} is not valid JSON ({exc}); was it cut short or edited?") from None


def parse_json_line(line: str, path: str, number: int, what: str) -> Any:
    """One line of a JSON-lines file (``number`` counts from 1, for the message); `BadFile` when it is not JSON."""
    try:
        return json.loads(line, parse_constant=_refuse_constant)
    except (json.JSONDecodeError, ValueError) as exc:
        raise BadFile(f"{what} {path!r}, line {number}: not valid JSON ({exc})") from None


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def line_digest(payload: Any) -> str:
    """SHA-256 (hex) of ``payload``'s canonical JSON (sorted keys, no spaces): the digest one line carries."""
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def encode_float(value: Any) -> Any:
    """``value`` for JSON: a non-finite float as ``"inf"``, ``"-inf"`` or ``"nan"``, anything else as it is."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


def decode_float(value: Any, where: Callable[[], str]) -> float | None:
    """A score read back: None, a number, or one of `encode_float`'s strings; `BadFile` (``where()`` names the
    file and place) for anything else."""
    if value is None:
        return None
    if isinstance(value, str) and value in _NON_FINITE:
        return _NON_FINITE[value]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    raise BadFile(f"{where()}: a score must be a number, null, 'inf', '-inf' or 'nan', got {value!r}")


def expect(condition: bool, where: Callable[[], str], problem: str) -> None:
    """Raise `BadFile` ``"{where()}: {problem}"`` unless ``condition``."""
    if not condition:
        raise BadFile(f"{where()}: {problem}")
