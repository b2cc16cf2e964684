"""The plugin manager: built-in metrics and third-party ones, registered the same way.

Built-in metrics are listed once, here, in :data:`DEFAULT_PLUGINS` as ``name -> "module:object"``
references, exactly the form an entry point has, and go through the same registration function as
the entry points of the group ``similarity_plugins`` (entry-point name = metric name), which are for
third-party packages only. Setting ``SIMILARITY_PLUGINS_DISABLE_AUTOLOAD=1`` skips the entry points
(the built-ins still load), as pytest and llm do. A plugin that fails to import is not registered;
its error is kept in ``load_errors`` and reported in its row when it is selected.

A metric name belongs to whoever registered it first: :meth:`SimilarityPluginManager.register_metric`
raises on a taken name unless ``replace=True``, and an entry point whose name is taken is skipped with
a warning naming both packages (so a third-party package can never silently shadow a built-in).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import os
import threading
import traceback
import warnings
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pluggy

from . import hookspecs
from .contract import read_declaration, read_needs

ENTRY_POINT_GROUP = "similarity_plugins"
DISABLE_AUTOLOAD_ENV = "SIMILARITY_PLUGINS_DISABLE_AUTOLOAD"

DEFAULT_PLUGINS: dict[str, str] = {
    "cka-linear": "similarity_plugins.plugins.cka:LinearCKA",
    "cka-debiased": "similarity_plugins.plugins.cka:DebiasedCKA",
    "cka-rbf": "similarity_plugins.plugins.cka:RBFCKA",
    "procrustes": "similarity_plugins.plugins.representational:Procrustes",
    "cca": "similarity_plugins.plugins.representational:CCA",
    "svcca": "similarity_plugins.plugins.representational:SVCCA",
    "pwcca": "similarity_plugins.plugins.representational:PWCCA",
    "rsa": "similarity_plugins.plugins.representational:RSA",
    "linear-regression": "similarity_plugins.plugins.representational:LinearRegression",
    "mutual-knn": "similarity_plugins.plugins.representational:MutualKNN",
    "stitch-hlm": "similarity_plugins.plugins.stitching:StitchHLM",
    "stitch-slm": "similarity_plugins.plugins.stitching:StitchSLM",
    "stitch-dm": "similarity_plugins.plugins.stitching:StitchDM",
    "stitch-fula": "similarity_plugins.plugins.stitching:StitchFuLA",
    "iri-hlm": "similarity_plugins.plugins.invariance:IRIHLM",
    "iri-slm": "similarity_plugins.plugins.invariance:IRISLM",
    "iri-dm": "similarity_plugins.plugins.invariance:IRIDM",
    "iri-fula": "similarity_plugins.plugins.invariance:IRIFuLA",
}
BUILTIN_PACKAGE = "similarity-plugins"


@dataclass
class MetricInfo:
    """What the registry knows of a metric.

    ``name``; ``package`` it came from; one-line ``description``; ``error`` when the plugin failed to
    load; ``options``: ``{option: default}`` as declared by the plugin, or ``None`` when it declares
    none (it then takes any option); ``option_docs``: ``{option: one-line doc}``; ``needs``: the data
    splits it reads (``("train", "test")``), or ``None`` when undeclared.
    """

    name: str
    package: str
    description: str = ""
    error: str | None = None
    options: dict[str, Any] | None = None
    option_docs: dict[str, str] = field(default_factory=dict)
    needs: tuple[str, ...] | None = None


class SimilarityPluginManager(pluggy.PluginManager):
    """A ``pluggy.PluginManager`` that remembers each metric's package and load errors."""

    def __init__(self) -> None:
        super().__init__(hookspecs.PROJECT_NAME)
        self.add_hookspecs(hookspecs)
        self.info: dict[str, MetricInfo] = {}
        self.load_errors: dict[str, str] = {}

    def register_metric(self, plugin: Any, name: str, package: str = "(registered at run time)", *,
                        replace: bool = False) -> str:
        """Register ``plugin`` as the metric ``name`` (module, class, instance or hookimpl function).

        Returns the name. A class is instantiated with no arguments; a bare function decorated with
        ``@hookimpl`` is wrapped. The plugin's ``options`` and ``needs`` attributes are read into its
        :class:`MetricInfo` (see :mod:`~similarity_plugins.core.contract`). Raises ``ValueError`` when
        ``name`` is taken, naming its package, unless ``replace=True`` (then the old one is dropped);
        ``TypeError`` when the plugin has no ``similarity`` hookimpl or a malformed declaration.
        """
        if name in self.info and not replace:
            raise ValueError(f"metric name {name!r} is taken by {self.info[name].package}; pass replace=True "
                             f"to register_metric to replace it, or choose another name")
        obj = _as_plugin_object(plugin)
        if getattr(obj, "similarity", None) is None:
            raise TypeError(f"metric {name!r}: {plugin!r} has no `similarity` hookimpl")
        declared = read_declaration(getattr(obj, "options", None), name)
        needs = read_needs(getattr(obj, "needs", None), name)
        if self.get_plugin(name) is not None:
            self.unregister(name=name)
        self.register(obj, name=name)
        description = getattr(obj, "description", None) or _first_line(inspect.getdoc(obj) or "")
        options, docs = declared if declared is not None else (None, {})
        self.info[name] = MetricInfo(name, package, description, options=options, option_docs=docs, needs=needs)
        self.load_errors.pop(name, None)
        return name

    def load_reference(self, name: str, reference: Any, package: str) -> None:
        """Import an entry point or a ``"module:object"`` string and register it; keep errors.

        A name that is already taken is skipped with a warning naming both packages.
        """
        if name in self.info:
            warnings.warn(f"similarity_plugins: skipped the metric {name!r} of {package}: the name is taken by "
                          f"{self.info[name].package}; rename the entry point to use both", stacklevel=2)
            return
        try:
            obj = reference.load() if hasattr(reference, "load") else _import_reference(reference)
            self.register_metric(obj, name, package)
        except Exception as exc:  # noqa: BLE001 - a broken plugin must not stop the others
            message = f"plugin {name!r} from {package} failed to load: {type(exc).__name__}: {exc}"
            self.load_errors[name] = message
            self.info[name] = MetricInfo(name, package, "", error=message)
            self._load_tracebacks = getattr(self, "_load_tracebacks", {})
            self._load_tracebacks[name] = traceback.format_exc()

    def hookimpl_for(self, name: str) -> pluggy.HookImpl:
        """The ``similarity`` hookimpl of the metric ``name``."""
        plugin = self.get_plugin(name)
        for impl in self.hook.similarity.get_hookimpls():
            if impl.plugin is plugin:
                return impl
        raise KeyError(name)


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def _import_reference(reference: str) -> Any:
    module_name, _, attr = reference.partition(":")
    obj = importlib.import_module(module_name)
    for part in attr.split(".") if attr else []:
        obj = getattr(obj, part)
    return obj


