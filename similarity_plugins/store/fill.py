"""Filling a store from a model: one forward pass per batch for all its layers, only where chunks are missing.

Each batch of the data split is one chunk per layer. Before a batch runs, each of its samples is digested (its
inputs, in every view, and its label: `sample_digests`); the batch's digest names its chunks, so a batch whose
chunks are all present with that digest is not forwarded: a second extraction runs no forward pass and an
interrupted one forwards only what it had not written. The entry's key covers the model's fingerprint (every
parameter, buffer and module setting), what it reads with (`reading_digest`: tokenizer, processor, pooling) and
the layer: a changed model gets a new entry and never the old activations. The manifest is written from the
chunks this run wrote or found for its own batch digests, so two runs on other data never mix an entry.
"""

from __future__ import annotations

import datetime
import importlib.metadata
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from ..networks.activations import check_finite, forward_layers
from ..networks.data import iterate_batches, split_size
from ..networks.parallel import current_world, module_digest
from ..networks.wrapped import WrappedModel, reading_digest, reading_settings
from ..utils.digest import fast_hash
from ..utils.progress import Progress, progress_bar
from .paths import StoreError, entry_key
from .store import Store
from .writing import finish_entry, found_chunks, write_chunk


def _feed_rows(hashes: list, label: str, x: Any) -> None:
    """Feed each sample of the batch ``x`` (a tensor, strings or a dict of views) into its own hash."""
    if isinstance(x, torch.Tensor):
        t = x.detach().contiguous().cpu()
        if t.dtype == torch.bfloat16:
            t = t.view(torch.int16)
        head = f"{label}|{x.dtype}|{tuple(x.shape[1:])}|".encode()
        rows = t.numpy().reshape(len(t), -1).view(np.uint8)
        for h, row in zip(hashes, rows):
            h.update(head)
            h.update(row)
    elif isinstance(x, dict):
        for name in sorted(x):
            _feed_rows(hashes, f"{label}.{name}", x[name])
    elif isinstance(x, (list, tuple)) and all(isinstance(t, str) for t in x):
        for h, text in zip(hashes, x):
            data = text.encode("utf-8", "surrogatepass")
            h.update(f"{label}|text|{len(data)}|".encode() + data)
    else:
        raise TypeError(f"cannot digest inputs of type {type(x).__name__}: give tensors, strings or a dict of views")


def sample_digests(x: Any, y: torch.Tensor) -> np.ndarray:
    """The (B, 2) uint64 digest of each sample of a batch: its inputs ``x`` (a (B, ...) tensor, B strings or a dict
    of such views; dtype, per-sample shape and exact bytes) and its label ``y[i]``."""
    labels = torch.as_tensor(y).reshape(-1).long().numpy()
    hashes = [fast_hash() for _ in range(len(labels))]
    _feed_rows(hashes, "x", x)
    for h, label in zip(hashes, labels):
        h.update(b"y|" + label.tobytes())
    return np.frombuffer(b"".join(h.digest() for h in hashes), dtype=np.uint64).reshape(len(labels), 2).copy()


def data_fingerprint(ids: np.ndarray, digests: np.ndarray | None) -> str | None:
    """A digest of an entry's samples that does not depend on their order: its (id, input digest) pairs sorted by
    id. None when the inputs are unknown (``put``)."""
    if digests is None:
        return None
    order = np.argsort(ids, kind="stable")
    return fast_hash(np.ascontiguousarray(ids[order]).tobytes() + np.ascontiguousarray(digests[order]).tobytes()
                     ).hexdigest()


@dataclass
class _Share:
    """What one rank did: samples forwarded and found, the chunk records and shapes per layer, the digests."""

    forwarded: int = 0
    found: int = 0
    records: dict[str, dict[int, dict]] = field(default_factory=dict)
    digests: dict[int, np.ndarray] = field(default_factory=dict)
    shapes: dict[str, list[int]] = field(default_factory=dict)
    stops: list[int] = field(default_factory=list)


