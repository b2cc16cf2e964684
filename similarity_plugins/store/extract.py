"""``extract``: every (model, layer) node's activations written to an activation store, once."""

from __future__ import annotations

import os
from typing import Mapping, Sequence

import torch
from torch import nn

from ..networks.data import Data
from ..networks.model_state import model_device, on_device
from ..networks.named import as_layers, as_models
from ..utils.progress import Progress, check_progress
from ..utils.rules import as_positive_int
from .fill import fill_model
from .paths import check_names
from .store import Store


def extract(models: Mapping[str, nn.Module] | Sequence[nn.Module] | nn.Module,
            layers: str | Sequence[str] | Mapping[str, Sequence[str]], data: Data, store: str | os.PathLike | Store, *,
            split: str = "test",
            batch_size: int | None = None, device: str | torch.device | None = None,
            progress: Progress = "never") -> Store:
    """Write the activations of every (model, layer) node on a data split into an activation store.

    Args:
        models: ``{name: nn.Module}`` or a list (named ``m0``, ``m1``, ...), as for ``compare_grid``.
        layers: layer names used for every model, or ``{model name: [layer, ...]}``.
        data: [`Data`][Data]; the split named by ``split`` is read in order (sample ``i`` gets the id ``i``).
        store: the store folder (made when missing) or a [`Store`][Store].
        split: ``"test"`` (default) or ``"train"``.
        batch_size: samples per forward pass and per chunk (default 256).
        device: where the models run (default: the first model's device).
        progress: a bar per model over the split's samples: ``"never"``, ``"auto"`` (on a terminal) or ``"always"``.

    Returns:
        The [`Store`][Store], with ``store.extracted`` = ``{model: {"forwarded": samples forwarded, "found": samples
            whose activations were in the store already}}`` for this call. Each model runs one forward pass per
            batch for all its layers, and only for batches whose chunks are missing: a second call with the same
            models and data runs no forward pass, an interrupted call resumes, and a model whose parameters,
            buffers, settings, tokenizer, processor or pooling changed gets new entries. The models are left as
            they were.

    Raises:
        StoreError: a model or layer name that cannot name a folder (empty, NUL, too long), a store folder that
            is not a store, or a store of an earlier format; before any forward pass.
    """
    progress = check_progress(progress)
    if not isinstance(data, Data):
        raise TypeError(f"data must be a similarity_plugins.Data(train=..., test=...), got {type(data).__name__}")
    if batch_size is not None and (not isinstance(batch_size, int) or as_positive_int(batch_size) is None):
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    named = as_models(models)
    per_model = as_layers(layers, named)
    check_names(per_model)
    chosen = data.split(split)
    store = store if isinstance(store, Store) else Store.create(store)
    device = torch.device(device) if device is not None else model_device(next(iter(named.values())))
    done = {}
    for name, model in named.items():
        placed = on_device(model, device, f"model {name!r}")
        made = fill_model(store, name, placed, per_model[name], chosen, split_name=split, batch_size=batch_size or 256,
                          device=device, progress=progress)
        done[name] = {"forwarded": made["forwarded"], "found": made["found"]}
    store.extracted = done
    return store
