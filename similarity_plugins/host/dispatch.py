"""How the host calls a hook for one plugin through pluggy: that plugin's hookimpls inside every wrapper of the hook.

A metric call is one call of the ``similarity`` hook, and a family's registration one call of
``register_metrics``; neither may run the other plugins' hookimpls (every metric would run at each call). So a
`HookCall` hands pluggy's hook executor (``PluginManager._hookexec``, the code every ``pm.hook.<name>(...)`` call
runs, so ``add_hookcall_monitoring`` and ``enable_tracing`` trace it) the plugin's own hookimpls and every
wrapper of the hook (``@hookimpl(wrapper=True)`` or ``hookwrapper=True``) of any registered plugin, in pluggy's
order. By design a wrapper wraps the calls of every metric: it reads the ``metric`` argument to tell them apart.
The hookimpls of plugins that are not the one called and not wrappers are left out.

`DispatchingManager` keeps one `HookCall` per metric and forgets them when a plugin registers or unregisters.
"""

from __future__ import annotations

from typing import Any

import pluggy

from .entrypoints import WRAPPER_GROUP


def is_wrapper(impl: pluggy.HookImpl) -> bool:
    """True when ``impl`` wraps the other hookimpls of its hook (``wrapper=True`` or the old ``hookwrapper=True``)."""
    return bool(impl.wrapper or impl.hookwrapper)


def wrapper_marked(opts: dict | None) -> bool:
    """True when hookimpl options (``pm.parse_hookimpl_opts(plugin, name)``) mark a wrapper."""
    return bool(opts and (opts.get("wrapper") or opts.get("hookwrapper")))


class HookCall:
    """One call of the hook ``hook_name`` for the registered ``plugin``: ``call(**arguments)``.

    Args:
        pm: the plugin manager the plugin is registered with.
        hook_name: ``"similarity"`` or ``"register_metrics"``.
        plugin: the registered plugin object whose hookimpls run (inside every wrapper of the hook).

    Calling it runs the hookimpls through pluggy with ``arguments`` (every argument of the hookspec, by name;
    each hookimpl receives those it names) and returns what pluggy returns: for ``similarity`` (``firstresult``)
    the metric's value or what a wrapper returned instead; for ``register_metrics`` a list. An exception of a
    hookimpl or a wrapper is raised as it is.
    """

    __slots__ = ("_hookexec", "hook_name", "impls", "firstresult")

    def __init__(self, pm: pluggy.PluginManager, hook_name: str, plugin: Any) -> None:
        caller = getattr(pm.hook, hook_name)
        self.hook_name = hook_name
        self.impls = [impl for impl in caller.get_hookimpls() if impl.plugin is plugin or is_wrapper(impl)]
        self.firstresult = bool(caller.spec is not None and caller.spec.opts.get("firstresult"))
        self._hookexec = pm._hookexec  # resolves the manager's monitoring at each call

    def __call__(self, **arguments: Any) -> Any:
        return self._hookexec(self.hook_name, self.impls, arguments, self.firstresult)


class DispatchingManager(pluggy.PluginManager):
    """A ``pluggy.PluginManager`` that calls one metric at a time through pluggy (`metric_call`).

    Its calls are cached per metric name and rebuilt after any ``register`` or ``unregister``, so a wrapper
    registered at run time wraps the next call.
    """

    def __init__(self, project_name: str) -> None:
        self._calls: dict[str, HookCall] = {}
        super().__init__(project_name)

    def register(self, plugin: Any, name: str | None = None) -> str | None:
        """pluggy's ``register``; the metric calls made so far are rebuilt."""
        try:
            return super().register(plugin, name)
        finally:
            self._calls.clear()

    def unregister(self, plugin: Any = None, name: str | None = None) -> Any:
        """pluggy's ``unregister``; the metric calls made so far are rebuilt."""
        try:
            return super().unregister(plugin, name)
        finally:
            self._calls.clear()

    def metric_call(self, name: str) -> HookCall:
        """The call of the metric ``name``: ``call(**arguments)`` runs its ``similarity`` hookimpl inside every
        wrapper of the hook. ``KeyError`` when no plugin is registered under ``name``."""
        call = self._calls.get(name)
        if call is None:
            plugin = self.get_plugin(name)
            if plugin is None:
                raise KeyError(name)
            call = self._calls[name] = HookCall(self, "similarity", plugin)
        return call


def check_metric_hookimpl(opts: dict | None, name: str, plugin: Any) -> None:
    """``TypeError`` when a metric's ``similarity`` is no hookimpl, or a wrapper (``opts``: pluggy's options of it,
    ``pm.parse_hookimpl_opts(plugin, "similarity")``): a metric's hookimpl returns its score."""
    if opts is None:
        raise TypeError(f"metric {name!r}: the `similarity` of {plugin!r} is not a hookimpl; decorate it with "
                        "@similarity_plugins.hookimpl")
    if wrapper_marked(opts):
        raise TypeError(f"metric {name!r}: its `similarity` is a wrapper (wrapper=True), which wraps the calls of every "
                        f"metric: register it with get_plugin_manager().register(obj) or in the entry-point group "
                        f"{WRAPPER_GROUP!r}")
