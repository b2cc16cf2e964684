"""Option values checked at the boundary, naming the option: numbers that are text, limits that are not positive.

A metric declares its options with defaults (`contract`); `option_value_error` refuses a value
that cannot be what the default says (``iri_tol="abc"`` where the default is a number) and a sample limit
(``max_samples``, ``max_train``, ``max_test``, ``iri_max_seeds``: any name ending in ``max_samples``,
``max_train``, ``max_test`` or ``max_seeds``) that is not a positive whole number or None. ``compare`` gives
a metric with such a value an error row; the CLI refuses it before any work (exit 2).
"""

from __future__ import annotations

import numbers
import re
from typing import Any, Mapping

__all__ = ["option_value_error", "check_option_values", "is_limit"]

_LIMIT = re.compile(r"(^|_)max_(samples|train|test|seeds)$")


def is_limit(name: str) -> bool:
    """True for a sample-limit option name (``max_samples``, ``iri_max_seeds``, ...)."""
    return bool(_LIMIT.search(name))


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def option_value_error(name: str, value: Any, default: Any = None) -> str | None:
    """Why ``value`` is not acceptable for option ``name`` whose declared default is ``default``; None if it is.

    The message names the option: ``option iri_tol: expected a number, got 'abc'``.
    """
    if is_limit(name) and value is not None:
        if not (_is_number(value) and float(value).is_integer() and value > 0):
            return (f"option {name}: expected a positive whole number of samples (or none for all of them), "
                    f"got {value!r}")
        return None
    if _is_number(default) and value is not None and not _is_number(value):
        kind = "a whole number" if isinstance(default, numbers.Integral) else "a number"
        return f"option {name}: expected {kind}, got {value!r}"
    if _is_number(default) and _is_number(value) and value != value:
        return f"option {name}: expected a number, got NaN"
    return None


def check_option_values(options: Mapping[str, Any], defaults: Mapping[str, Any] | None) -> str | None:
    """The first problem among ``options`` (name -> value) given the metric's ``defaults`` (None: undeclared)."""
    for name, value in options.items():
        if isinstance(value, Mapping):
            continue
        problem = option_value_error(name, value, (defaults or {}).get(name))
        if problem:
            return problem
    return None
