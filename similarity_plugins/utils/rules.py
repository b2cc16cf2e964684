"""The value rules every layer shares, each written once: words for true and false, a yes/no value, a positive
whole number, and the layer-pair grammar.

Every reader of such a value calls these (the option checks in ``host.values``, the ``KEY=VALUE`` grammar in
``utils.text``, the environment switches, the command line's ``argparse`` types, the measures' arguments),
so a rule changes here and nowhere else. The callers word their own error messages (they know the option's
name and unit); the rule itself is here.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

TRUE_WORDS = ("true", "yes", "on", "1")
FALSE_WORDS = ("false", "no", "off", "0")
#: What a yes/no value may be, in words, for error messages (`bool_of`).
BOOLEAN_WORDS = "true or false (also yes/no, on/off, 1/0)"

LAYER_PAIR_SEPARATORS = ("->", ":")


def truth_of(text: Any) -> bool | None:
    """The truth value of a word: True for `TRUE_WORDS`, False for `FALSE_WORDS` (any case, spaces around
    ignored), None for anything else (not a string, or another word).

    Args:
        text: the word, as typed in an option, a ``KEY=VALUE`` item or an environment variable.

    Returns:
        True, False, or None when ``text`` is neither a true nor a false word.
    """
    if not isinstance(text, str):
        return None
    word = text.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    return None


def bool_of(value: Any) -> bool | None:
    """A yes/no value read by the one rule: a bool as it is, the numbers 1 and 0, or a word of `TRUE_WORDS` and
    `FALSE_WORDS` (`truth_of`); anything else is no yes/no value (never silently true).

    Args:
        value: the value, as given in Python, a model spec's query, an option or an environment variable.

    Returns:
        True, False, or None when ``value`` breaks the rule (the caller names the option and `BOOLEAN_WORDS`).
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, numbers.Real) and value in (0, 1):
        return bool(value)
    return truth_of(value)


def as_positive_int(value: Any, minimum: int = 1) -> int | None:
    """``value`` as an ``int`` when it is a whole number >= ``minimum``, else None.

    A whole number is a finite real number with no fractional part (``5`` and ``5.0``); booleans, text and
    NaN are not numbers here (``True`` is never a count).

    Args:
        value: the value to read.
        minimum: the smallest accepted value (1: a positive integer).

    Returns:
        The value as an ``int``, or None when it breaks the rule.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    if not math.isfinite(float(value)) or not float(value).is_integer() or value < minimum:
        return None
    return int(value)


def split_layer_pair(text: str) -> tuple[str, str] | None:
    """The two layers of a layer-pair text, or None for a single layer name.

    ``"layer1->layer2"`` and ``"layer1:layer2"`` are both the pair (``"layer1"``, ``"layer2"``): the front layer
    of network A, the end layer of network B (spaces around each name are dropped); the first separator of
    `LAYER_PAIR_SEPARATORS` found splits the text once.

    Args:
        text: a layer name or a pair written with ``->`` or ``:``.

    Returns:
        ``(front, end)``, or None when ``text`` holds no separator.
    """
    for sep in LAYER_PAIR_SEPARATORS:
        if sep in text:
            front, end = text.split(sep, 1)
            return front.strip(), end.strip()
    return None
