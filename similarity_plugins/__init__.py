"""similarity-plugins: does network A compute the same function as network B?

The public face: [`compare`][compare] (one call, every metric), [`compare_grid`][compare_grid] (many models and layers,
a [`Grid`][Grid]), [`score`][score] (the same report from two arrays
of activations), [`list_metrics`][list_metrics], [`metric_info`][metric_info],
[`layers`][layers], [`Data`][Data], the result types, and [`hookimpl`][hookimpl], [`Option`][Option] and
[`register_metric`][register_metric] for writing metric plugins.
"""

from __future__ import annotations

from . import distributed  # noqa: F401,E402 - registers the torch.distributed world with core
from .core.arrays import score
from .core.compare import compare
from .core.context import Context
from .core.contract import Option, UnknownOption
from .core.data import Data
from .core.grid import compare_grid
from .core.grid_results import Grid
from .core.hookspecs import hookimpl
from .core.manager import get_plugin_manager
from .core.networks import LayerNotFound, SplitNetwork, frozen, layers
from .core.registry import UnknownMetric, list_metrics, metric_info, select_metrics
from .core.results import LayerPair, Report, SimilarityResult

__version__ = "0.1.0"

__all__ = [
    "compare", "compare_grid", "Grid", "score", "Context", "Data", "hookimpl", "get_plugin_manager", "LayerNotFound",
    "SplitNetwork", "frozen", "layers", "UnknownMetric", "list_metrics", "metric_info", "select_metrics", "LayerPair",
    "Report", "SimilarityResult", "register_metric", "Option", "UnknownOption", "__version__",
]


def register_metric(plugin: object, name: str, replace: bool = False) -> str:
    """Register a metric plugin at run time (module, class, instance, or ``@hookimpl`` function) as ``name``.

    Args:
        plugin: the object that implements the ``similarity`` hook. Its ``options`` and ``needs`` attributes,
            if any, declare what it takes (see [`Option`][Option]).
        name: the metric's name in ``metrics=[...]``, reports and the command line.
        replace: replace a metric already registered under ``name``.

    Returns:
        ``name``.

    Raises:
        ValueError: ``name`` is taken (naming its owner) and ``replace`` is false.
    """
    return get_plugin_manager().register_metric(plugin, name, replace=replace)


# Lazy submodules under their public names. ``models``, ``training``, ``demo``, ``experiments`` and ``plots``
# are the applications in ``apps/`` (their old top-level names keep working as attributes).
_LAZY = {
    "functional": ".functional", "cka": ".cka", "iri": ".iri", "datasets": ".datasets", "stitch": ".stitch",
    "plugins": ".plugins", "cli": ".cli", "apps": ".apps", "models": ".apps.zoo", "zoo": ".apps.zoo",
    "training": ".apps.training", "demo": ".apps.demo", "experiments": ".apps.experiments", "plots": ".apps.plots",
}


def __getattr__(name: str):
    import importlib

    if name in _LAZY:
        return importlib.import_module(_LAZY[name], __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
