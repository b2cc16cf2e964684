"""``compare_grid``: every selected metric over many (model, layer) nodes, each thing computed once.

A *node* is a ``(model name, layer name)`` pair and a *cell* one metric on one ordered pair of nodes. Every
cell is the call ``compare`` makes for that pair (the same guard, rng isolation and error rows; see
`run`), on one [`Context`][context.Context] shared by the whole grid, so that

- each model runs forward over the test split once, all its layers captured in the same pass
  ([`capture`][context.Context.capture]), and over the train split once when an activation-only metric reads it;
- what a measure derives from one node (a centred Gram matrix) is built once and serves every cell the node
  is in ([`derived`][context.Context.derived], ``context.reuse_nodes`` is true);
- IRIs are generated once per front node and stitching fronts cached per node (their memo keys name the
  front model and layer, not the end), whatever the end node;
- a metric that declares ``symmetric = True`` runs once per unordered pair and is mirrored.
"""

from __future__ import annotations

import os
from typing import Any, Iterable, Mapping, Sequence

import torch
from torch import nn

from ...host.manager import get_plugin_manager
from ...host.registry import declared_meanings, options_for_metrics
from ...networks.context import Context
from ...networks.data import Data
from ...networks.model_state import model_device, on_device
from ...networks.named import as_layers, as_models
from ...store.store import Store
from ...utils.progress import Progress, check_progress
from ...utils.rng import check_seed
from ...utils.text import did_you_mean, how_to
from ..compare import sources_of
from ..provenance import provenance, splits_read, store_provenance
from ..score import select_score_metrics
from .results import Grid, Node
from .run import Plan, run_grid

PAIRS = ("all", "across", "within")


def _as_pairs(pairs: Any, nodes: list[Node]) -> list[tuple[int, int]]:
    """The ordered (front index, end index) pairs that ``pairs`` selects, in row-major node order."""
    index = {node: i for i, node in enumerate(nodes)}
    everything = [(i, j) for i in range(len(nodes)) for j in range(len(nodes))]
    if isinstance(pairs, str):
        if pairs == "all":
            return everything
        if pairs == "across":
            return [(i, j) for i, j in everything if nodes[i][0] != nodes[j][0]]
        if pairs == "within":
            return [(i, j) for i, j in everything if nodes[i][0] == nodes[j][0]]
        raise ValueError(f"pairs must be one of {', '.join(PAIRS)} or a list of ((model, layer), (model, layer)); "
                         f"got {pairs!r}{did_you_mean(pairs, PAIRS)}")
    if not isinstance(pairs, Iterable):
        raise TypeError(f"pairs must be 'all', 'across', 'within' or a list of node pairs, got {type(pairs).__name__}")
    chosen: list[tuple[int, int]] = []
    for item in pairs:
        try:
            front, end = ((str(item[0][0]), *item[0][1:]), (str(item[1][0]), *item[1][1:]))  # names as text
        except (TypeError, IndexError):
            raise TypeError(f"each explicit pair must be ((model, layer), (model, layer)), got {item!r}") from None
        for node in (front, end):
            if node not in index:
                raise ValueError(f"pair {item!r}: {node!r} is not a node of the grid; nodes: "
                                 + ", ".join(f"{m}:{layer}" for m, layer in nodes))
        if (index[front], index[end]) not in chosen:
            chosen.append((index[front], index[end]))
    if not chosen:
        raise ValueError("pairs selects no cell")
    return chosen


def _checked_arguments(progress: Any, seed: Any, data: Data | None, cache_bytes: Any) -> tuple[Progress, int, Data]:
    """The grid's ``progress`` (a word), ``seed`` and ``data`` (a new `Data` when None) once ``progress``, ``seed``,
    ``data`` and ``cache_bytes`` are checked; ``TypeError`` / ``ValueError`` naming the argument otherwise."""
    progress = check_progress(progress)
    seed = check_seed(seed)
    data = data if data is not None else Data()
    if not isinstance(data, Data):
        raise TypeError(f"data must be a similarity_plugins.Data(train=..., test=...), got {type(data).__name__}")
    if cache_bytes is not None and (isinstance(cache_bytes, bool) or not isinstance(cache_bytes, int) or cache_bytes < 0):
        raise ValueError(f"cache_bytes must be a number of bytes >= 0 or None, got {cache_bytes!r}")
    return progress, seed, data


