"""Which third-party entry points the manager may load: the environment switches and the names rules.

- ``SIMILARITY_PLUGINS=pkg1,pkg2``: only the entry points of these distributions (names as pip shows
  them; case, ``-``, ``_`` and ``.`` do not matter, as in PEP 503); an empty value: no third-party
  plugin; unset: all of them (llm's ``LLM_LOAD_PLUGINS`` convention). The built-in metrics always load.
  A listed name that no installed distribution provides gets a warning with the installed ones.
- ``SIMILARITY_PLUGINS_DISABLE_AUTOLOAD=1`` (1, true, yes, on): no entry point at all, as pytest does.

Both rules cover both groups: ``similarity_plugins`` (metrics and families, imported when their names are needed)
and ``similarity_plugins.wrappers`` (wrappers of every metric call, imported when the manager is built).

Nothing here imports an entry point: `selected_entry_points` reads only the packages' metadata.
"""

from __future__ import annotations

import os
import re
import warnings
from typing import Any, Iterable

from ..utils.rules import truth_of
from ..utils.text import did_you_mean

__all__ = ["ENTRY_POINT_GROUP", "WRAPPER_GROUP", "DISABLE_AUTOLOAD_ENV", "LOAD_ENV", "BUILTIN_PACKAGE",
           "autoload_disabled", "allowed_distributions", "normalise_distribution", "entry_point_package",
           "selected_entry_points", "check_metric_name"]

ENTRY_POINT_GROUP = "similarity_plugins"
#: The entry-point group of wrappers: objects whose ``similarity`` hookimpl is a wrapper (``wrapper=True``) of every
#: metric call. A group of its own, because wrappers load when the manager is built and metrics only when needed.
WRAPPER_GROUP = "similarity_plugins.wrappers"
DISABLE_AUTOLOAD_ENV = "SIMILARITY_PLUGINS_DISABLE_AUTOLOAD"
LOAD_ENV = "SIMILARITY_PLUGINS"
BUILTIN_PACKAGE = "similarity-plugins"

_BAD_NAME = re.compile(r"[\s,*?\[\]=]")


def autoload_disabled() -> bool:
    """True when ``SIMILARITY_PLUGINS_DISABLE_AUTOLOAD`` is set to a true value (1, true, yes, on)."""
    return truth_of(os.environ.get(DISABLE_AUTOLOAD_ENV, "")) is True


def normalise_distribution(name: str) -> str:
    """A distribution name in PEP 503 form: lower case, runs of ``-``, ``_`` and ``.`` as one ``-``."""
    return re.sub(r"[-_.]+", "-", str(name)).strip().lower()


def allowed_distributions() -> set[str] | None:
    """The normalised distribution names of ``SIMILARITY_PLUGINS``; ``None`` when it is unset (all allowed)."""
    value = os.environ.get(LOAD_ENV)
    if value is None:
        return None
    return {normalise_distribution(n) for n in value.split(",") if n.strip()}


def entry_point_package(ep: Any) -> str:
    """The name of the distribution that declares the entry point ``ep`` ("(unknown package)" if none)."""
    dist = getattr(ep, "dist", None)
    return dist.name if dist is not None and getattr(dist, "name", None) else "(unknown package)"


def selected_entry_points(entry_points: Iterable[Any]) -> list[tuple[Any, str]]:
    """``(entry point, package)`` for each entry point the manager may load, in the order given.

    Leaves out this package's own (an older install's metadata that listed the built-ins as entry
    points) and, when ``SIMILARITY_PLUGINS`` is set, those of distributions it does not name. Warns
    once for each name in ``SIMILARITY_PLUGINS`` that matches no installed plugin distribution.
    """
    allowed = allowed_distributions()
    chosen, seen = [], set()
    for ep in entry_points:
        package = entry_point_package(ep)
        key = normalise_distribution(package)
        if key == BUILTIN_PACKAGE:
            continue
        seen.add(key)
        if allowed is None or key in allowed:
            chosen.append((ep, package))
    for missing in sorted((allowed or set()) - seen - {BUILTIN_PACKAGE}):
        warnings.warn(f"similarity_plugins: {LOAD_ENV} names {missing!r}, but no installed distribution of that name "
                      f"has a {ENTRY_POINT_GROUP!r} or {WRAPPER_GROUP!r} entry point{did_you_mean(missing, seen)} "
                      f"(installed: {', '.join(sorted(seen)) or 'none'})", stacklevel=3)
    return chosen


def check_metric_name(name: Any) -> str:
    """``name`` when it can name a metric (a non-empty string without spaces, commas, ``=`` or wildcard
    characters ``*?[]``, which ``--metrics`` and ``--option`` would read otherwise); ``ValueError`` if not."""
    if not isinstance(name, str) or not name or _BAD_NAME.search(name):
        raise ValueError(f"{name!r} cannot name a metric: use a non-empty name without spaces, commas, '=' "
                         f"or the wildcard characters * ? [ ] (e.g. 'my-metric')")
    return name
