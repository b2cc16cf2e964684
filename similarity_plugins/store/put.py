"""``Store.put``: an entry from activations made elsewhere, written chunk by chunk as they come."""

from __future__ import annotations

import os
import shutil
import uuid
from typing import Any, Iterable

import numpy as np

from ..utils.digest import fast_hash
from .paths import StoreError, entry_key, key_folder
from .writing import finish_entry, write_chunk


def put_entry(store: Any, model: str, layer: str, chunks: np.ndarray | Iterable[np.ndarray],
              sample_ids: np.ndarray | None, produced_by: dict | None) -> None:
    """`Store.put` on ``store``: write the chunks as they come into a staging folder, then move it to its key (a
    digest of the rows and ids) and write the manifest."""
    if isinstance(chunks, np.ndarray) or hasattr(chunks, "shape"):
        chunks = [chunks]
    staging = f".put-{uuid.uuid4().hex}"
    digest, records, kinds, start = fast_hash(), [], set(), 0
    folder = key_folder(store.path, model, layer, staging)
    try:
        for block in chunks:  # each chunk is written as it comes: an iterable is never held whole
            block = np.asarray(block)
            block = block.reshape(len(block), int(np.prod(block.shape[1:])))
            kinds.add((block.shape[1], str(block.dtype)))
            if len(kinds) > 1:
                raise StoreError(f"put({model!r}, {layer!r}): every chunk must have the same width and dtype, got "
                                 f"{sorted(kinds)}")
            if block.dtype.kind not in "fiu":
                raise StoreError(f"put({model!r}, {layer!r}): activations must be numbers, got dtype {block.dtype}")
            if len(block):
                digest.update(f"{block.dtype}|{block.shape}|".encode())
                digest.update(np.ascontiguousarray(block).reshape(-1).view(np.uint8))
                records.append(write_chunk(store, model, layer, staging, start, block, "0" * 32))
            start += len(block)
        if not records:
            raise StoreError(f"put({model!r}, {layer!r}) got no rows; give an (N, D) array or (n_i, D) chunks with "
                             "N >= 1")
        ids = _checked_ids(sample_ids, start)
        digest.update(b"ids|" + ids.tobytes())
        key = entry_key("put", digest.hexdigest(), layer)
        target = key_folder(store.path, model, layer, key)
        _move(folder, target)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    finish_entry(store, model, layer, key, chunks=records, ids=ids, digests=None,
                 info={"model_fingerprint": None, "reading": None, "pooling": None, "layer_shape": [next(iter(kinds))[0]],
                       "data_fingerprint": None, "produced_by": produced_by or {"by": "Store.put"}})


def _checked_ids(sample_ids: Any, n: int) -> np.ndarray:
    """``sample_ids`` as (n,) distinct int64 ids (default ``0 .. n-1``); `StoreError` naming the problem."""
    if sample_ids is None:
        return np.arange(n, dtype=np.int64)
    ids = np.asarray(sample_ids)
    if ids.shape != (n,):
        raise StoreError(f"sample_ids has shape {ids.shape}, expected ({n},): one id per row")
    if ids.dtype.kind not in "iu" and not (ids.dtype.kind == "f" and np.array_equal(ids, np.round(ids))):
        raise StoreError(f"sample_ids must be integers, got dtype {ids.dtype}")
    ids = ids.astype(np.int64)
    if len(np.unique(ids)) != n:
        raise StoreError(f"sample_ids repeats {n - len(np.unique(ids))} id(s); each row needs its own sample id")
    return ids


def _move(folder: str, target: str) -> None:
    """Move the staging ``folder`` to ``target``. A target already there holds the same rows (same key): each file is
    moved over its namesake, so a file that was removed, damaged or replaced by a link is written again."""
    if not os.path.isdir(target):
        try:
            os.replace(folder, target)
            return
        except OSError:
            if not os.path.isdir(target):  # not another writer's same entry landing first
                raise
    for name in os.listdir(folder):
        os.replace(os.path.join(folder, name), os.path.join(target, name))