def _grid_models(models: Any, layers: Any, data: Data, store: Any, device: Any, progress: Progress,
                 shared: bool) -> tuple:
    """``(named models, {model: [layer, ...]}, data, store source or None)`` of a grid: from ``models`` and
    ``layers``, or from the activation store ``store`` (which may also extract what it lacks)."""
    if not isinstance(shared, bool):
        raise TypeError(f"shared_samples must be True or False, got {shared!r}")
    if store is None:
        if models is None or layers is None:
            raise TypeError("compare_grid needs models and layers, or store= (a store folder) to run from")
        if shared:
            raise ValueError("shared_samples pairs the samples of store entries; a grid from models reads every model "
                             "on the same data: pass store=, or leave shared_samples out")
        named = as_models(models)
        return named, as_layers(layers, named), data, None
    from .from_store import store_source  # it reads the models and layers with this module's rules

    source = store_source(store, models, layers, data, device=torch.device(device) if device else None,
                          progress=progress, shared=shared)
    return source.named, source.per_model, source.data, source


def _provenance(named: dict[str, nn.Module], data: Data, source: Any, names: list[str], pm: Any, options: Any,
                device: torch.device, ctx: Context, from_store: bool) -> dict:
    """The grid's ``meta["provenance"]``: its models and the splits its metrics read, or for a grid run from a store
    alone (``from_store``), what the store's entries record of the models and data they were extracted from."""
    if from_store:
        return {**provenance({}, {}, options=options, device=device), **store_provenance(source.store, source.per_model)}
    return provenance(named, splits_read(data, (pm.info[n].needs for n in names)), options=options, device=device,
                      batch_size=ctx.batch_size)


def _needs_models(pm, names: list[str]) -> dict[str, str]:
    """Why each selected metric that runs the models (stitching, IRIs) cannot run in a grid from a store alone."""
    fix = how_to("pass the models, layers and data too: compare_grid(models, layers, data, metrics, store=...)",
                 "similarity-plugins grid --model NAME=SPEC ... --layers ... --data ... --store DIR")
    return {n: f"{n} runs the models themselves (stitching and IRIs need them, not only their activations), and a "
               f"grid from an activation store alone has only activations; {fix}"
            for n in names if n not in pm.load_errors and not pm.info[n].activations_only}


