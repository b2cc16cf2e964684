"""Filling a store from a model: one forward pass per batch for all its layers, only where chunks are missing.

Each batch of the data split is one chunk per layer, named by its rows. Before a batch runs, its inputs and
labels are hashed (the chunk's data digest); a batch whose chunks are all present with that digest is not
forwarded, so a second extraction runs no forward pass and an interrupted one forwards only what it had not
written. The entry's key is the model's fingerprint (every parameter, buffer and module setting), the layer
and the pooling: a changed model gets a new entry and never the old activations.
"""

from __future__ import annotations

import datetime
import hashlib
import importlib.metadata
from collections import deque
from typing import Any, Iterator

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from ..utils.digest import update_inputs_digest, update_tensor_digest
from ..utils.progress import Progress, progress_bar
from .activations import check_finite, forward_layers
from .data import iterate_batches
from .parallel import current_world, module_digest
from .store import Store, entry_key

__all__ = ["fill_model"]


def batch_digest(x: Any, y: torch.Tensor) -> str:
    """SHA-256 (hex) of one batch's inputs (a tensor, strings or a dict of views) and labels."""
    h = hashlib.sha256()
    update_inputs_digest(h, "x", x)
    update_tensor_digest(h, "y", torch.as_tensor(y))
    return h.hexdigest()


def fill_model(store: Store, name: str, model: nn.Module, layers: list[str], split: Dataset | DataLoader, *,
               split_name: str = "test", batch_size: int = 256, device: torch.device | None = None,
               progress: Progress = "never", pooling: str | None = None) -> int:
    """Write the entries (``name``, layer) of every layer in ``layers`` on ``split`` into ``store``.

    Args:
        store: the store written to.
        name: the model's name in the store.
        model: the network (never changed: eval mode and no gradients only for the pass, flags restored).
        layers: module names; each entry holds that layer's output flattened to (N, D) float32.
        split: a Dataset or DataLoader of ``(x, y)``, read in order.
        split_name: the split's name, recorded in each entry.
        pooling: the pooling, recorded in each entry and part of its key.
        batch_size: as for `extract_layers`.
        device: as for `extract_layers`.
        progress: as for `extract_layers`.

    Returns:
        The number of batches forwarded, on all ranks together (0 when every chunk was already there).

    Under torchrun every rank calls it with the same arguments: batch ``i`` is forwarded and written by rank
    ``i mod size`` (chunks are named by their rows, so the ranks never write one file), and rank 0 writes each
    entry's manifest once every rank has written its chunks. An error on one rank is raised on every rank.
    """
    fingerprint = module_digest([model])
    keys = {layer: entry_key(fingerprint, layer, pooling) for layer in layers}
    world = current_world()
    ranges: list[tuple[int, int]] = []
    totals = world.exchange(  # every rank's (forwards, shapes); an error on one rank is raised on every rank
        lambda: _forward_missing(store, name, model, layers, keys, split, ranges, batch_size=batch_size,
                                 device=device, progress=progress), f"extracting model {name!r}")
    merged = {layer: shape for _, part in totals for layer, shape in part.items()}

    def write_manifests() -> None:
        for order, layer in enumerate(layers):
            info = {"model_fingerprint": fingerprint, "pooling": pooling, "split": split_name, "order": order,
                    "layer_shape": merged.get(layer),
                    "produced_by": {"by": "similarity_plugins.extract", "model_class": type(model).__name__,
                                    "batch_size": batch_size, "package": _version(), "torch": torch.__version__,
                                    "written": datetime.datetime.now(datetime.timezone.utc).isoformat()}}
            _finish(store, name, layer, keys[layer], ranges, info)

    world.exchange(lambda: write_manifests() if world.is_main else None, f"writing model {name!r}'s manifests")
    return sum(count for count, _ in totals)


def _forward_missing(store: Store, name: str, model: nn.Module, layers: list[str], keys: dict[str, str],
                     split: Dataset | DataLoader, ranges: list[tuple[int, int]], *, batch_size: int,
                     device: torch.device | None, progress: Progress) -> tuple[int, dict[str, list[int]]]:
    """Forward this rank's batches (batch i on rank ``i mod size``) whose chunks are missing and write them;
    ``ranges`` gets every batch's rows. Returns the batches forwarded and each written layer's shape."""
    world = current_world()
    pending: deque[tuple[int, str, list[str]]] = deque()

    def missing_batches() -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        start = 0
        bar = progress_bar(iterate_batches(split, batch_size), progress=progress if world.is_main else "never",
                           desc=f"extract {name}", leave=False)
        for index, (x, y) in enumerate(bar):
            stop = start + len(x)
            ranges.append((start, stop))
            if index % world.size == world.rank:
                digest = batch_digest(x, y)
                todo = [layer for layer in layers if not store.has_chunk(name, layer, keys[layer], start, stop, digest)]
                if todo:
                    pending.append((start, digest, todo))
                    yield x, y
            start = stop

    forwards, shapes = 0, {}
    for outputs, _ in forward_layers(model, layers, missing_batches(), device=device):
        start, digest, todo = pending.popleft()
        forwards += 1
        for layer in todo:
            block = outputs[layer]
            check_finite(block, layer)
            shapes[layer] = list(block.shape[1:])
            store.write_chunk(name, layer, keys[layer], start, block.reshape(len(block), -1).numpy(), digest)
    return forwards, shapes


def _version() -> str:
    try:
        return importlib.metadata.version("similarity-plugins")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _finish(store: Store, name: str, layer: str, key: str, ranges: list[tuple[int, int]], info: dict) -> None:
    """Write the manifest of one entry unless it already records exactly these chunks."""
    records = [store.chunk_record(name, layer, key, start, stop) for start, stop in ranges]
    try:
        current = store.entry(name, layer)
    except ValueError:
        current = None
    if current is not None and current["key"] == key and current["chunks"] == records:
        return
    if info["layer_shape"] is None and current is not None and current["key"] == key:
        info["layer_shape"] = current.get("layer_shape")
    store.finish(name, layer, key, ranges=ranges, sample_ids=np.arange(ranges[-1][1] if ranges else 0), info=info)
