"""The checks behind the plugin contract: each field a metric declares (`plugin.FIELDS`) has its reader here, which
checks a plugin's value and normalises it (options with their types, the data splits a metric needs, what its score
means), and the options a call gives are resolved against the selected metrics' declarations.

``options`` may be a sequence of `Option` (or of names, or of ``(name, default[, doc[, type]])`` tuples) or a dict
``{name: default}``. A plugin without ``options`` is *open*: it takes any option, receives every global option plus
its own ``options[metric]`` dict, and counts as taking every global option when `resolve_options` checks that each
global option is taken by at least one selected metric.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator, Mapping, NamedTuple

from ..utils.text import did_you_mean
from .values import option_rule

SPLIT_NAMES = {"train": "training split", "test": "test split"}

KINDS = ("similarity", "distance")

#: The invariance vocabulary: each word names a transform ``T`` of one side's activations ``X`` (N, D)
#: (rows are samples) such that ``score(T(X), Y) == score(X, Y)`` for every ``X``, ``Y``.
INVARIANCES: dict[str, str] = {
    "translation": "adding one vector to every row: X -> X + 1 b^T",
    "isotropic-scaling": "multiplying by a positive number: X -> c X, c > 0",
    "orthogonal": "rotations and reflections of the features: X -> X Q, Q^T Q = I",
    "invertible-linear": "any invertible linear map of the features: X -> X A, A invertible",
    "permutation": "reordering the features (columns): X -> X P, P a permutation",
    "monotonic": "any transform that keeps the rank order of the pairwise dissimilarities of the rows "
                 "(rank-based comparisons of dissimilarity matrices)",
}


class Option(NamedTuple):
    """One declared metric option: its ``name``, ``default`` value, a one-line ``doc`` and its ``type``.

    A plugin declares its options as a sequence of these (or of plain names, or a ``{name: default}`` dict) in
    its ``options`` attribute; ``compare`` then passes each metric exactly its declared options, each value read by
    the option's type first (a bad value is refused before the metric runs, naming the option and what it must be).

    Attributes:
        name: the option's key in ``options={...}`` and ``--option KEY=VALUE``.
        default: the value the metric receives when the caller gives none.
        doc: one line for ``similarity-plugins info`` and the [options tables](../options.md).
        type: what a value must be: a rule of `similarity_plugins.utils.value_rules` (``Interval(float, 0, 1)``,
            ``OneOf(("sum", "mean"))``, ``SAMPLE_LIMIT``, ...) or ``bool``, ``int``, ``float`` or ``str`` (with a
            None default, None is taken too: the metric's "not given"); None: the
            type of the default (a bool takes yes/no values, an int whole numbers, a float numbers, a str text;
            any other default, None included, takes any value).
    """

    name: str
    default: Any = None
    doc: str = ""
    type: Any = None


class UnknownOption(ValueError):
    """An option that no selected metric takes (the message names the valid ones and close matches)."""


def option_items(declared: Any) -> Iterator[Option]:
    """The items of a declared ``options`` (a sequence of `Option`, names or tuples, or a dict) as `Option` values,
    as written (unchecked; ``TypeError`` for an item that makes no `Option`)."""
    items: Iterable[Any] = declared.items() if isinstance(declared, Mapping) else declared
    for item in items:
        yield Option(item) if isinstance(item, str) else Option(*item)


def read_options(declared: Any, metric: str) -> tuple[Option, ...] | None:
    """A plugin's ``options`` as `Option` values whose ``type`` is the option's rule (`values.option_rule`; None:
    unchecked); None when undeclared (an open metric).

    Raises:
        TypeError: naming the metric, for a malformed declaration, an unknown type or a default its declared type
            refuses.
    """
    if declared is None:
        return None
    options: dict[str, Option] = {}
    declared_types: dict[str, bool] = {}
    try:
        for option in option_items(declared):
            if not isinstance(option.name, str) or not option.name:
                raise TypeError(f"option name {option.name!r} is not a non-empty string")
            rule = option_rule(option.type, option.default)
            options[option.name] = option._replace(doc=str(option.doc or ""), type=rule)
            declared_types[option.name] = option.type is not None
    except TypeError as exc:
        raise TypeError(f"metric {metric!r}: `options` must be a dict {{name: default}} or a sequence of "
                        f"Option(name, default, doc, type); {exc}") from None
    for option in options.values():
        try:
            if option.type is not None and declared_types[option.name]:
                option.type.check(option.name, option.default)
        except ValueError as exc:
            raise TypeError(f"metric {metric!r}: the default of option {option.name!r} breaks its own type: {exc}") from None
    return tuple(options.values())


def read_needs(declared: Any, metric: str) -> tuple[str, ...] | None:
    """A plugin's ``needs`` as a tuple of split names ("train", "test"); None when undeclared."""
    if declared is None:
        return None
    needs = (declared,) if isinstance(declared, str) else tuple(declared)
    unknown = [s for s in needs if s not in SPLIT_NAMES]
    if unknown:
        raise TypeError(f"metric {metric!r}: `needs` lists unknown split(s) {unknown}; use 'train' and/or 'test'")
    return needs


def read_description(declared: Any, metric: str) -> str | None:
    """A plugin's ``description``: text, or None (undeclared: the first line of its docstring stands for it)."""
    if declared is not None and not isinstance(declared, str):
        raise TypeError(f"metric {metric!r}: `description` must be one line of text, got {declared!r}")
    return declared


def read_kind(declared: Any, metric: str) -> str | None:
    """A plugin's ``kind``: one of `KINDS`, or None (undeclared)."""
    if declared is not None and declared not in KINDS:
        raise TypeError(f"metric {metric!r}: `kind` must be 'similarity' or 'distance', got {declared!r}")
    return declared


def read_flag(declared: Any, metric: str, field: str) -> bool:
    """A plugin's boolean field ``field`` (``activations_only``, ``deterministic``): True or False."""
    if not isinstance(declared, bool):
        raise TypeError(f"metric {metric!r}: `{field}` must be True or False, got {declared!r}")
    return declared


def read_symmetric(declared: Any, metric: str) -> bool | None:
    """A plugin's ``symmetric``: True, False, or None (undeclared)."""
    return None if declared is None else read_flag(declared, metric, "symmetric")


def read_family(declared: Any, metric: str) -> str | None:
    """A plugin's ``family``: None (undeclared) or a non-empty word."""
    if declared is not None and (not isinstance(declared, str) or not declared or declared != declared.strip()):
        raise TypeError(f"metric {metric!r}: `family` must be a non-empty word such as 'stitching', or None, "
                        f"got {declared!r}")
    return declared


def read_range(declared: Any, metric: str) -> tuple[float, float] | None:
    """A plugin's ``range``: a pair of numbers ``lo < hi`` (``float("inf")`` allowed) as floats, or None."""
    if declared is None:
        return None
    try:
        lo, hi = declared
        if isinstance(lo, bool) or isinstance(hi, bool):
            raise TypeError
        lo, hi = float(lo), float(hi)
    except (TypeError, ValueError):
        raise TypeError(f"metric {metric!r}: `range` must be a pair of numbers (lo, hi) or None, "
                        f"got {declared!r}") from None
    if not lo < hi:
        raise TypeError(f"metric {metric!r}: `range` must have lo < hi, got {declared!r}")
    return lo, hi


def read_invariances(declared: Any, metric: str) -> tuple[str, ...] | None:
    """A plugin's ``invariances``: distinct words of `INVARIANCES` as a tuple (one word alone: a 1-tuple), or None."""
    if declared is None:
        return None
    words = (declared,) if isinstance(declared, str) else declared
    try:
        words = tuple(words)
    except TypeError:
        raise TypeError(f"metric {metric!r}: `invariances` must be a tuple of words, got {declared!r}") from None
    for word in words:
        if word not in INVARIANCES:
            raise TypeError(f"metric {metric!r}: unknown invariance {word!r}{did_you_mean(str(word), INVARIANCES)} "
                            f"(the vocabulary: {', '.join(INVARIANCES)})")
    if len(set(words)) != len(words):
        raise TypeError(f"metric {metric!r}: `invariances` lists a word twice: {declared!r}")
    return words


def missing_splits(metric: str, needs: tuple[str, ...] | None, data: Any) -> str | None:
    """An error message naming the split(s) ``data`` lacks of those the metric ``needs``, else ``None``."""
    missing = [SPLIT_NAMES[s] for s in needs or () if getattr(data, s, None) is None]
    if not missing:
        return None
    what = " and ".join(missing)
    return (f"{metric} needs the {what}, but no {what} was given; "
            f"pass Data(train=..., test=...) with the {what}")


def resolve_options(selected: list[str], declared: Mapping[str, dict[str, Any] | None],
                    options: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """Check ``options`` against the selected metrics' declarations; return each metric's own options.

    ``declared`` maps every registered metric name to its ``{option: default}`` (``None``: open).
    ``options`` holds global options and per-metric dicts under metric names. Raises
    [`UnknownOption`][UnknownOption] for a global option that no selected metric takes, for a per-metric option
    its metric does not take, and ``TypeError`` for a per-metric entry that is not a dict. Returns
    ``{metric: options}``: for a declared metric its defaults updated with the global options it takes
    and its own dict; for an open one every global option updated with its own dict.
    """
    options = dict(options or {})
    taken = {name for m in selected if declared[m] is not None for name in declared[m]}
    scoped = {k: v for k, v in options.items() if k in declared and not (k in taken and not isinstance(v, Mapping))}
    plain = {k: v for k, v in options.items() if k not in scoped}
    for metric, own in scoped.items():
        if not isinstance(own, Mapping):
            raise TypeError(f"options[{metric!r}] must be a dict of that metric's options, got {type(own).__name__}")
        takes = declared[metric]
        for name in own:
            if takes is not None and name not in takes:
                raise UnknownOption(f"unknown option {name!r} for metric {metric!r}{did_you_mean(name, takes)} "
                                    f"({metric} takes: {', '.join(sorted(takes)) or 'no options'})")
    _check_global(plain, selected, declared)
    resolved = {}
    for metric in selected:
        takes = declared[metric]
        own = dict(scoped.get(metric, {}))
        if takes is None:
            resolved[metric] = {**plain, **own}
        else:
            resolved[metric] = {**takes, **{k: v for k, v in plain.items() if k in takes}, **own}
    return resolved


def _check_global(plain: dict[str, Any], selected: list[str], declared: Mapping[str, dict[str, Any] | None]) -> None:
    takes = [declared[m] for m in selected]
    if any(t is None for t in takes):
        return  # an open metric takes anything
    valid = sorted({name for t in takes for name in t if t is not None})
    for name in plain:
        if name in valid:
            continue
        others = sorted(m for m, t in declared.items() if t is not None and name in t)
        if others:
            shown = ", ".join(others[:10]) + (f" and {len(others) - 10} more" if len(others) > 10 else "")
            hint = f"; it is an option of {shown}: select one of them, or drop it"
        else:
            hint = did_you_mean(name, valid) or did_you_mean(name, list(declared), cutoff=0.8)
        raise UnknownOption(f"unknown option {name!r}: no selected metric ({', '.join(selected)}) takes it{hint} "
                            f"(they take: {', '.join(valid) or 'no options'}; "
                            f"`similarity-plugins info METRIC` lists each metric's options)")