def compare_grid(models: Mapping[str, nn.Module] | Sequence[nn.Module] | nn.Module | None = None,
                 layers: str | Sequence[str] | Mapping[str, Sequence[str]] | None = None, data: Data | None = None,
                 metrics: str | Iterable[str] | None = None, *,
                 pairs: str | Sequence[tuple[Node, Node]] = "all", seed: int = 0, options: dict | None = None,
                 device: str | torch.device | None = None, progress: Progress = "never",
                 resume: str | os.PathLike | None = None, cache_bytes: int | None = None,
                 store: str | os.PathLike | Store | None = None, shared_samples: bool = False) -> Grid:
    """Score every selected metric on every selected pair of (model, layer) nodes.

    Args:
        models: ``{name: nn.Module}`` or a list (named ``m0``, ``m1``, ...); one model gives its own layer x layer grid.
        layers: layer names used for every model, or ``{model name: [layer, ...]}``.
        data: [`Data`][Data] (test: scoring; train: fitting stitches, IRI seeds), as for ``compare``.
        metrics: names or wildcards; None: every activation-only metric (stitching and IRI metrics only when named).
        pairs: ``"all"`` (every ordered pair, each node with itself included), ``"across"`` (nodes of different
            models), ``"within"`` (nodes of one model), or a list of ``((model, layer), (model, layer))``.
        seed: as for [`compare`][similarity_plugins.compare].
        options: as for [`compare`][similarity_plugins.compare].
        device: as for [`compare`][similarity_plugins.compare].
        progress: as for [`compare`][similarity_plugins.compare], with one bar over the cells.
        resume: a finished-cells file (JSON lines, each with its SHA-256): cells already in it (same models, the same
            data content, seed and options) are read back instead of computed, and every cell computed is appended
            as it finishes, so an interrupted grid loses nothing finished. Only the cells this call asks for are read
            back (a file written with ``pairs="all"`` serves ``"across"`` its cells and no others); cells that failed
            are computed again; a last line cut short by an interruption is dropped. A damaged or edited file
            raises `BadFile` (a ``ValueError``) naming the file and line.
        cache_bytes: the most bytes of per-node derived quantities (centred Gram matrices) held at once, and of
            node activations when they come from ``store``; beyond it the least recently used are dropped and
            rebuilt or read again when needed (same values, more time). None: no bound.
        store: an activation store folder (or [`Store`][Store]). With models and layers, what it lacks is extracted
            into it first (one forward pass per batch, only for missing chunks) and every node's test activations
            are read from it. With models and layers left out, the grid runs from the store alone: every entry, or
            ``layers={model: [layer, ...]}`` to choose; metrics that run the models then get an error row, and
            ``data`` is refused (it would be ignored). Before any work the entries are paired by sample id: the same
            samples in another order are read in one order; entries of other samples or other data are refused
            naming both. The measures that reduce to sums over samples read the entries in blocks.
        shared_samples: with ``store``, keep the samples every entry holds instead of refusing entries whose sample
            ids differ (a warning says how many each entry loses; ``grid.meta["samples"]`` too).

    Returns:
        [`Grid`][results.Grid]. Unknown models, layers, metrics, pairs and options raise before any work,
            naming the valid ones. A failing cell (or a model whose forward pass fails: all its cells) gets an error
            row; every other cell keeps its value. Ctrl-C raises ``KeyboardInterrupt`` with a ``grid`` attribute
            holding the finished cells. Under torchrun the cells are shared out between the ranks and every rank
            returns the same grid.
    """
    progress, seed, data = _checked_arguments(progress, seed, data, cache_bytes)
    named, per_model, data, source = _grid_models(models, layers, data, store, device, progress, shared_samples)
    nodes = [(m, layer) for m in named for layer in per_model[m]]
    chosen = _as_pairs(pairs, nodes)
    names = select_score_metrics(metrics)
    metric_options = options_for_metrics(names, options)
    pm = get_plugin_manager()
    device = torch.device(device) if device is not None else model_device(next(iter(named.values())))
    placed = {name: on_device(model, device, f"model {name!r}") for name, model in named.items()}
    ctx = Context(data, seed=seed, device=device, options=options, progress=progress, reuse_nodes=True,
                  derived_bytes=cache_bytes, grid_layers={id(placed[m]): list(per_model[m]) for m in named})
    if source is not None:
        source.prefill(ctx, placed)
    info = declared_meanings(names)
    meta = {"models": {m: type(model).__name__ for m, model in named.items()}, "layers": per_model, "metrics": names,
            "pairs": pairs if isinstance(pairs, str) else "explicit", "seed": seed, "device": str(device),
            **({} if isinstance(pairs, str) else {"explicit_pairs": [list(p) for p in chosen]}),
            "torch": torch.__version__, "world_size": ctx.world.size,
            **({"store": source.store.path, "samples": source.samples} if source else {}), **sources_of(named),
            "provenance": _provenance(named, data, source, names, pm, options, device, ctx, store is not None and models is None)}
    plan = Plan(nodes=nodes, pairs=chosen, metrics=names, symmetric={n: bool(info[n]["symmetric"]) for n in names},
                options=metric_options, seed=seed, refused=_needs_models(pm, names) if models is None and source else {})
    cells = run_grid(plan, named, placed, ctx, pm, info, meta, resume=resume,
                     weights=source.fingerprints if source else None)
    return Grid(nodes, names, cells, info, meta)
