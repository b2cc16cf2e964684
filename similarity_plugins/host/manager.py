"""The plugin manager: built-in metrics and third-party ones, registered the same way.

The built-in metrics come from the family modules named in `DEFAULT_PLUGINS`, each with a
``register_metrics(register)`` hookimpl, loaded when the manager is built through the same code as a
third-party family. Third-party packages add metrics through entry points of the group
``similarity_plugins`` in one of two forms (see [`hookspecs`][hookspecs]):

- a single metric: the entry point's object has a ``similarity`` hookimpl; the entry-point name is the
  metric's name;
- a family: the object has a ``register_metrics(register)`` hookimpl that calls
  ``register(name, plugin)`` once per metric (the entry-point name is then only a label: use the
  package's name, not a metric's).

A wrapper of every metric call (an object whose ``similarity`` hookimpl is a wrapper, `dispatch`) may come through
the same group: the manager reads each entry point's module without importing it (`entrypoints.declares_wrapper`)
and imports the wrappers when it is built, so they wrap the first metric call too; the group
``similarity_plugins.wrappers`` holds wrappers only, all imported then.
Metric entry points load lazily (`entrypoints`): the manager reads their names from the packages'
metadata and imports one only when its names are needed (`SimilarityPluginManager.ensure` for a
name it does not know yet, `SimilarityPluginManager.load_all` for ``list``, a wildcard or the
default selection); a single-metric entry point's name is known without importing it.
``SIMILARITY_PLUGINS=pkg1,pkg2`` keeps only the named distributions' entry points (empty: none);
``SIMILARITY_PLUGINS_DISABLE_AUTOLOAD=1`` skips them all. The built-ins always load. A plugin that
fails to import is not registered; its error is kept in ``load_errors`` and reported in its row when
it is selected.

A metric name belongs to whoever took it first: `SimilarityPluginManager.register_metric`
raises on a taken name unless ``replace=True``; an entry point whose name is taken is skipped with a
warning naming both packages, and so is a family's ``register(name, ...)`` of a name that another
package holds, ``replace=True`` or not (a family may replace only its own package's metrics), so a
third-party package can never silently shadow a built-in or another package, whatever loads first.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import threading
import warnings
from types import SimpleNamespace
from typing import Any, Iterable

import pluggy

from . import hookspecs
from .dispatch import DispatchingManager, HookCall, check_metric_hookimpl, wrapper_marked
from .entrypoints import (
    BUILTIN_PACKAGE,
    ENTRY_POINT_GROUP,
    WRAPPER_GROUP,
    autoload_disabled,
    check_metric_name,
    declares_wrapper,
    selected_entry_points,
)
from .plugin import FIELDS, MetricInfo, plugin_attributes

#: What importing or registering a plugin may raise and still leave a BROKEN entry (a module that calls
#: ``sys.exit`` at import, as argparse-based scripts do, included); Ctrl-C still stops.
LOAD_ERRORS = (Exception, SystemExit, GeneratorExit)

#: The built-in metric families: modules whose ``register_metrics(register)`` hookimpl registers their metrics,
#: in this order, exactly as a third-party family's entry point does.
DEFAULT_PLUGINS: tuple[str, ...] = (
    "similarity_plugins.plugins.cka",
    "similarity_plugins.plugins.representational",
    "similarity_plugins.plugins.stitching",
    "similarity_plugins.plugins.invariance",
)


class OptionNameClash(ValueError):
    """A metric whose name is already an option of a registered metric (``options={name: ...}`` would be ambiguous)."""


class SimilarityPluginManager(DispatchingManager):
    """A ``pluggy.PluginManager`` that remembers each metric's package and load errors, holds the
    entry points not imported yet (``pending``, in discovery order) with the metric names they claim, and calls
    each metric through pluggy (`metric_call`)."""

    def __init__(self) -> None:
        super().__init__(hookspecs.PROJECT_NAME)
        self.add_hookspecs(hookspecs)
        self.info: dict[str, MetricInfo] = {}
        self.load_errors: dict[str, str] = {}
        self.pending: list[tuple[Any, str]] = []
        self.claims: dict[str, str] = {}  # metric name -> package of the pending single-metric entry point
        self._loading = threading.RLock()

    def register_metric(self, plugin: Any, name: str, package: str = "(registered at run time)", *,
                        replace: bool = False) -> str:
        """Register ``plugin`` as the metric ``name`` (module, class, instance or hookimpl function).

        Returns the name. A class is instantiated with no arguments; a bare function decorated with
        ``@hookimpl`` is wrapped. The attributes of the contract (`MetricPlugin`) are read into its
        `MetricInfo` by `plugin_attributes`. Raises ``ValueError`` when ``name`` is taken, naming
        its package, unless ``replace=True`` (then the old one is dropped), or cannot name a metric;
        ``TypeError`` when the plugin has no ``similarity`` hookimpl or a malformed declaration.
        """
        check_metric_name(name)
        with self._loading:
            holders = sorted(m for m, info in self.info.items() if info.options and name in info.options)
            if holders:
                raise OptionNameClash(f"similarity_plugins: skipped the metric {name!r} of {package}: {name!r} is an "
                                      f"option of {', '.join(holders)}, and options[{name!r}] must keep reaching "
                                      f"them; rename the metric")
            if name in self.claims and self.claims[name] != package:
                self._load_package(self.claims[name])  # the name is claimed by an entry point: it comes first
            if name in self.info and not replace:
                raise ValueError(f"metric name {name!r} is taken by {self.info[name].package}; pass replace=True "
                                 f"to register_metric to replace it, or choose another name")
            obj = _as_plugin_object(plugin)
            if getattr(obj, "similarity", None) is None:
                raise TypeError(f"metric {name!r}: {plugin!r} has no `similarity` hookimpl")
            check_metric_hookimpl(self.parse_hookimpl_opts(obj, "similarity"), name, plugin)
            attributes = plugin_attributes(obj, name)
            if self.get_plugin(name) is not None:
                self.unregister(name=name)
            self.register(obj, name=name)
            self.info[name] = MetricInfo(name, package, **attributes)
            self.load_errors.pop(name, None)
            return name

    def load_reference(self, name: str, reference: Any, package: str) -> None:
        """Import a ``"module:object"`` string (or anything with ``load()``) and register it as ``name``.

        A name that is already taken is skipped with a warning naming both packages; an import or
        registration error is kept (``load_errors[name]``) instead of raised.
        """
        if self._taken_warning(name, package):
            return
        try:
            obj = reference.load() if hasattr(reference, "load") else _import_reference(reference)
            self.register_metric(obj, name, package)
        except OptionNameClash as exc:
            warnings.warn(str(exc), stacklevel=2)
        except LOAD_ERRORS as exc:  # noqa: BLE001 - a broken plugin must not stop the others
            self._keep_error(name, package, exc)

    # -- third-party entry points, imported when their names are needed --------------------------

    def add_entry_points(self, entry_points: Iterable[tuple[Any, str]]) -> None:
        """Hold ``(entry point, package)`` pairs to import later; claim each one's name for its package.

        An entry point whose name is taken (a built-in, or an earlier entry point of another package)
        is skipped now, without importing it, with a warning naming both packages.
        """
        with self._loading:
            for ep, package in entry_points:
                owner = self.claims.get(ep.name)
                if owner is not None:  # a second package with this name (the same one twice: a duplicate)
                    if owner != package:
                        _warn_taken(ep.name, package, owner)
                    continue
                if self._taken_warning(ep.name, package):
                    continue
                self.claims[ep.name] = package
                self.pending.append((ep, package))

    def ensure(self, names: Iterable[str]) -> None:
        """Import the entry points that the metric ``names`` need: for a name not registered yet, the
        package whose single-metric entry point claims it, and when some name is still unknown, every
        pending entry point (a family may add it). Known names import nothing."""
        with self._loading:
            for name in names:
                if name not in self.info and name in self.claims:
                    self._load_package(self.claims[name])
            if any(name not in self.info for name in names):
                self.load_all()

    def load_wrappers(self) -> None:
        """Import the pending entry points that hold a wrapper of every metric call (`declares_wrapper`, read without
        importing): a wrapper must be registered before the first call. The others stay pending."""
        with self._loading:
            for ep, package in [p for p in self.pending if declares_wrapper(p[0])]:
                if (ep, package) in self.pending:
                    self._load_entry_point(ep, package, eager=True)

    def load_all(self) -> None:
        """Import every pending entry point (for ``list``, a wildcard or the default selection)."""
        with self._loading:
            while self.pending:
                self._load_entry_point(*self.pending[0])

    def _load_package(self, package: str) -> None:
        for ep, owner in list(self.pending):
            if owner == package and (ep, owner) in self.pending:  # a family may have dropped a later one
                self._load_entry_point(ep, owner)

    def _load_entry_point(self, ep: Any, package: str, eager: bool = False) -> None:
        self.pending.remove((ep, package))
        if self.claims.get(ep.name) == package:
            del self.claims[ep.name]
        self.load_family(ep.name, ep, package, eager=eager)

    def load_family(self, label: str, ep: Any, package: str, *, eager: bool = False) -> None:
        """Import ``ep`` (anything with ``load()``) and register what it holds: one metric named ``label``
        (a ``similarity`` hookimpl), a family (``register_metrics``) or a wrapper of every metric call (a
        ``similarity`` wrapper; unless ``eager``, imported when the manager was built, with a warning that it wraps
        the calls from now on only). Errors are kept, not raised."""
        try:
            obj = _as_plugin_object(ep.load())
            family = getattr(obj, "register_metrics", None)
            if family is not None and getattr(obj, "similarity", None) is not None:
                raise TypeError("it defines both `similarity` and `register_metrics`; an entry point is one metric "
                                "(`similarity`, named by the entry point) or a family (`register_metrics`)")
        except LOAD_ERRORS as exc:  # noqa: BLE001 - a broken plugin must not stop the others
            self._keep_error(label, package, exc)
            return
        if family is None and wrapper_marked(self.parse_hookimpl_opts(obj, "similarity")):
            if not eager:
                warnings.warn(f"similarity_plugins: the wrapper {label!r} of {package} was imported only now, so it "
                              f"wraps the metric calls from now on only: the manager finds a wrapper of the group "
                              f"{ENTRY_POINT_GROUP!r} when it is built by reading the module the entry point names, "
                              f"where its `similarity` (wrapper=True) must be written, not imported from another "
                              f"module; or declare it in the group {WRAPPER_GROUP!r}", stacklevel=2)
            self.load_wrapper(label, SimpleNamespace(load=lambda: obj), package)
            return
        if family is None:
            self.load_reference(label, SimpleNamespace(load=lambda: obj), package)
            return
        try:
            if self.parse_hookimpl_opts(obj, "register_metrics") is None:
                raise TypeError("its `register_metrics` is not a hookimpl: decorate it with @similarity_plugins.hookimpl")
            if not self.is_registered(obj):
                self.register(obj, name=f"{label} (metric family from {package})")
            HookCall(self, "register_metrics", obj)(register=self._family_register(package))
        except LOAD_ERRORS as exc:  # noqa: BLE001
            self._keep_error(label, package, exc, what=f"the metric family {label!r}")

    def load_wrapper(self, label: str, ep: Any, package: str) -> None:
        """Import ``ep`` (anything with ``load()``) and register it as a wrapper of every metric call: its
        ``similarity`` hookimpl must be a wrapper (``@hookimpl(wrapper=True)``). A failure is a warning naming the
        package (the metrics then run without the wrapper)."""
        try:
            obj = _as_plugin_object(ep.load())
            if not wrapper_marked(self.parse_hookimpl_opts(obj, "similarity")):
                raise TypeError(f"its `similarity` is not a wrapper (@similarity_plugins.hookimpl(wrapper=True)); a "
                                f"metric's entry point belongs in the group {ENTRY_POINT_GROUP!r}")
            self.register(obj, name=f"{label} (wrapper from {package})")
        except LOAD_ERRORS as exc:  # noqa: BLE001 - a broken wrapper must not stop the metrics
            warnings.warn(f"similarity_plugins: the wrapper {label!r} from {package} failed to load, and metric calls "
                          f"run without it: {type(exc).__name__}: {exc}", stacklevel=2)

    def _family_register(self, package: str):
        """The ``register(name, plugin, *, replace=False)`` callable handed to one package's ``register_metrics``."""
        def register(name: str, plugin: Any, *, replace: bool = False) -> None:
            check_metric_name(name)
            owner = self.claims.get(name) or (self.info[name].package if name in self.info else None)
            if owner is not None and (owner != package or not replace):
                _warn_taken(name, package, owner, replace)
                return
            if self.claims.get(name) == package:  # replaces its own package's entry point of that name
                del self.claims[name]
                self.pending = [(ep, p) for ep, p in self.pending if not (p == package and ep.name == name)]
            try:
                self.register_metric(plugin, name, package, replace=replace)
            except OptionNameClash as exc:
                warnings.warn(str(exc), stacklevel=2)
            except LOAD_ERRORS as exc:  # noqa: BLE001 - one broken metric of a family must not stop the others
                self._keep_error(name, package, exc)
        return register

    def _taken_warning(self, name: str, package: str) -> bool:
        if name not in self.info:
            return False
        _warn_taken(name, package, self.info[name].package)
        return True

    def _keep_error(self, name: str, package: str, exc: BaseException, what: str | None = None) -> None:
        message = f"{what or f'plugin {name!r}'} from {package} failed to load: {type(exc).__name__}: {exc}"
        self.load_errors[name] = message
        self.info[name] = MetricInfo(name, package, "", error=message, error_type=type(exc).__name__)

    def hookimpl_for(self, name: str) -> pluggy.HookImpl:
        """The ``similarity`` hookimpl of the metric ``name``."""
        plugin = self.get_plugin(name)
        for impl in self.hook.similarity.get_hookimpls():
            if impl.plugin is plugin:
                return impl
        raise KeyError(name)


