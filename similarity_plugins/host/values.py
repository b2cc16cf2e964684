"""Option values checked at the boundary, by one set of rules, naming the option.

A metric declares its options with defaults (`contract`). `coerce_option_values` reads every
value a metric is given against its default, the same way for ``compare``, ``score``, grids and the CLI:

- a sample limit (``max_samples``, ``max_train``, ``max_test``, ``iri_max_seeds``: any name ending in
  ``max_samples``, ``max_train``, ``max_test`` or ``max_seeds``) must be a positive whole number or None;
- an option whose default is a bool takes True/False, 1/0, or the words ``true``/``yes``/``on``/``1`` and
  ``false``/``no``/``off``/``0`` (any case); anything else is an error, never silently true;
- an option whose default is a number refuses text, booleans and NaN; one whose default is a whole number also
  takes an array of numbers (``permutations`` takes the permutations themselves), which the metric's own rule
  then checks;
- a path option (a name ending in ``_dir``, ``_path`` or ``_file``) must be None or a non-empty path, and a
  ``_dir`` that exists must be a folder.

``compare`` and ``score`` give a metric with such a value an error row; the CLI refuses it before any work
(exit 2).

A family states the ranges and choices of its own values once, as a table of [`Rule`][Rule]s (name -> what
the value must be: a number in a range, or one of a few words, [`one_of`][one_of]), checked by
[`check_rules`][check_rules]: the stitch settings, the IRI tuning values and the IRI metrics' options are such
tables.
"""

from __future__ import annotations

import math
import numbers
import os
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from ..utils.rules import BOOLEAN_WORDS, FALSE_WORDS, TRUE_WORDS, as_positive_int, bool_of
from ..utils.text import did_you_mean

__all__ = ["check_option_values", "coerce_option_value", "coerce_option_values", "is_limit",
           "TRUE_WORDS", "FALSE_WORDS", "Rule", "one_of", "check_rule", "check_rules", "POSITIVE_INT", "POSITIVE",
           "NON_NEGATIVE"]

_LIMIT = re.compile(r"(^|_)max_(samples|train|test|seeds)$")
_PATH = re.compile(r"(^|_)(dir|path|file)$")


def is_limit(name: str) -> bool:
    """True for a sample-limit option name (``max_samples``, ``iri_max_seeds``, ...)."""
    return bool(_LIMIT.search(name))


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _is_numeric_array(value: Any) -> bool:
    """True for a NumPy array, tensor or (nested) list of real numbers with at least one dimension."""
    if not hasattr(value, "__array__") and not isinstance(value, (list, tuple)):
        return False
    if hasattr(value, "detach"):  # a torch tensor, wherever it lives
        value = value.detach().cpu()
    try:
        array = np.asarray(value)
    except (TypeError, ValueError, RuntimeError):
        return False
    return array.ndim >= 1 and array.size > 0 and array.dtype.kind in "biuf"


def _as_bool(name: str, value: Any) -> bool:
    read = bool_of(value)
    if read is None:
        raise ValueError(f"option {name}: expected {BOOLEAN_WORDS}, got {value!r}")
    return read


def _as_path(name: str, value: Any) -> Any:
    if not isinstance(value, (str, os.PathLike)):
        raise ValueError(f"option {name}: expected a path (or none), got {type(value).__name__} {value!r}")
    text = os.fspath(value)
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"option {name}: the path is empty (an unset variable?); give a path, or none to turn it off")
    if name.endswith("_dir") and os.path.exists(text) and not os.path.isdir(text):
        raise ValueError(f"option {name}: {text!r} is a file, not a folder")
    return value


def coerce_option_value(name: str, value: Any, default: Any = None) -> Any:
    """``value`` for option ``name`` read by the rules of the module docstring (booleans from words); raises
    ``ValueError`` naming the option (``option iri_tol: expected a number, got 'abc'``)."""
    if isinstance(value, Mapping):
        return value
    if is_limit(name):
        if value is not None and as_positive_int(value) is None:
            raise ValueError(f"option {name}: expected a positive whole number of samples (or none for all of them), "
                             f"got {value!r}")
        return value
    if value is None:
        return value
    if isinstance(default, bool):
        return _as_bool(name, value)
    if _PATH.search(name):
        return _as_path(name, value)
    if isinstance(default, numbers.Integral) and not isinstance(default, bool) and _is_numeric_array(value):
        return value
    if _is_number(default) and not _is_number(value):
        kind = "a whole number" if isinstance(default, numbers.Integral) else "a number"
        raise ValueError(f"option {name}: expected {kind}, got {value!r}")
    if _is_number(default) and value != value:
        raise ValueError(f"option {name}: expected a number, got NaN")
    return value


def coerce_option_values(options: Mapping[str, Any], defaults: Mapping[str, Any] | None) -> dict[str, Any]:
    """Every option of one metric (name -> value) read against its ``defaults`` (None: undeclared), as a new dict;
    raises ``ValueError`` for the first bad value, naming the option."""
    defaults = defaults or {}
    return {name: coerce_option_value(name, value, defaults.get(name)) for name, value in options.items()}


def check_option_values(options: Mapping[str, Any], defaults: Mapping[str, Any] | None) -> str | None:
    """The first problem among ``options`` (name -> value) given the metric's ``defaults`` (None: undeclared)."""
    try:
        coerce_option_values(options, defaults)
    except ValueError as exc:
        return str(exc)
    return None


@dataclass(frozen=True)
class Rule:
    """What a value must be: a finite number of ``kind`` (``int``: whole numbers only) for which ``ok(value)``
    holds, ``want`` saying so in words for the error (``"> 0"``, ``"in [0, 1)"``); or, with ``choices``, one
    of those values (``kind`` and ``ok`` unused; made by [`one_of`][one_of])."""

    kind: type
    ok: Callable[[Any], bool]
    want: str
    choices: tuple | None = None


def one_of(choices: tuple, note: str = "") -> Rule:
    """The rule "one of ``choices``"; ``note`` (``"(0: off)"``) follows the list in the error message."""
    choices = tuple(choices)
    listed = ", ".join(str(c) for c in choices) + (f" {note}" if note else "")
    return Rule(str, lambda v: v in choices, f"one of {listed}", choices)


POSITIVE_INT = Rule(int, lambda v: as_positive_int(v) is not None, "a positive integer")
POSITIVE = Rule(float, lambda v: v > 0.0, "> 0")
NON_NEGATIVE = Rule(float, lambda v: v >= 0.0, ">= 0")


def check_rule(name: str, value: Any, rule: Rule) -> Any:
    """``value`` as ``rule.kind`` when it obeys ``rule`` (a choice: as given); raises ValueError naming the option,
    what it must be and the value given (``option lr must be > 0, got -1``), with close choices if any."""
    if rule.choices is not None:
        if value not in rule.choices:
            raise ValueError(f"option {name} must be {rule.want}, got {value!r}"
                             f"{did_you_mean(str(value), rule.choices)}")
        return value
    whole = rule.kind is int
    number = _is_number(value) and math.isfinite(float(value))
    if not number or (whole and not float(value).is_integer()):
        raise ValueError(f"option {name} must be {rule.want if whole else 'a finite number'}, got {value!r}")
    if not rule.ok(value):
        raise ValueError(f"option {name} must be {rule.want}, got {value!r}")
    return rule.kind(value)


def check_rules(values: Mapping[str, Any], rules: Mapping[str, Rule]) -> dict[str, Any]:
    """``values`` with each one that has a rule checked and converted (`check_rule`); the others as given."""
    return {name: check_rule(name, value, rules[name]) if name in rules else value for name, value in values.items()}
