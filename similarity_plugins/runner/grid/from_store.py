"""``compare_grid(..., store=PATH)``: a grid whose test activations come from an activation store.

With models and layers, the entries the store lacks (or holds for another version of a model, or other data)
are extracted first; then every node's test activations are read from the store, so the grid runs no forward
pass of its own for them. With ``store=`` alone, the models are names in the store: the grid runs from disk,
and a metric that needs the model itself (stitching, IRIs) gets an error row saying so.

Before any work the entries are paired by sample (`rows.align`): the same samples in another order are read
in one order, other samples or other data are refused. Each node's rows are offered to the measures twice: whole,
read on first use (``context.loaders``), and as rows on disk that the measures which reduce to sums over samples
read in blocks (``context.row_sources``), so those never hold a node in memory.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np
import torch
from torch import nn

from ...networks.context import Context
from ...networks.data import Data
from ...networks.model_state import on_device
from ...networks.named import as_layers, as_models
from ...store.fill import fill_model
from ...store.paths import check_names
from ...store.rows import AlignedRows, align
from ...store.store import Store, StoreError
from ...utils.progress import Progress
from ...utils.text import did_you_mean, how_to


class StoredModel(nn.Module):
    """Stands in for a model known only by its entries in a store: it has no weights and cannot run."""

    def __init__(self, name: str, store: Store) -> None:
        super().__init__()
        self.stored_name, self._store_path = name, store.path

    def forward(self, *_: Any) -> torch.Tensor:
        raise RuntimeError(f"model {self.stored_name!r} is known only from the store {self._store_path}: this metric "
                           "runs the model itself (stitching and IRIs need the models, not only their activations); "
                           "pass the models and data too: "
                           + how_to("compare_grid(models, layers, data, metrics, store=...)",
                                    "similarity-plugins grid --model NAME=SPEC ... --data ... --store DIR"))


class _StoredSplit:
    """The test split of a grid run from the store alone: its activations are in the store, not in a dataset."""

    def __repr__(self) -> str:
        return "<the test split held in the activation store>"


@dataclass
class StoreSource:
    """The store a grid reads: ``named`` models (real, or [`StoredModel`][StoredModel]), their layers, the data,
    and each node's entry in the grid's one sample order (``rows``)."""

    store: Store
    named: dict[str, nn.Module]
    per_model: dict[str, list[str]]
    data: Data
    rows: dict[tuple[str, str], AlignedRows] = field(default_factory=dict)
    samples: dict = field(default_factory=dict)
    fingerprints: dict[str, str] = field(default_factory=dict)

    def prefill(self, ctx: Context, placed: dict[str, nn.Module]) -> None:
        """Let ``ctx`` read every node's test activations from the store: whole, in its layer's shape, on first use
        (so ``ctx.capture`` has nothing left to run, and ``cache_bytes`` bounds how many are held at once), or in
        blocks (`Context.row_source`)."""
        for (name, layer), rows in self.rows.items():
            key = ("activations", id(placed[name]), layer, "test")
            ctx.loaders[key] = _reader(rows)
            ctx.row_sources[key] = rows


def _reader(rows: AlignedRows) -> Callable[[], torch.Tensor]:
    """A function that reads an entry whole in the grid's sample order, checksums checked, in its layer's shape."""
    def read() -> torch.Tensor:
        acts = torch.from_numpy(np.asarray(rows))
        shape = rows.array.manifest.get("layer_shape")
        return acts.reshape(len(acts), *shape) if shape and int(np.prod(shape)) == acts.shape[1] else acts
    return read


def store_source(store: str | os.PathLike | Store, models: Any, layers: Any, data: Data | None, *,
                 device: torch.device | None, progress: Progress, shared: bool = False) -> StoreSource:
    """The models, layers, data and aligned entries of ``compare_grid(..., store=store)``, the store filled where it
    must be (each model's `module_digest` kept in ``fingerprints`` for the grid's resume file)."""
    if models is None:
        if data is not None and (data.train is not None or data.test is not None):
            raise ValueError("a grid from the store alone reads every node's rows from the store, so it would ignore "
                             "the data given: leave data out, or pass the models and layers too (to extract on this "
                             "data, or to run stitching and IRIs, which need the models)")
        store = store if isinstance(store, Store) else Store(store)
        per_model = _stored_layers(store, layers)
        named = {m: StoredModel(m, store) for m in per_model}
        source = StoreSource(store, named, per_model, Data(test=_StoredSplit()))
    else:
        named = as_models(models)
        per_model = as_layers(layers, named)
        check_names(per_model)
        if data is None or data.test is None:
            raise ValueError("compare_grid(models, layers, store=...) extracts what the store lacks from Data.test; "
                             "pass data=Data(test=...), or leave models and layers out to run from the store alone")
        store = store if isinstance(store, Store) else Store.create(store)
        made = {}
        for name, model in named.items():
            placed = on_device(model, device, f"model {name!r}")
            made[name] = fill_model(store, name, placed, per_model[name], data.test, device=device, progress=progress)
        source = StoreSource(store, named, per_model, data,
                             fingerprints={name: m["model_fingerprint"] for name, m in made.items()})
        _check_made(store, per_model, made)
    nodes = [(m, layer) for m in per_model for layer in per_model[m]]
    aligned = align([store.load(m, layer) for m, layer in nodes], shared=shared)
    source.rows = dict(zip(nodes, aligned.views))
    source.samples = aligned.summary()
    return source


def _check_made(store: Store, per_model: dict[str, list[str]], made: dict[str, dict]) -> None:
    """Refuse an entry whose samples are not those this call extracted (another process replaced it meanwhile)."""
    for name, layers in per_model.items():
        for layer in layers:
            held = store.entry(name, layer).get("data_fingerprint")
            if held != made[name]["data_fingerprint"]:
                raise StoreError(f"the store's entry {name}:{layer} holds other samples than the data passed (another "
                                 "process wrote it during this call); run the grid again")


def _stored_layers(store: Store, layers: Any) -> dict[str, list[str]]:
    """``{model: [layer, ...]}`` of the store (every entry), or the ``layers`` dict chosen, checked against it."""
    held = store.contents()
    if not held:
        raise StoreError(f"the store {store.path} holds no complete entry; extract some first ("
                         + how_to("similarity_plugins.extract", "similarity-plugins extract") + ")")
    if layers is None:
        return held
    if not isinstance(layers, Mapping):
        raise TypeError("with store= and no models, layers must be None (every entry) or a dict "
                        f"{{model: [layer, ...]}} choosing entries; got {type(layers).__name__}")
    per_model = {}
    for model, names in layers.items():
        if model not in held:
            raise StoreError(f"the store holds no model {model!r}{did_you_mean(str(model), held)}; it holds: "
                             f"{', '.join(held)}")
        names = [names] if isinstance(names, str) else list(names)
        stored = held[model]
        for layer in names:
            if layer not in stored:
                raise StoreError(f"the store holds no layer {layer!r} of model {model!r}"
                                 f"{did_you_mean(str(layer), stored)}; it holds: {', '.join(stored)}")
        per_model[str(model)] = names
    return per_model
