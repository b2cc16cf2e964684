"""similarity-plugins: does network A compute the same function as network B?

The public face: :func:`compare` (one call, every metric), :func:`compare_grid` (many models and layers,
a :class:`Grid`), :func:`score` (the same report from two arrays
of activations), :func:`list_metrics`, :func:`metric_info`,
:func:`layers`, :class:`Data`, the result types, and :data:`hookimpl`, :class:`Option` and
:func:`register_metric` for writing metric plugins.
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

    Its ``options`` and ``needs`` attributes, if any, declare what it takes (see :class:`Option`).
    Raises ``ValueError`` naming the owner when ``name`` is taken, unless ``replace=True``. Returns ``name``.
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
