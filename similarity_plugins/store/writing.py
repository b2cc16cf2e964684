"""Writing an entry of the store: the chunk files already written, a chunk file named by its rows, its inputs'
digest and its checksum, and the manifest that commits the entry (and removes the files of the one it replaces).
`fill` (``extract``) and `put` write through these functions; `Store` itself only reads."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import uuid
from typing import Any, BinaryIO, Callable

import numpy as np

from ..utils.digest import FAST_HASH, fast_hash
from ..utils.io import atomic_write, json_text
from .manifest import checked_manifest, manifest_files
from .paths import CHUNK, FORMAT, StoreError, chunk_file, extract_again, key_folder, layer_folder, read_store_json


def write_npy(fh: BinaryIO, array: np.ndarray) -> str:
    """Write ``array`` to the binary file ``fh`` as ``np.save`` does (``.npy`` version 1.0) and return the checksum
    (`fast_hash`, hex) of the bytes written, computed from memory as they are written (no second read)."""
    array = np.ascontiguousarray(array)
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, np.lib.format.header_data_from_array_1_0(array))
    h = fast_hash(header.getvalue())
    fh.write(header.getvalue())
    if array.size:
        data = array.reshape(-1).view(np.uint8)
        h.update(data)
        fh.write(data)
    return h.hexdigest()


def write_named(folder: str, array: np.ndarray, name_of: Callable[[str], str], durable: bool = True) -> str:
    """Write ``array`` as ``.npy`` into ``folder`` under the name ``name_of(checksum)``, atomically (one fsync unless
    ``durable`` is false; a link already at that name is replaced, never followed); returns the name."""
    staging = os.path.join(folder, f".writing-{uuid.uuid4().hex}.npy")
    with atomic_write(staging, follow_links=False, durable=durable) as fh:
        name = name_of(write_npy(fh, array))
    try:
        os.replace(staging, os.path.join(folder, name))
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(staging)
        raise
    return name


def found_chunks(store: Any, model: str, layer: str, key: str) -> dict[tuple[int, int, str], str]:
    """The chunk files of entry ``key`` of (model, layer) in ``store`` already written: ``{(start, stop, input
    digest): file name}``."""
    folder = key_folder(store.path, model, layer, key)
    found = {}
    for name in os.listdir(folder) if os.path.isdir(folder) else ():
        path = os.path.join(folder, name)
        match = CHUNK.fullmatch(name)
        if match and os.path.isfile(path) and not os.path.islink(path):  # the store writes plain files only
            found[(int(match[1]), int(match[2]), match[3])] = name
    return found

def write_chunk(store: Any, model: str, layer: str, key: str, start: int, block: np.ndarray, data_digest: str) -> dict:
    """Write rows ``start .. start+len(block)-1`` (an (n_i, D) array) of entry ``key``, made from inputs with
    ``data_digest``: a file named by its rows, that digest and its checksum (one fsync). Returns its record."""
    stop = start + len(block)
    name = write_named(key_folder(store.path, model, layer, key), block, lambda s: chunk_file(start, stop, data_digest, s))
    return {"file": name, "start": int(start), "stop": int(stop)}

def write_samples(folder: str, ids: np.ndarray, digests: np.ndarray | None) -> dict:
    """Write the sample ids (N,) and, when given, the per-row input digests (N, 2) into ``folder``, each named
    by its checksum; their names for the manifest. Not fsync'ed: the manifest is the entry's one commit point
    and these are checked on read and written again by ``extract`` when lost."""
    return {"ids": write_named(folder, np.asarray(ids, dtype=np.int64), lambda s: f"ids-{s}.npy", durable=False),
            "digests": None if digests is None else write_named(folder, digests, lambda s: f"digests-{s}.npy",
                                                                durable=False)}

def finish_entry(store: Any, model: str, layer: str, key: str, *, chunks: list[dict], ids: np.ndarray,
           digests: np.ndarray | None, info: dict) -> dict:
    """Write the manifest of entry ``key`` from ``chunks`` (the records of the files this run wrote or checked,
    in row order) and remove the files of the entry it replaces. Returns the manifest."""
    folder = key_folder(store.path, model, layer, key)
    first = np.load(os.path.join(folder, chunks[0]["file"]), mmap_mode="r", allow_pickle=False)
    manifest = {"format": FORMAT, "hash": FAST_HASH, "model": model, "layer": layer, "key": key,
                "shape": [int(chunks[-1]["stop"]), int(first.shape[1])], "dtype": str(first.dtype),
                "samples": write_samples(folder, ids, digests), "chunks": chunks, **info}
    path = os.path.join(layer_folder(store.path, model, layer), "manifest.json")
    try:
        previous = checked_manifest(read_store_json(path, "manifest"), path, model, layer) if os.path.isfile(path) else None
    except StoreError:
        previous = None  # damaged: replaced, and its files left where they are
    with atomic_write(path, "w", follow_links=False) as fh:
        fh.write(json_text(manifest))
    if previous is not None:
        _remove_replaced(store, model, layer, previous, manifest)
    missing = [f for f in manifest_files(manifest) if not os.path.exists(os.path.join(folder, f))]
    if missing:
        raise StoreError(f"another process replaced the entry {model}:{layer} while this one was written "
                         f"({missing[0]} is gone); {extract_again()}")
    return manifest

def _remove_replaced(store: Any, model: str, layer: str, previous: dict, manifest: dict) -> None:
    """Remove the files of the ``previous`` manifest that ``manifest`` does not use (its whole folder when the
    key changed); only names the store writes, inside the entry's folder."""
    old = key_folder(store.path, model, layer, previous["key"])
    if previous["key"] != manifest["key"]:
        if os.path.isdir(old) and not os.path.islink(old):
            shutil.rmtree(old, ignore_errors=True)
        return
    for name in set(manifest_files(previous)) - set(manifest_files(manifest)):
        try:
            os.unlink(os.path.join(old, name))
        except OSError:
            pass
