"""Which third-party entry points the manager may load: the environment switches and the names rules.

- ``SIMILARITY_PLUGINS=pkg1,pkg2``: only the entry points of these distributions (names as pip shows
  them; case, ``-``, ``_`` and ``.`` do not matter, as in PEP 503); an empty value: no third-party
  plugin; unset: all of them (llm's ``LLM_LOAD_PLUGINS`` convention). The built-in metrics always load.
  A listed name that no installed distribution provides gets a warning with the installed ones.
- ``SIMILARITY_PLUGINS_DISABLE_AUTOLOAD=1`` (1, true, yes, on): no entry point at all, as pytest does.

Both rules cover both groups: ``similarity_plugins`` (metrics, families and wrappers) and
``similarity_plugins.wrappers`` (wrappers only).

Nothing here imports an entry point: `selected_entry_points` reads only the packages' metadata, and
`declares_wrapper` reads an entry point's module as text (found on ``sys.path`` without importing it or its
packages, and parsed with `ast`) to tell a wrapper of every metric call, which the manager must import when it is
built, from a metric, which it imports only when its name is needed.
"""

from __future__ import annotations

import ast
import importlib.machinery
import importlib.util
import os
import re
import sys
import warnings
from typing import Any, Iterable

from ..utils.rules import truth_of
from ..utils.text import did_you_mean

ENTRY_POINT_GROUP = "similarity_plugins"
#: An entry-point group for wrappers alone: objects whose ``similarity`` hookimpl is a wrapper (``wrapper=True``) of
#: every metric call, imported when the manager is built. A wrapper may as well be declared in `ENTRY_POINT_GROUP`.
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


def declares_wrapper(ep: Any) -> bool:
    """True when the object the entry point ``ep`` names has a ``similarity`` hookimpl marked as a wrapper
    (``@hookimpl(wrapper=True)`` or ``hookwrapper=True``), read from its module's source without importing anything.

    The object is looked up in the module's text: a top-level class (its methods) or function of the entry point's
    attribute name, the module's own functions when the entry point names the module, and any ``similarity`` of the
    module when the name is bound otherwise (an instance). A module whose source cannot be found or parsed, or a
    wrapper written in another module and imported into this one, reads as no wrapper (it is then imported when its
    metric names are needed, as a metric is).
    """
    module, _, attr = str(getattr(ep, "value", "") or "").partition(":")
    source = _module_source(module.strip()) if module.strip() else None
    if source is None:
        return False
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return False
    scope: list[ast.AST] = list(tree.body)
    for part in attr.split("[")[0].strip().split(".") if attr.strip() else []:
        found = [n for n in scope if isinstance(n, (ast.ClassDef, ast.FunctionDef)) and n.name == part]
        if not found:
            scope = list(ast.walk(tree))  # bound otherwise (an instance): any similarity of the module
            break
        scope = found[0].body if isinstance(found[0], ast.ClassDef) else found
    return any(_wrapper_similarity(node) for node in scope)


def _wrapper_similarity(node: ast.AST) -> bool:
    """True for a ``def similarity`` decorated with a call that passes ``wrapper=True`` or ``hookwrapper=True``."""
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.name != "similarity":
        return False
    return any(isinstance(d, ast.Call) and any(k.arg in ("wrapper", "hookwrapper") and isinstance(k.value, ast.Constant)
                                               and k.value.value is True for k in d.keywords)
               for d in node.decorator_list)


def _module_source(name: str) -> str | None:
    """The source text of the module ``name``, found without importing it or a package above it (None if not found)."""
    try:
        parts = name.split(".")
        spec = importlib.util.find_spec(parts[0])  # a top-level name: the finders only, nothing is executed
        for depth in range(1, len(parts)):
            if spec is None or not spec.submodule_search_locations:
                return None
            full = ".".join(parts[: depth + 1])
            spec = importlib.util.find_spec(full) if ".".join(parts[:depth]) in sys.modules \
                else importlib.machinery.PathFinder.find_spec(full, list(spec.submodule_search_locations))
        return spec.loader.get_source(spec.name) if spec is not None and spec.loader is not None else None
    except (ImportError, ValueError, OSError, AttributeError):
        return None