def _as_plugin_object(plugin: Any) -> Any:
    if inspect.isclass(plugin):
        return plugin()
    if inspect.isfunction(plugin):
        if plugin.__name__ != "similarity":
            raise TypeError(f"a function plugin must be named `similarity`, got {plugin.__name__!r}")
        return SimpleNamespace(similarity=plugin, __doc__=plugin.__doc__, description=_first_line(plugin.__doc__ or ""),
                               options=getattr(plugin, "options", None), needs=getattr(plugin, "needs", None))
    return plugin


def _entry_points() -> list[importlib.metadata.EntryPoint]:
    return list(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))


def autoload_disabled() -> bool:
    """True when ``SIMILARITY_PLUGINS_DISABLE_AUTOLOAD`` is set to a true value (1, true, yes)."""
    return os.environ.get(DISABLE_AUTOLOAD_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def build_plugin_manager(load_entry_points: bool | None = None) -> SimilarityPluginManager:
    """A new manager with the built-in metrics and (unless disabled) the entry-point metrics."""
    pm = SimilarityPluginManager()
    for name, reference in DEFAULT_PLUGINS.items():
        pm.load_reference(name, reference, BUILTIN_PACKAGE)
    if load_entry_points is None:
        load_entry_points = not autoload_disabled()
    if load_entry_points:
        for ep in _entry_points():
            package = ep.dist.name if getattr(ep, "dist", None) is not None else "(unknown package)"
            if package.lower().replace("_", "-") == BUILTIN_PACKAGE:
                continue  # an older install's metadata listing the built-ins as entry points: they are loaded above
            pm.load_reference(ep.name, ep, package)
    return pm


_lock = threading.Lock()
_pm: SimilarityPluginManager | None = None


def get_plugin_manager() -> SimilarityPluginManager:
    """The process-wide plugin manager, built on first use."""
    global _pm
    with _lock:
        if _pm is None:
            _pm = build_plugin_manager()
        return _pm


def reset_plugin_manager() -> None:
    """Forget the process-wide manager (the next call rebuilds it, re-reading entry points)."""
    global _pm
    with _lock:
        _pm = None
