"""The contract of a metric plugin, written once: `FIELDS`, every field a metric may declare, with its type, default,
meaning and reader.

Three things are made from that list: `MetricPlugin` (the class a plugin subclasses: each field at its default),
`MetricInfo` (what the registry knows of a metric: each field as its reader normalised it, beside its name, package
and load error) and `Meaning` (what a score means, as results record it). Every reader of a plugin's fields (the
registry, `declared_value`, the function-plugin wrapper) goes through `plugin_attribute` or `plugin_attributes`, so a
plugin that does not subclass `MetricPlugin` (a module, a plain class, a ``@hookimpl`` function) gets exactly the
defaults a subclass inherits. `attribute_table` renders the list as the table of the plugin guide.
"""

from __future__ import annotations

import collections
import dataclasses
import inspect
from functools import partial
from typing import Any, Callable, Mapping, NamedTuple

from .contract import (
    option_items,
    read_description,
    read_family,
    read_flag,
    read_invariances,
    read_kind,
    read_needs,
    read_options,
    read_range,
    read_symmetric,
)


class Field(NamedTuple):
    """One field of the contract.

    Attributes:
        name: the attribute a plugin sets.
        type: what a plugin may set it to (as the plugin guide shows it).
        default: its value when a plugin does not set it.
        meaning: one line for the plugin guide.
        read: ``read(value, metric)``: a plugin's value checked and normalised (``TypeError`` naming the metric and the
            field for a malformed one).
        held: the type of the normalised value, as `MetricInfo` holds it.
        recorded: part of what a score means (`Meaning`), which results record beside their rows.
    """

    name: str
    type: str
    default: Any
    meaning: str
    read: Callable[[Any, str], Any]
    held: str
    recorded: bool = False


#: The contract: every field a metric may declare, in order.
FIELDS: tuple[Field, ...] = (
    Field("description", "str", "", "one line for ``similarity-plugins list``; empty: the first line of the plugin's "
          "docstring.", read_description, "str", recorded=True),
    Field("options", "Sequence[Option | str | tuple] | Mapping[str, Any] | None", None,
          "the options the metric takes, each with its default, a one-line doc and its type (what a value must be): a "
          "sequence of `Option` (or of names, or of ``(name, default[, doc[, type]])`` tuples) or a dict "
          "``{name: default}``; None: it takes any option (every global option merged with its own "
          "``options[metric]`` dict).", read_options, "dict[str, Any] | None"),
    Field("needs", "tuple[str, ...] | None", None, "the data splits it reads, ``(\"test\",)`` or ``(\"train\", "
          "\"test\")``; a missing split gives its row an error before it runs; None: undeclared.", read_needs,
          "tuple[str, ...] | None"),
    Field("kind", "Literal['similarity', 'distance'] | None", None, "``\"similarity\"`` (higher: more alike) or "
          "``\"distance\"`` (lower: more alike); None: unknown.", read_kind, "Literal['similarity', 'distance'] | None",
          recorded=True),
    Field("range", "tuple[float, float] | None", None, "``(lo, hi)``, the values the score can take "
          "(``float(\"inf\")`` allowed); None: unbounded or unknown.", read_range, "tuple[float, float] | None",
          recorded=True),
    Field("symmetric", "bool | None", None, "whether ``score(A, B) == score(B, A)``; None: unknown.", read_symmetric,
          "bool | None", recorded=True),
    Field("invariances", "tuple[str, ...] | None", None, "the transforms of one side's activations that leave the "
          "score unchanged, words of `INVARIANCES` (``()``: none); None: unknown.", read_invariances,
          "tuple[str, ...] | None", recorded=True),
    Field("activations_only", "bool", False, "True when the metric reads nothing but ``context.activations`` of the "
          "two layers (it then also runs on arrays, in ``score``).", partial(read_flag, field="activations_only"),
          "bool"),
    Field("deterministic", "bool", False, "True when no seed enters the score (``compare(repeats=k)`` computes it "
          "once).", partial(read_flag, field="deterministic"), "bool"),
    Field("family", "str | None", None, "the family the metric belongs to, a word applications select metrics by "
          "(the built-ins: ``\"cka\"``, ``\"representational\"``, ``\"stitching\"``, ``\"invariance\"``); None: none "
          "declared.", read_family, "str | None", recorded=True),
)
_DEFAULTS = {f.name: f.default for f in FIELDS}


class MetricPlugin:
    """The base class of a metric plugin: every field of the contract, at its default.

    Subclass it, set the fields your metric declares and add one ``similarity`` hookimpl (see
    [`hookspecs`][similarity_plugins.host.hookspecs]). Subclassing is optional: any object with a ``similarity``
    hookimpl is a plugin, and each field it lacks takes the same default. A malformed value is a load error naming
    the metric and the field. The fields, with their types, defaults and meanings, are the table of
    [the plugin guide](../plugins.md#the-contract-metricplugin).
    """


