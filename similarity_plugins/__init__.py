"""similarity-plugins: does network A compute the same function as network B?

The public face: [`compare`][compare] (one call, every metric), [`compare_grid`][compare_grid] (many models and layers,
a [`Grid`][Grid]), [`score`][score] (the same report from two arrays
of activations), [`list_metrics`][list_metrics], [`metric_info`][metric_info],
[`layers`][layers], [`Data`][Data], the result types, and [`hookimpl`][hookimpl], [`MetricPlugin`][MetricPlugin],
[`Option`][Option] and [`register_metric`][register_metric] for writing metric plugins.
"""

from __future__ import annotations

from . import distributed  # noqa: F401,E402 - registers the torch.distributed world with the networks services
from .adapters.hf import HFModel, hf
from .adapters.preprocess import preprocessed
from .adapters.text import paired_data, text_data
from .apps import report as _report_app  # the application that draws a result as one HTML page
from .host import pages as _pages
from .host.contract import Option, UnknownOption
from .host.hookspecs import hookimpl
from .host.plugin import MetricPlugin
from .host.registry import UnknownMetric, list_metrics, metric_info
from .host.results import LayerPair, Report, SimilarityResult
from .measures.streamed import MemoryBudgetWarning
from .networks.data import Data
from .networks.layer_lists import LayerNotFound, layers
from .runner.compare import compare
from .runner.grid.best import IncompleteBlockWarning
from .runner.grid.compare_grid import compare_grid
from .runner.grid.results import Grid
from .runner.score import score
from .store.extract import extract
from .store.store import CorruptChunk, Store, StoredArray, StoreError

# Report.to_html and Grid.to_html write through the page writer the report application installs (host/pages.py)
_pages.register_page_writer(_report_app.write_html)

__version__ = "0.1.0"

__all__ = [
    "compare", "score", "compare_grid", "Grid", "Data", "Report", "SimilarityResult", "LayerPair", "layers",
    "list_metrics", "metric_info", "hookimpl", "MetricPlugin", "Option", "register_metric", "UnknownMetric", "UnknownOption",
    "LayerNotFound", "hf", "HFModel", "text_data", "paired_data", "preprocessed", "extract", "Store", "StoredArray",
    "StoreError", "CorruptChunk", "IncompleteBlockWarning", "MemoryBudgetWarning", "__version__",
]


def register_metric(plugin: object, name: str, replace: bool = False) -> str:
    """Register a metric plugin at run time (module, class, instance, or ``@hookimpl`` function) as ``name``.

    Args:
        plugin: the object that implements the ``similarity`` hook. Its attributes declare what it takes and
            what its score means, each optional (the contract, with types and defaults: [`MetricPlugin`][MetricPlugin]).
        name: the metric's name in ``metrics=[...]``, reports and the command line.
        replace: replace a metric already registered under ``name``.

    Returns:
        ``name``.

    Raises:
        ValueError: ``name`` is taken (naming its owner) and ``replace`` is false.
    """
    from .host.manager import get_plugin_manager

    return get_plugin_manager().register_metric(plugin, name, replace=replace)


# Sub-packages reachable as attributes without an import of their own (``sp.functional.cka``, ``sp.iri``).
_LAZY = {name: f".{name}" for name in (
    "functional", "cka", "measures", "iri", "datasets", "stitch", "plugins", "apps", "cli", "host", "runner",
    "networks", "stats", "utils", "distributed")}


def __getattr__(name: str):
    import importlib

    if name in _LAZY:
        return importlib.import_module(_LAZY[name], __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
