"""A metric's option values read at the boundary, each by the type its option declares.

Every declared [`Option`][similarity_plugins.host.contract.Option] has a type: a rule of
`similarity_plugins.utils.value_rules` (a number in an interval, one of a few words, a sample limit, a path, ...),
one of ``bool``, ``int``, ``float`` and ``str``, or none, when the default's type stands for it. `option_rule` turns
a declared type into its rule once, when the metric registers; `coerce_option_values` reads every value a metric is
given by its option's rule, the same way for ``compare``, ``score``, grids and the CLI: the value converted (a word
to a bool, ``3.0`` to ``3`` for a whole number), or ``ValueError`` with the rule's message
(``option lr must be a positive number, got -1``). ``compare`` and ``score`` give a metric with such a value an
error row before it runs; the CLI refuses it before any work (exit 2).
"""

from __future__ import annotations

import numbers
from typing import Any, Mapping

from ..utils.value_rules import BOOLEAN, TEXT, Interval, OrNone, ValueRule

_PLAIN: dict[type, ValueRule] = {bool: BOOLEAN, int: Interval(int), float: Interval(float, finite=False), str: TEXT}


def option_rule(declared: Any, default: Any) -> ValueRule | None:
    """The rule of an option from its declared ``type`` (a `ValueRule`, or ``bool``, ``int``, ``float``, ``str``).

    ``float`` takes any number but NaN (infinities included). A plain type whose default is None takes None too (the
    metric's "not given"). Without a declared type, the default's type stands for
    it (a bool default takes yes/no values, an int whole numbers, a float numbers, a str text), and None is taken as
    well, as for any undeclared option; a default of any other type (None included) leaves the option unchecked
    (None is returned).

    Raises:
        TypeError: ``declared`` is neither a rule nor one of those four types.
    """
    if isinstance(declared, ValueRule):
        return declared
    if declared is not None:
        if declared not in _PLAIN:
            raise TypeError(f"an option's type must be a rule of similarity_plugins.utils.value_rules or one of bool, "
                            f"int, float, str; got {declared!r}")
        return OrNone(_PLAIN[declared]) if default is None else _PLAIN[declared]  # None: the metric's "auto"
    kinds = ((bool, bool), (numbers.Integral, int), (numbers.Real, float), (str, str))
    kind = next((plain for kind, plain in kinds if isinstance(default, kind)), None)
    return None if kind is None else OrNone(_PLAIN[kind])


def coerce_option_values(options: Mapping[str, Any], rules: Mapping[str, ValueRule | None] | None) -> dict[str, Any]:
    """Every option of one metric (name -> value) read by its rule (``rules``: name -> rule, None: unchecked), as a
    new dict; raises ``ValueError`` with the rule's message for the first value a rule refuses."""
    rules = rules or {}
    return {name: rules[name].check(name, value) if rules.get(name) is not None else value
            for name, value in options.items()}


def check_option_values(options: Mapping[str, Any], rules: Mapping[str, ValueRule | None] | None) -> str | None:
    """The first problem among ``options`` (name -> value) by the metric's option ``rules``, or None."""
    try:
        coerce_option_values(options, rules)
    except ValueError as exc:
        return str(exc)
    return None