def _warn_taken(name: str, package: str, owner: str, replace: bool = False) -> None:
    note = " (replace=True replaces only a metric of the same package)" if replace else ""
    warnings.warn(f"similarity_plugins: skipped the metric {name!r} of {package}: the name is taken by "
                  f"{owner}{note}; rename it to use both", stacklevel=3)


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
        if plugin.__name__ == "register_metrics":
            return SimpleNamespace(register_metrics=plugin)
        if plugin.__name__ != "similarity":
            raise TypeError(f"a function plugin must be named `similarity` (or `register_metrics` for a family), "
                            f"got {plugin.__name__!r}")
        declared = {f.name: getattr(plugin, f.name) for f in FIELDS if hasattr(plugin, f.name)}
        return SimpleNamespace(similarity=plugin, __doc__=plugin.__doc__, **declared)
    return plugin


def _entry_points() -> list[importlib.metadata.EntryPoint]:
    installed = importlib.metadata.entry_points()  # one pass over the installed distributions' metadata
    return [ep for group in (ENTRY_POINT_GROUP, WRAPPER_GROUP) for ep in installed.select(group=group)]


def build_plugin_manager(load_entry_points: bool | None = None) -> SimilarityPluginManager:
    """A new manager with the built-in metrics and the allowed wrappers registered (those of the wrapper group, and
    those found in the metric group by `SimilarityPluginManager.load_wrappers`), and the allowed metric entry points
    pending (not imported).

    ``load_entry_points``: False skips the entry points; None (default) follows the environment
    (``SIMILARITY_PLUGINS_DISABLE_AUTOLOAD``, ``SIMILARITY_PLUGINS``: see `entrypoints`).
    """
    pm = SimilarityPluginManager()
    for module in DEFAULT_PLUGINS:
        pm.load_family(module, SimpleNamespace(load=lambda module=module: importlib.import_module(module)),
                       BUILTIN_PACKAGE)
    if load_entry_points is None:
        load_entry_points = not autoload_disabled()
    if load_entry_points:
        chosen = selected_entry_points(_entry_points())
        pm.add_entry_points([(ep, package) for ep, package in chosen if _group(ep) != WRAPPER_GROUP])
        for ep, package in chosen:
            if _group(ep) == WRAPPER_GROUP:
                pm.load_wrapper(ep.name, ep, package)
        pm.load_wrappers()
    return pm


def _group(ep: Any) -> str:
    return getattr(ep, "group", None) or ENTRY_POINT_GROUP


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
