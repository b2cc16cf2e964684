"""What a metric takes: its declared options (name, default, one-line doc) and the data splits it needs.

A metric plugin opts in by giving its plugin object (class, instance or module; for a bare function,
the function itself) an ``options`` attribute, and optionally ``needs``:

```python
class MyMetric:
    options = (Option("alpha", 0.5, "mixing weight in [0, 1]"), Option("max_samples", None, "first N"))
    needs = ("test",)
```

``options`` may also be a dict ``{name: default}`` or a sequence of ``(name, default[, doc])`` tuples.
A plugin without ``options`` is *open*: it takes any option, receives every global option plus its own
``options[metric]`` dict, and counts as taking every global option when `resolve_options`
checks that each global option is taken by at least one selected metric.

What a score means is declared with four more attributes, read by `read_meaning` (each
``None`` when undeclared: unknown):

```python
class MyDistance:
    kind = "distance"              # "similarity" (higher: more alike) or "distance" (lower: more alike)
    range = (0.0, float("inf"))    # (lo, hi), or None (unbounded or unknown)
    symmetric = True               # score(A, B) == score(B, A)
    invariances = ("orthogonal",)  # transforms of one side's (N, D) activations that leave the score
                                   # unchanged, words of `INVARIANCES`; () for none
```

``activations_only = True`` (read by `read_flag`) says the metric reads nothing but activations,
through ``context.activations(front, layer.front, split)`` and ``context.activations(end, layer.end,
split)``, so it also runs on arrays (``similarity_plugins.score``).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, NamedTuple

from ..utils.text import did_you_mean

__all__ = ["Option", "UnknownOption", "declared_value", "read_declaration", "read_needs", "resolve_options", "missing_splits",
           "Meaning", "read_meaning", "read_flag", "INVARIANCES", "KINDS"]

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
    """One declared metric option: its ``name``, ``default`` value and a one-line ``doc``.

    A plugin declares its options as a sequence of these (or of plain names, or a ``{name: default}`` dict) in
    its ``options`` attribute; ``compare`` then passes each metric exactly its declared options.

    Attributes:
        name: the option's key in ``options={...}`` and ``--option KEY=VALUE``.
        default: the value the metric receives when the caller gives none.
        doc: one line for ``similarity-plugins info`` and the [options tables](../options.md).
    """

    name: str
    default: Any = None
    doc: str = ""


class UnknownOption(ValueError):
    """An option that no selected metric takes (the message names the valid ones and close matches)."""


def read_declaration(declared: Any, metric: str) -> tuple[dict[str, Any], dict[str, str]] | None:
    """A plugin's ``options`` attribute as ``({name: default}, {name: doc})``; ``None`` when undeclared.

    Raises ``TypeError`` naming the metric for a malformed declaration.
    """
    if declared is None:
        return None
    defaults: dict[str, Any] = {}
    docs: dict[str, str] = {}
    items: Iterable[Any] = declared.items() if isinstance(declared, Mapping) else declared
    try:
        for item in items:
            option = Option(item) if isinstance(item, str) else Option(*item)
            if not isinstance(option.name, str) or not option.name:
                raise TypeError(f"option name {option.name!r} is not a non-empty string")
            defaults[option.name] = option.default
            docs[option.name] = str(option.doc or "")
    except TypeError as exc:
        raise TypeError(f"metric {metric!r}: `options` must be a dict {{name: default}} or a sequence of "
                        f"Option(name, default, doc); {exc}") from None
    return defaults, docs



def declared_value(plugin: Any, options: Mapping[str, Any], name: str) -> Any:
    """The value of option ``name`` for a call of ``plugin``: ``options[name]`` when given, else the default the
    plugin declares (its ``options`` attribute is the one place a default is written).

    Raises ``KeyError`` when the plugin declares no option ``name`` (a programming error in the plugin).
    """
    if name in options:
        return options[name]
    label = getattr(plugin, "name", None) or type(plugin).__name__
    defaults = (read_declaration(getattr(plugin, "options", None), label) or ({}, {}))[0]
    if name not in defaults:
        raise KeyError(f"{label} declares no option {name!r} (declared: {', '.join(defaults) or 'none'})")
    return defaults[name]

def read_needs(declared: Any, metric: str) -> tuple[str, ...] | None:
    """A plugin's ``needs`` attribute as a tuple of split names ("train", "test"); ``None`` when undeclared."""
    if declared is None:
        return None
    needs = (declared,) if isinstance(declared, str) else tuple(declared)
    unknown = [s for s in needs if s not in SPLIT_NAMES]
    if unknown:
        raise TypeError(f"metric {metric!r}: `needs` lists unknown split(s) {unknown}; use 'train' and/or 'test'")
    return needs


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


class Meaning(NamedTuple):
    """What a metric's score means: ``kind``, ``range``, ``symmetric``, ``invariances`` (each None: undeclared)."""

    kind: str | None = None
    range: tuple[float, float] | None = None
    symmetric: bool | None = None
    invariances: tuple[str, ...] | None = None


def read_meaning(plugin: Any, metric: str) -> Meaning:
    """A plugin's ``kind``, ``range``, ``symmetric`` and ``invariances`` attributes, checked.

    ``kind``: one of `KINDS`; ``range``: a pair of numbers ``lo < hi`` (``float("inf")`` allowed),
    returned as floats; ``symmetric``: a bool; ``invariances``: a tuple of distinct words of
    `INVARIANCES` (one word alone is taken as a 1-tuple). A missing attribute (or None) stays None.
    Raises ``TypeError`` naming the metric and the attribute for a malformed value.
    """
    kind = getattr(plugin, "kind", None)
    if kind is not None and kind not in KINDS:
        raise TypeError(f"metric {metric!r}: `kind` must be 'similarity' or 'distance', got {kind!r}")
    symmetric = getattr(plugin, "symmetric", None)
    if symmetric is not None and not isinstance(symmetric, bool):
        raise TypeError(f"metric {metric!r}: `symmetric` must be True or False, got {symmetric!r}")
    return Meaning(kind, _read_range(getattr(plugin, "range", None), metric), symmetric,
                   _read_invariances(getattr(plugin, "invariances", None), metric))


def read_flag(plugin: Any, attribute: str, metric: str) -> bool:
    """A plugin's boolean attribute (``activations_only``, ...): False when missing; ``TypeError`` unless a bool."""
    value = getattr(plugin, attribute, False)
    if not isinstance(value, bool):
        raise TypeError(f"metric {metric!r}: `{attribute}` must be True or False, got {value!r}")
    return value


def _read_range(declared: Any, metric: str) -> tuple[float, float] | None:
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


def _read_invariances(declared: Any, metric: str) -> tuple[str, ...] | None:
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
