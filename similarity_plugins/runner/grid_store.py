"""``compare_grid(..., store=PATH)``: a grid whose test activations come from an activation store.

With models and layers, the entries the store lacks (or holds for another version of a model, or other data)
are extracted first; then every node's test activations are read from the store, so the grid runs no forward
pass of its own for them. With ``store=`` alone, the models are names in the store: the grid runs from disk,
and a metric that needs the model itself (stitching, IRIs) gets an error row saying so.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np
import torch
from torch import nn

from ..networks.context import Context
from ..networks.data import Data
from ..networks.split import on_device
from ..networks.store import Store, StoreError
from ..networks.store_fill import fill_model
from ..utils.progress import Progress
from ..utils.text import did_you_mean
from .grid_nodes import as_layers, as_models


class StoredModel(nn.Module):
    """Stands in for a model known only by its entries in a store: it has no weights and cannot run."""

    def __init__(self, name: str, store: Store) -> None:
        super().__init__()
        self.stored_name, self._store_path = name, store.path

    def forward(self, *_: Any) -> torch.Tensor:
        raise RuntimeError(f"model {self.stored_name!r} is known only from the store {self._store_path}: this metric "
                           "runs the model itself; pass the models to compare_grid (with store=) to run it")


class _StoredSplit:
    """The test split of a grid run from the store alone: its activations are in the store, not in a dataset."""

    def __repr__(self) -> str:
        return "<the test split held in the activation store>"


@dataclass
class StoreSource:
    """The store a grid reads: ``named`` models (real, or [`StoredModel`][StoredModel]), their layers, the data."""

    store: Store
    named: dict[str, nn.Module]
    per_model: dict[str, list[str]]
    data: Data

    def prefill(self, ctx: Context, placed: dict[str, nn.Module]) -> None:
        """Let ``ctx`` read every node's test activations from the store, in its layer's shape, on first use (so
        ``ctx.capture`` has nothing left to run, and ``cache_bytes`` bounds how many are held at once)."""
        for name, layers in self.per_model.items():
            for layer in layers:
                ctx.loaders[("activations", id(placed[name]), layer, "test")] = self._reader(name, layer)

    def _reader(self, name: str, layer: str) -> Callable[[], torch.Tensor]:
        """A function that reads the entry (``name``, ``layer``) from the store, checksums checked."""
        def read() -> torch.Tensor:
            entry = self.store.entry(name, layer)
            acts = torch.from_numpy(np.asarray(self.store.load(name, layer)))
            return acts.reshape(len(acts), *entry["layer_shape"]) if entry.get("layer_shape") else acts
        return read


def store_source(store: str | os.PathLike | Store, models: Any, layers: Any, data: Data | None, *,
                 device: torch.device | None, progress: Progress) -> StoreSource:
    """The models, layers and data of ``compare_grid(..., store=store)``, the store filled where it must be."""
    if models is None:
        store = store if isinstance(store, Store) else Store(store)
        per_model = _stored_layers(store, layers)
        named = {m: StoredModel(m, store) for m in per_model}
        data = data if data is not None else Data()
        if data.test is None:
            data = Data(train=data.train, test=_StoredSplit())
        return StoreSource(store, named, per_model, data)
    store = store if isinstance(store, Store) else Store.create(store)
    named = as_models(models)
    per_model = as_layers(layers, named)
    if data is None or data.test is None:
        raise ValueError("compare_grid(models, layers, store=...) extracts what the store lacks from Data.test; pass "
                         "data=Data(test=...), or leave models and layers out to run from the store alone")
    for name, model in named.items():
        placed = on_device(model, device, f"model {name!r}")
        fill_model(store, name, placed, per_model[name], data.test, device=device, progress=progress,
                   pooling=getattr(model, "pooling", None))
    return StoreSource(store, named, per_model, data)


def _stored_layers(store: Store, layers: Any) -> dict[str, list[str]]:
    """``{model: [layer, ...]}`` of the store (every entry), or the ``layers`` dict chosen, checked against it."""
    held = store.models
    if not held:
        raise StoreError(f"the store {store.path} holds no complete entry; run similarity_plugins.extract first")
    if layers is None:
        return {m: store.layers(m) for m in held}
    if not isinstance(layers, Mapping):
        raise TypeError("with store= and no models, layers must be None (every entry) or a dict "
                        f"{{model: [layer, ...]}} choosing entries; got {type(layers).__name__}")
    per_model = {}
    for model, names in layers.items():
        if model not in held:
            raise StoreError(f"the store holds no model {model!r}{did_you_mean(str(model), held)}; it holds: "
                             f"{', '.join(held)}")
        names = [names] if isinstance(names, str) else list(names)
        stored = store.layers(model)
        for layer in names:
            if layer not in stored:
                raise StoreError(f"the store holds no layer {layer!r} of model {model!r}"
                                 f"{did_you_mean(str(layer), stored)}; it holds: {', '.join(stored)}")
        per_model[str(model)] = names
    return per_model