def _attributes_section() -> str:
    return "\n\nAttributes:\n" + "".join(f"    {f.name} ({f.type}): {f.meaning}\n" for f in FIELDS)


for _field in FIELDS:
    setattr(MetricPlugin, _field.name, _field.default)
MetricPlugin.__annotations__ = {f.name: f.type for f in FIELDS}
MetricPlugin.__doc__ = inspect.cleandoc(MetricPlugin.__doc__ or "") + _attributes_section()

#: What a metric's score means, as results record it beside their rows (``Report.meta["info"]``, ``Grid.info``): the
#: recorded fields of the contract (None where undeclared).
Meaning = collections.namedtuple("Meaning", [f.name for f in FIELDS if f.recorded],
                                 defaults=[f.default for f in FIELDS if f.recorded])


def _meaning(self) -> Meaning:
    """What the metric's score means: its recorded fields (`Meaning`)."""
    return Meaning(**{name: getattr(self, name) for name in Meaning._fields})


MetricInfo = dataclasses.make_dataclass(
    "MetricInfo",
    [("name", "str"), ("package", "str"),
     *[(f.name, f.held, dataclasses.field(default=f.default)) for f in FIELDS],
     ("option_docs", "dict[str, str]", dataclasses.field(default_factory=dict)),
     ("option_types", "dict[str, ValueRule | None]", dataclasses.field(default_factory=dict)),
     ("error", "str | None", dataclasses.field(default=None)),
     ("error_type", "str | None", dataclasses.field(default=None))],
    namespace={"meaning": _meaning, "__module__": __name__},
)
MetricInfo.__doc__ = (
    "What the registry knows of a metric: its ``name``, the ``package`` it came from, every field of the contract as "
    "`plugin_attributes` normalised it (``options`` as ``{option: default}``, or None when it takes any option), "
    "each option's one-line doc (``option_docs``) and rule (``option_types``: what a value must be, None: "
    "unchecked), and, when it failed to load, why (``error``) and the exception's class name (``error_type``)."
    + _attributes_section())


def plugin_attribute(plugin: Any, name: str) -> Any:
    """The value ``plugin`` declares for the contract field ``name``, or the contract's default (unchecked).

    Raises:
        KeyError: ``name`` is not a field of the contract.
    """
    return getattr(plugin, name, _DEFAULTS[name])


def plugin_attributes(plugin: Any, metric: str) -> dict[str, Any]:
    """Every field of the contract as ``plugin`` declares it (or the default), read by the field's reader.

    Args:
        plugin: a plugin object (module, instance, or the wrapper of a ``@hookimpl`` function).
        metric: its metric name, for the messages.

    Returns:
        The fields of a `MetricInfo` beside its name, package and error: each field normalised, ``description``
            filled in from the docstring when empty, ``options`` as ``{name: default}`` (None: open) with
            ``option_docs`` (``{name: doc}``) and ``option_types`` (``{name: rule}``).

    Raises:
        TypeError: naming the metric and the field, for a malformed value.
    """
    values = {f.name: f.read(plugin_attribute(plugin, f.name), metric) for f in FIELDS}
    values["description"] = values["description"] or _first_line(inspect.getdoc(plugin) or "")
    options = values["options"] or ()
    values["options"] = None if values["options"] is None else {o.name: o.default for o in options}
    return {**values, "option_docs": {o.name: o.doc for o in options}, "option_types": {o.name: o.type for o in options}}


def declared_value(plugin: Any, options: Mapping[str, Any], name: str) -> Any:
    """The value of option ``name`` for a call of ``plugin``: ``options[name]`` when given, else the default the
    plugin declares (its ``options`` attribute is the one place a default is written).

    Raises:
        KeyError: the plugin declares no option ``name`` (a programming error in the plugin).
    """
    if name in options:
        return options[name]
    declared = list(option_items(plugin_attribute(plugin, "options") or ()))
    for option in declared:
        if option.name == name:
            return option.default
    label = type(plugin).__name__
    raise KeyError(f"{label} declares no option {name!r} (declared: {', '.join(o.name for o in declared) or 'none'})")


def attribute_table() -> str:
    """The contract as a Markdown table (field, type, default, meaning), as the plugin guide shows it."""
    rows = ["| attribute | type | default | meaning |", "| --- | --- | --- | --- |"]
    for f in FIELDS:
        kind = f.type.replace("|", "\\|")
        rows.append(f"| `{f.name}` | {kind} | `{f.default!r}` | {f.meaning} |")
    return "\n".join(rows)


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""
