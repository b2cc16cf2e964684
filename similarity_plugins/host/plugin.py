"""The typed contract of a metric plugin: `MetricPlugin` declares every optional attribute once, with its type,
default and meaning, and `plugin_attributes` reads any plugin through that declaration.

Every reader of a plugin's attributes (the registry's `MetricInfo`, `declared_value`, the function-plugin
wrapper) goes through `plugin_attribute` or `plugin_attributes`, so a plugin that does not subclass
`MetricPlugin` (a module, a plain class, a ``@hookimpl`` function) gets exactly the defaults a subclass
inherits. `attribute_table` renders the declaration as the table of the plugin guide.
"""

from __future__ import annotations

import inspect
from typing import Any, Literal, Mapping, NamedTuple, Sequence

from .contract import Option, check_family, check_flag, check_meaning, read_declaration, read_needs

__all__ = ["MetricPlugin", "Attribute", "ATTRIBUTES", "plugin_attribute", "plugin_attributes", "declared_value",
           "attribute_table"]


class MetricPlugin:
    """The base class of a metric plugin: every optional attribute a metric may declare, with its default.

    Subclass it, set the attributes your metric declares and add one ``similarity`` hookimpl (see
    [`hookspecs`][similarity_plugins.host.hookspecs]). Subclassing is optional: any object with a ``similarity``
    hookimpl is a plugin, and each attribute it lacks takes the default declared here. A malformed value is a
    load error naming the metric and the attribute.

    Attributes:
        description: one line for ``similarity-plugins list``; None: the first line of the plugin's docstring.
        options: the options the metric takes, each with its default and a one-line doc: a sequence of `Option`
            (or of names, or of ``(name, default[, doc])`` tuples) or a dict ``{name: default}``; None: it takes
            any option (every global option merged with its own ``options[metric]`` dict).
        needs: the data splits it reads, ``("test",)`` or ``("train", "test")``; a missing split gives its row
            an error before it runs; None: undeclared.
        kind: ``"similarity"`` (higher: more alike) or ``"distance"`` (lower: more alike); None: unknown.
        range: ``(lo, hi)``, the values the score can take (``float("inf")`` allowed); None: unbounded or unknown.
        symmetric: whether ``score(A, B) == score(B, A)``; None: unknown.
        invariances: the transforms of one side's activations that leave the score unchanged, words of
            `INVARIANCES` (``()``: none); None: unknown.
        activations_only: True when the metric reads nothing but ``context.activations`` of the two layers (it
            then also runs on arrays, in ``score``).
        deterministic: True when no seed enters the score (``compare(repeats=k)`` computes it once).
        family: the family the metric belongs to, a word applications select metrics by (the built-ins:
            ``"cka"``, ``"representational"``, ``"stitching"``, ``"invariance"``); None: none declared.
    """

    description: str | None = None
    options: Sequence[Option | str | tuple] | Mapping[str, Any] | None = None
    needs: tuple[str, ...] | None = None
    kind: Literal["similarity", "distance"] | None = None
    range: tuple[float, float] | None = None
    symmetric: bool | None = None
    invariances: tuple[str, ...] | None = None
    activations_only: bool = False
    deterministic: bool = False
    family: str | None = None


class Attribute(NamedTuple):
    """One attribute of the contract: its ``name``, ``type`` (as annotated), ``default`` and ``meaning``."""

    name: str
    type: str
    default: Any
    meaning: str


def _attribute_docs(doc: str) -> dict[str, str]:
    """``{name: meaning}`` of the ``Attributes:`` section of a Google-style docstring (continuation lines joined)."""
    docs: dict[str, str] = {}
    lines = inspect.cleandoc(doc).splitlines()
    start = lines.index("Attributes:") + 1
    name = ""
    for line in lines[start:]:
        if not line.strip():
            break
        if line.startswith("    ") and not line.startswith("        "):
            name, _, text = line.strip().partition(": ")
            docs[name] = text
        else:
            docs[name] += " " + line.strip()
    return docs


def _declaration() -> tuple[Attribute, ...]:
    """The contract read from `MetricPlugin`: its annotations (types), class values (defaults) and docstring."""
    docs = _attribute_docs(MetricPlugin.__doc__ or "")
    types = MetricPlugin.__annotations__
    if set(docs) != set(types):
        raise TypeError(f"MetricPlugin: the annotated attributes {sorted(types)} and those its docstring documents "
                        f"{sorted(docs)} differ")
    return tuple(Attribute(name, str(kind), getattr(MetricPlugin, name), docs[name]) for name, kind in types.items())


#: The contract, in declaration order (one `Attribute` per optional attribute of a metric plugin).
ATTRIBUTES: tuple[Attribute, ...] = _declaration()
_DEFAULTS = {a.name: a.default for a in ATTRIBUTES}


def plugin_attribute(plugin: Any, name: str) -> Any:
    """The value ``plugin`` declares for the contract attribute ``name``, or the contract's default (unchecked).

    Raises:
        KeyError: ``name`` is not an attribute of the contract.
    """
    return getattr(plugin, name, _DEFAULTS[name])


def plugin_attributes(plugin: Any, metric: str) -> dict[str, Any]:
    """Every attribute of the contract as ``plugin`` declares it (or the default), checked and normalised.

    Args:
        plugin: a plugin object (module, instance, or the wrapper of a ``@hookimpl`` function).
        metric: its metric name, for the messages.

    Returns:
        ``{attribute: value}`` with ``options`` as ``{name: default}`` (None: open) plus ``option_docs``
            (``{name: doc}``), ``range`` as floats, ``needs`` and ``invariances`` as tuples and ``description``
            filled in from the docstring when undeclared: the fields of a `MetricInfo` beside its name, package
            and error.

    Raises:
        TypeError: naming the metric and the attribute, for a malformed value.
    """
    raw = {a.name: plugin_attribute(plugin, a.name) for a in ATTRIBUTES}
    declared = read_declaration(raw["options"], metric)
    options, docs = declared if declared is not None else (None, {})
    meaning = check_meaning(raw["kind"], raw["range"], raw["symmetric"], raw["invariances"], metric)
    description = raw["description"] or _first_line(inspect.getdoc(plugin) or "")
    return {"description": str(description), "options": options, "option_docs": docs,
            "needs": read_needs(raw["needs"], metric), **meaning._asdict(),
            "activations_only": check_flag(raw["activations_only"], "activations_only", metric),
            "deterministic": check_flag(raw["deterministic"], "deterministic", metric),
            "family": check_family(raw["family"], metric)}


def declared_value(plugin: Any, options: Mapping[str, Any], name: str) -> Any:
    """The value of option ``name`` for a call of ``plugin``: ``options[name]`` when given, else the default the
    plugin declares (its ``options`` attribute is the one place a default is written).

    Raises:
        KeyError: the plugin declares no option ``name`` (a programming error in the plugin).
    """
    if name in options:
        return options[name]
    label = type(plugin).__name__
    defaults = (read_declaration(plugin_attribute(plugin, "options"), label) or ({}, {}))[0]
    if name not in defaults:
        raise KeyError(f"{label} declares no option {name!r} (declared: {', '.join(defaults) or 'none'})")
    return defaults[name]


def attribute_table() -> str:
    """The contract as a Markdown table (attribute, type, default, meaning), as the plugin guide shows it."""
    rows = ["| attribute | type | default | meaning |", "| --- | --- | --- | --- |"]
    for a in ATTRIBUTES:
        kind = a.type.replace("|", "\\|")
        rows.append(f"| `{a.name}` | {kind} | `{a.default!r}` | {a.meaning} |")
    return "\n".join(rows)


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""
