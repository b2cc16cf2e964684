"""Text helpers used everywhere user input is read: "did you mean" hints and the one KEY=VALUE grammar.

The grammar (``--option``, ``--variant-option`` and model-spec queries ``?key=value&...``) reads each
value with `parse_value`: JSON when it parses (numbers, ``true``/``false``, ``null``, lists such as
``[0.5, 0.8]``, quoted strings), else ``yes``/``on`` -> True, ``no``/``off`` -> False, ``none`` -> None
(any case), else a Python float literal (``.5``, ``1.``, ``inf``), else the text itself as a string.
"""

from __future__ import annotations

import contextlib
import contextvars
import difflib
import json
from typing import Any, Iterable, Iterator

from .rules import FALSE_WORDS, TRUE_WORDS

# the words of `rules` (digits never get here: JSON reads them first) and the words for "no value"
_WORDS = {**dict.fromkeys(TRUE_WORDS, True), **dict.fromkeys(FALSE_WORDS, False), "none": None, "null": None}


def close_matches(name: str, choices: Iterable[str], n: int = 3, cutoff: float = 0.5) -> list[str]:
    """Up to ``n`` of ``choices`` that look like ``name`` (difflib ratio >= ``cutoff``), best first."""
    return difflib.get_close_matches(str(name), [str(c) for c in choices if c], n=n, cutoff=cutoff)


def did_you_mean(name: str, choices: Iterable[str], n: int = 3, cutoff: float = 0.5) -> str:
    """``"; did you mean 'epochs'?"`` for the choices close to ``name``, or ``""`` when none is close.

    Meant to be appended to an error message: ``f"unknown option {name!r}{did_you_mean(name, valid)}"``.
    """
    close = close_matches(name, choices, n=n, cutoff=cutoff)
    return f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""


def counted(n: int, noun: str) -> str:
    """``n`` and ``noun``, plural unless ``n`` is 1: ``counted(1, "result")`` -> ``"1 result"``, ``"3 results"``."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def parse_value(text: str) -> Any:
    """The value of a ``KEY=VALUE`` text (see the module docstring for the rules).

    ``"5"`` -> 5, ``"1e-3"`` -> 0.001, ``"yes"`` -> True, ``"[0.5, 0.8]"`` -> [0.5, 0.8],
    ``"none"`` -> None, ``"identity"`` -> "identity".
    """
    text = str(text).strip()
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    low = text.lower()
    if low in _WORDS:
        return _WORDS[low]
    try:
        return float(text)
    except ValueError:
        return text


def parse_assignment(item: str, *, what: str = "option") -> tuple[str, Any]:
    """``"epochs=5"`` -> ``("epochs", 5)``; raises ``ValueError`` naming ``what`` when there is no ``KEY=``."""
    key, eq, value = str(item).partition("=")
    key = key.strip()
    if not eq or not key:
        raise ValueError(f"{what} expects KEY=VALUE, got {item!r}")
    return key, parse_value(value)


def parse_assignments(items: Iterable[str], *, what: str = "option") -> dict[str, Any]:
    """``["epochs=5", "stitch_bn=yes"]`` -> ``{"epochs": 5, "stitch_bn": True}`` (a later key wins)."""
    return dict(parse_assignment(item, what=what) for item in items)


_ON_COMMAND_LINE = contextvars.ContextVar("similarity_plugins_on_command_line", default=False)


def how_to(python: str, command: str) -> str:
    """What to run, in the reader's terms: ``command`` (a ``similarity-plugins`` command line, shown in backticks)
    inside `command_line` (the CLI), else ``python`` (a call). For messages that tell the user what to do."""
    return f"`{command}`" if _ON_COMMAND_LINE.get() else python


@contextlib.contextmanager
def command_line() -> Iterator[None]:
    """Within this block, `how_to` names commands: the ``similarity-plugins`` entry point runs every command in it."""
    token = _ON_COMMAND_LINE.set(True)
    try:
        yield
    finally:
        _ON_COMMAND_LINE.reset(token)