def fill_model(store: Store, name: str, model: nn.Module, layers: list[str], split: Dataset | DataLoader, *,
               split_name: str = "test", batch_size: int = 256, device: torch.device | None = None,
               progress: Progress = "never") -> dict[str, Any]:
    """Write the entries (``name``, layer) of every layer in ``layers`` on ``split`` into ``store``.

    Args:
        store: the store written to.
        name: the model's name in the store.
        model: the network (never changed: eval mode and no gradients only for the pass, flags restored).
        layers: module names; each entry holds that layer's output flattened to (N, D) float32.
        split: a Dataset or DataLoader of ``(x, y)``, read in order; sample ``i`` gets the id ``i``.
        split_name: the split's name, recorded in each entry.
        batch_size: as for `extract_layers`.
        device: as for `extract_layers`.
        progress: a bar over the split's samples (as for `extract_layers`).

    Returns:
        ``{"forwarded": samples forwarded, "found": samples whose chunks were in the store, "data_fingerprint":
            the digest of the split's samples, "model_fingerprint": the model's}``, on all ranks together.

    Under torchrun every rank calls it with the same arguments: batch ``i`` is forwarded and written by rank
    ``i mod size``, and rank 0 writes each entry's manifest from every rank's chunk records. An error on one rank
    is raised on every rank.
    """
    fingerprint = module_digest([model])  # each weight hashed once per call
    settings = reading_settings(model)
    reads = reading_digest(model, settings)
    keys = {layer: entry_key(fingerprint, reads, layer) for layer in layers}
    world = current_world()
    shares = world.exchange(  # an error on one rank is raised on every rank
        lambda: _forward_missing(store, name, model, layers, keys, split, batch_size=batch_size, device=device,
                                 progress=progress), f"extracting model {name!r}")
    parts = sorted(((start, d) for s in shares for start, d in s.digests.items()), key=lambda p: p[0])
    digests = np.concatenate([d for _, d in parts])
    ids = np.arange(len(digests), dtype=np.int64)
    fingerprint_of_data = data_fingerprint(ids, digests)

    def write_manifests() -> None:
        produced = {"by": "similarity_plugins.extract", **provenance(model), "batch_size": batch_size,
                    "package": _version(), "torch": torch.__version__,
                    "written": datetime.datetime.now(datetime.timezone.utc).isoformat()}
        for order_, layer in enumerate(layers):
            records = {start: r for s in shares for start, r in s.records.get(layer, {}).items()}
            chunks = [records[start] for start in sorted(records)]
            shape = next((s.shapes[layer] for s in shares if layer in s.shapes), None)
            info = {"model_fingerprint": fingerprint, "reading": reads, "pooling": settings.get("pooling"),
                    "split": split_name, "order": order_, "layer_shape": shape, "data_fingerprint": fingerprint_of_data,
                    "produced_by": produced}
            _finish(store, name, layer, keys[layer], chunks, ids, digests, info)

    world.exchange(lambda: write_manifests() if world.is_main else None, f"writing model {name!r}'s manifests")
    return {"forwarded": sum(s.forwarded for s in shares), "found": sum(s.found for s in shares),
            "data_fingerprint": fingerprint_of_data, "model_fingerprint": fingerprint}


def provenance(model: nn.Module) -> dict:
    """What made an entry, beside the call: the model's class and, for a [`WrappedModel`][WrappedModel], what it
    declares of itself (`WrappedModel.provenance`: a wrapped Hugging Face model's class, source, tokenizer)."""
    return {"model_class": type(model).__name__, **(model.provenance() if isinstance(model, WrappedModel) else {})}


def _forward_missing(store: Store, name: str, model: nn.Module, layers: list[str], keys: dict[str, str],
                     split: Dataset | DataLoader, *, batch_size: int, device: torch.device | None,
                     progress: Progress) -> _Share:
    """Forward this rank's batches (batch i on rank ``i mod size``) whose chunks are missing and write them."""
    world = current_world()
    share = _Share(records={layer: {} for layer in layers})
    found = {layer: found_chunks(store, name, layer, keys[layer]) for layer in layers}
    pending: deque[tuple[int, str, list[str]]] = deque()
    bar = progress_bar(total=split_size(split), progress=progress if world.is_main else "never",
                       desc=f"extract {name}", unit="sample", leave=False)

    def missing_batches() -> Iterator[tuple[Any, torch.Tensor]]:
        start = 0
        for index, (x, y) in enumerate(iterate_batches(split, batch_size)):
            stop = start + len(y)
            if index % world.size == world.rank:
                digests = sample_digests(x, y)
                share.digests[start] = digests
                digest = fast_hash(digests.tobytes()).hexdigest()
                todo = []
                for layer in layers:
                    present = found[layer].get((start, stop, digest))
                    if present is None:
                        todo.append(layer)
                    else:
                        share.records[layer][start] = {"file": present, "start": start, "stop": stop}
                if todo:
                    pending.append((start, digest, todo))
                    yield x, y
                else:
                    share.found += stop - start
            bar.update(stop - start)
            start = stop

    try:
        for outputs, y in forward_layers(model, layers, missing_batches(), device=device):
            start, digest, todo = pending.popleft()
            share.forwarded += len(y)
            for layer in todo:
                block = outputs[layer]
                check_finite(block, layer)
                share.shapes[layer] = list(block.shape[1:])
                share.records[layer][start] = write_chunk(store, name, layer, keys[layer], start,
                                                          block.reshape(len(block), -1).numpy(), digest)
    finally:
        bar.close()
    return share


def _version() -> str:
    try:
        return importlib.metadata.version("similarity-plugins")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _samples_intact(store: Store, name: str, layer: str) -> bool:
    """Whether an entry's sample files are there and match their checksums (they are not fsync'ed: a crash of the
    machine may lose them, and the next ``extract`` writes them again)."""
    try:
        entry = store.load(name, layer)
        entry.sample_ids()
        entry.sample_digests()
    except StoreError:
        return False
    return True


def _finish(store: Store, name: str, layer: str, key: str, chunks: list[dict], ids: np.ndarray,
            digests: np.ndarray, info: dict) -> None:
    """Write the manifest of one entry unless it already records exactly these chunks and samples."""
    try:
        current = store.entry(name, layer)
    except StoreError:  # none, or damaged: written anew
        current = None
    same = (current is not None and current["key"] == key and current["chunks"] == chunks
            and current.get("data_fingerprint") == info["data_fingerprint"])
    if same and _samples_intact(store, name, layer):
        return
    if info["layer_shape"] is None and current is not None and current["key"] == key:
        info["layer_shape"] = current.get("layer_shape")
    finish_entry(store, name, layer, key, chunks=chunks, ids=ids, digests=digests, info=info)
