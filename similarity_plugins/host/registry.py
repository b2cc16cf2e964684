"""Metric names -> plugins: list them, select them by name or wildcard, describe them.

Third-party entry points are imported here, when their names are needed (see `manager`): an
exact name that is not registered yet, ``list_metrics``, a wildcard and the default selection
(``metrics=None``); a registered name imports nothing.
"""

from __future__ import annotations

import fnmatch
from typing import Any, Iterable, Mapping

from ..utils.text import did_you_mean
from .contract import resolve_options
from .manager import MetricInfo, get_plugin_manager


class UnknownMetric(ValueError):
    """A metric name or pattern that matches no registered metric (the message suggests close ones)."""


def list_metrics(pattern: str | Iterable[str] | None = None) -> list[str]:
    """Sorted names of the registered metrics, optionally filtered by wildcards (``"stitch-*"``).

    Metrics whose plugin failed to load are listed too (``metric_info(name).error`` says why), so
    that selecting them gives a row with the error rather than silence.
    """
    pm = get_plugin_manager()
    pm.load_all()
    names = sorted(pm.info)
    if pattern is None:
        return names
    patterns = [pattern] if isinstance(pattern, str) else list(pattern)
    return [n for n in names if any(fnmatch.fnmatchcase(n, p) for p in patterns)]


def metric_info(name: str) -> MetricInfo:
    """The `MetricInfo` of a metric: package, description, load error, ``options`` (the contract:
    ``{option: default}``, or ``None`` when the metric declares none and takes any), ``option_docs``
    (``{option: one-line doc}``), ``needs`` (the data splits it reads), what the score means (``kind``,
    ``range``, ``symmetric``, ``invariances``; ``None`` when undeclared) and ``activations_only``."""
    pm = get_plugin_manager()
    pm.ensure([name])
    info = pm.info
    if name not in info:
        raise UnknownMetric(_unknown_message(name, list(info)))
    return info[name]


def _unknown_message(name: str, known: list[str]) -> str:
    return f"unknown metric {name!r}{did_you_mean(name, known)} (registered: {', '.join(sorted(known))})"


def select_metrics(metrics: str | Iterable[str] | None) -> list[str]:
    """Resolve names and wildcards to registered metric names, in the order asked, without repeats.

    ``None`` selects every registered metric. A comma-separated string is split. A name or pattern
    that matches nothing raises [`UnknownMetric`][UnknownMetric] suggesting close names.
    """
    pm = get_plugin_manager()
    if isinstance(metrics, str):
        metrics = [m.strip() for m in metrics.split(",") if m.strip()]
    metrics = None if metrics is None else list(metrics)
    if metrics is None or any(_is_pattern(m) for m in metrics):
        pm.load_all()
    else:
        pm.ensure(metrics)
    known = sorted(pm.info)
    if metrics is None:
        return known
    selected: list[str] = []
    for item in metrics:
        if _is_pattern(item):
            matched = [n for n in known if fnmatch.fnmatchcase(n, item)]
            if not matched:
                raise UnknownMetric(f"pattern {item!r} matches no metric (registered: {', '.join(known)})")
        elif item in known:
            matched = [item]
        else:
            raise UnknownMetric(_unknown_message(item, known))
        selected += [m for m in matched if m not in selected]
    if not selected:
        raise UnknownMetric("no metric selected; pass names such as " + ", ".join(known[:3]))
    return selected


def options_for_metrics(names: list[str], options: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """Validate ``options`` (global ones and per-metric dicts) for the selected metric ``names`` against
    their declarations and return ``{metric: the options its hook receives}``.

    Raises [`UnknownOption`][similarity_plugins.host.contract.UnknownOption] (a ``ValueError``) with the valid
    names and a did-you-mean for an option no selected metric takes, or that its metric does not take.
    """
    pm = get_plugin_manager()
    pm.ensure([k for k, v in (options or {}).items() if isinstance(v, Mapping)])  # per-metric dicts name metrics
    declared = {name: info.options for name, info in pm.info.items()}
    return resolve_options(list(names), declared, options)


def _is_pattern(item: str) -> bool:
    return any(ch in item for ch in "*?[")


def declared_meanings(names: Iterable[str]) -> dict[str, dict[str, Any]]:
    """What each metric declares its score means, as results record it (``Report.meta["info"]``, ``Grid.info``).

    Args:
        names: registered metric names.

    Returns:
        ``{metric: {field: value}}`` for the fields of `Meaning` (``description``, ``kind``, ``range``,
            ``symmetric``, ``invariances``, ``family``; None where the metric declares nothing), so that a reader of
            the result (the HTML page) needs no registry.
    """
    info = get_plugin_manager().info
    return {n: info[n].meaning()._asdict() for n in names}
