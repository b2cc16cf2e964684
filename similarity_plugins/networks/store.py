"""An activation store on disk: one entry per (model, layer), chunked ``.npy`` files with a checksum each.

Layout of a store folder ``STORE`` (every file written atomically with `atomic_write`):

```text
STORE/store.json                         {"format": "similarity-plugins-store-1"}
STORE/<model>/<layer>/manifest.json      the entry: names, key, fingerprints, shape, dtype, chunks, provenance
STORE/<model>/<layer>/<key>/<start>-<stop>.npy    rows start..stop-1, an (n_i, D) array (NumPy format)
STORE/<model>/<layer>/<key>/<start>-<stop>.json   that chunk's SHA-256 and data digest, written after it
```

``<model>`` and ``<layer>`` are the names, percent-quoted for the file system. ``<key>`` is the entry's content
address: a digest of the model's fingerprint, the layer and the pooling. The manifest is written once, when
every chunk is present; until then an entry is partial and `Store.load` refuses it. A chunk is verified
against its SHA-256 the first time it is read; a mismatch raises `CorruptChunk` naming the file.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import urllib.parse
import uuid
from typing import Any, BinaryIO, Iterable, Iterator

import numpy as np

from ..utils.io import atomic_write, write_json

__all__ = ["Store", "StoredArray", "CorruptChunk", "StoreError"]

FORMAT = "similarity-plugins-store-1"


class StoreError(ValueError):
    """A store entry that is missing, partial or does not match what was asked for."""


class CorruptChunk(StoreError):
    """A chunk file whose bytes do not match the checksum recorded when it was written."""


def _quote(name: str) -> str:
    return urllib.parse.quote(name, safe="._-") or "%00"


def chunk_name(start: int, stop: int) -> str:
    """The file stem of the chunk holding rows ``start .. stop-1``."""
    return f"{start:012d}-{stop:012d}"


def file_sha256(path: str) -> str:
    """SHA-256 (hex) of a file's bytes, read in 4 MiB pieces."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for piece in iter(lambda: fh.read(1 << 22), b""):
            h.update(piece)
    return h.hexdigest()


def write_npy(fh: BinaryIO, array: np.ndarray) -> str:
    """Write ``array`` to the binary file ``fh`` as ``np.save`` does (``.npy`` version 1.0) and return the SHA-256
    (hex) of the bytes written, computed from memory as they are written (no second read of the file)."""
    array = np.ascontiguousarray(array)
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, np.lib.format.header_data_from_array_1_0(array))
    h = hashlib.sha256(header.getvalue())
    fh.write(header.getvalue())
    if array.size:
        data = array.reshape(-1).view(np.uint8)
        h.update(data)
        fh.write(data)
    return h.hexdigest()


def entry_key(model_fingerprint: str, layer: str, pooling: str | None) -> str:
    """The content address of an entry: 24 hex digits of SHA-256 over the model fingerprint, layer and pooling."""
    text = json.dumps([FORMAT, model_fingerprint, layer, pooling])
    return hashlib.sha256(text.encode()).hexdigest()[:24]


class StoredArray:
    """One entry's activations, shape (N, D), read chunk by chunk from memory-mapped files (never read whole).

    ``arr[i:j]`` and ``arr[idx]`` return NumPy copies of those rows; ``np.asarray(arr)`` reads everything;
    ``chunks()`` yields ``(start, block)`` with ``block`` a read-only memory map (n_i, D). Each chunk is checked
    against its SHA-256 the first time it is touched (`CorruptChunk` names the file).
    """

    def __init__(self, folder: str, chunks: list[dict], shape: tuple[int, int], dtype: str) -> None:
        self.folder, self._chunks = folder, chunks
        self.shape, self.dtype = (int(shape[0]), int(shape[1])), np.dtype(dtype)
        self._starts = np.array([c["start"] for c in chunks], dtype=np.int64)
        self._verified: set[int] = set()

    def __len__(self) -> int:
        return self.shape[0]

    @property
    def nbytes(self) -> int:
        """Bytes of the whole array (N * D * itemsize)."""
        return self.shape[0] * self.shape[1] * self.dtype.itemsize

    def _block(self, k: int) -> np.ndarray:
        chunk = self._chunks[k]
        path = os.path.join(self.folder, chunk["file"])
        if k not in self._verified:
            if not os.path.exists(path):
                raise CorruptChunk(f"chunk {path} is missing; run extract again to rewrite it")
            if file_sha256(path) != chunk["sha256"]:
                raise CorruptChunk(f"chunk {path} does not match its checksum (the file changed or is damaged); "
                                   "delete it and run extract again to rewrite it")
            self._verified.add(k)
        block = np.load(path, mmap_mode="r")
        if block.shape != (chunk["stop"] - chunk["start"], self.shape[1]) or block.dtype != self.dtype:
            raise CorruptChunk(f"chunk {path} holds {block.shape} {block.dtype}, expected "
                               f"{(chunk['stop'] - chunk['start'], self.shape[1])} {self.dtype}")
        return block

    def chunks(self) -> Iterator[tuple[int, np.ndarray]]:
        """``(start, block)`` for every chunk in row order; ``block`` is (n_i, D), memory-mapped, read-only."""
        for k, chunk in enumerate(self._chunks):
            yield chunk["start"], self._block(k)

    def __getitem__(self, index: Any) -> np.ndarray:
        if isinstance(index, slice):
            start, stop, step = index.indices(self.shape[0])
            rows = np.arange(start, stop, step)
        else:
            rows = np.asarray(index)
            if rows.ndim == 0:
                return self[rows.reshape(1)][0]
            if rows.dtype == bool:
                rows = np.flatnonzero(rows)
            rows = np.where(rows < 0, rows + self.shape[0], rows)
        out = np.empty((len(rows), self.shape[1]), dtype=self.dtype)
        owner = np.searchsorted(self._starts, rows, side="right") - 1
        for k in np.unique(owner):
            mask = owner == k
            out[mask] = self._block(int(k))[rows[mask] - self._chunks[k]["start"]]
        return out

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        whole = self[:]
        return whole if dtype is None else whole.astype(dtype)

    def __repr__(self) -> str:
        return f"StoredArray(shape={self.shape}, dtype={self.dtype}, chunks={len(self._chunks)})"


class Store:
    """A folder of activations: ``Store(path)`` opens one, ``Store.create(path)`` makes one (see module docstring).

    ``models`` lists the model names, ``layers(model)`` a model's layers, ``load(model, layer)`` an entry's
    (N, D) [`StoredArray`][StoredArray], ``sample_ids(model, layer)`` its (N,) sample ids and ``entry(model,
    layer)`` its manifest (fingerprints, shape, dtype, chunks and what produced it).
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = os.fspath(path)
        marker = os.path.join(self.path, "store.json")
        if not os.path.exists(marker):
            raise StoreError(f"{self.path} is not an activation store (no store.json); make one with "
                             "Store.create(path) or similarity_plugins.extract(..., store=path)")
        with open(marker, encoding="utf-8") as fh:
            fmt = json.load(fh).get("format")
        if fmt != FORMAT:
            raise StoreError(f"{self.path} holds a store of format {fmt!r}; this version reads {FORMAT!r}")

    @classmethod
    def create(cls, path: str | os.PathLike) -> Store:
        """Make a store folder at ``path`` (or open the store already there) and return it."""
        marker = os.path.join(os.fspath(path), "store.json")
        if os.path.exists(os.fspath(path)) and not os.path.isdir(os.fspath(path)):
            raise StoreError(f"{os.fspath(path)} is a file; give a folder for the store")
        if not os.path.exists(marker):
            write_json(marker, {"format": FORMAT})
        return cls(path)

    def __repr__(self) -> str:
        return f"Store({self.path!r})"

    # -- reading -------------------------------------------------------------------------------------------------
    def _folder(self, model: str, layer: str) -> str:
        return os.path.join(self.path, _quote(model), _quote(layer))

    def _manifests(self) -> Iterator[dict]:
        for model_dir in sorted(os.listdir(self.path)):
            base = os.path.join(self.path, model_dir)
            if not os.path.isdir(base):
                continue
            for layer_dir in sorted(os.listdir(base)):
                path = os.path.join(base, layer_dir, "manifest.json")
                if os.path.exists(path):
                    with open(path, encoding="utf-8") as fh:
                        yield json.load(fh)

    @property
    def models(self) -> list[str]:
        """The names of the models with at least one complete entry, sorted."""
        return sorted({m["model"] for m in self._manifests()})

    def layers(self, model: str) -> list[str]:
        """The layers of ``model`` with a complete entry, in the order they were extracted (then by name)."""
        found = [m for m in self._manifests() if m["model"] == model]
        if not found:
            raise StoreError(f"the store {self.path} holds no model {model!r}; it holds: "
                             f"{', '.join(self.models) or 'nothing'}")
        return [m["layer"] for m in sorted(found, key=lambda m: (m.get("order", 0), m["layer"]))]

    def entry(self, model: str, layer: str) -> dict:
        """The manifest of the entry (model, layer): a dict with ``model``, ``layer``, ``key``,
        ``model_fingerprint``, ``data_fingerprint``, ``pooling``, ``shape`` (N, D), ``layer_shape`` (per
        sample), ``dtype``, ``chunks`` and ``produced_by``. Raises `StoreError` when there is none."""
        path = os.path.join(self._folder(model, layer), "manifest.json")
        if not os.path.exists(path):
            layers = self.layers(model)  # raises naming the models when the model is unknown
            raise StoreError(f"the store {self.path} has no complete entry for model {model!r} at layer {layer!r}; "
                             f"it holds layers: {', '.join(layers)}")
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)

    def load(self, model: str, layer: str) -> StoredArray:
        """The activations of ``model`` at ``layer``: a (N, D) [`StoredArray`][StoredArray], memory-mapped."""
        manifest = self.entry(model, layer)
        folder = os.path.join(self._folder(model, layer), manifest["key"])
        return StoredArray(folder, manifest["chunks"], tuple(manifest["shape"]), manifest["dtype"])

    def sample_ids(self, model: str, layer: str) -> np.ndarray:
        """The (N,) int64 sample ids of an entry (row i holds sample ``ids[i]``)."""
        manifest = self.entry(model, layer)
        return np.load(os.path.join(self._folder(model, layer), manifest["key"], "sample_ids.npy"))

    # -- writing -------------------------------------------------------------------------------------------------
    def entry_folder(self, model: str, layer: str, key: str) -> str:
        """The folder of the chunks of entry ``key`` of (model, layer)."""
        return os.path.join(self._folder(model, layer), key)

    def has_chunk(self, model: str, layer: str, key: str, start: int, stop: int, data_digest: str | None) -> bool:
        """Whether the chunk of rows start..stop-1 of entry ``key`` is written (and, when given, was made from
        data with ``data_digest``)."""
        side = os.path.join(self.entry_folder(model, layer, key), chunk_name(start, stop) + ".json")
        if not os.path.exists(side):
            return False
        with open(side, encoding="utf-8") as fh:
            record = json.load(fh)
        return data_digest is None or record.get("data_digest") == data_digest

    def chunk_record(self, model: str, layer: str, key: str, start: int, stop: int) -> dict:
        """The checksum record of the chunk of rows start..stop-1 of entry ``key`` (written after its file)."""
        side = os.path.join(self.entry_folder(model, layer, key), chunk_name(start, stop) + ".json")
        with open(side, encoding="utf-8") as fh:
            return json.load(fh)

    def write_chunk(self, model: str, layer: str, key: str, start: int, block: np.ndarray,
                    data_digest: str | None = None) -> dict:
        """Write rows ``start .. start+len(block)-1`` (an (n_i, D) array) of entry ``key``: the ``.npy`` file, then
        its checksum record, each atomically. Returns the chunk record."""
        folder = self.entry_folder(model, layer, key)
        stem = chunk_name(start, start + len(block))
        path = os.path.join(folder, stem + ".npy")
        with atomic_write(path) as fh:
            checksum = write_npy(fh, block)
        record = {"file": stem + ".npy", "start": int(start), "stop": int(start + len(block)),
                  "sha256": checksum, "data_digest": data_digest}
        write_json(os.path.join(folder, stem + ".json"), record)
        return record

    def finish(self, model: str, layer: str, key: str, *, ranges: list[tuple[int, int]], sample_ids: np.ndarray,
               info: dict) -> dict:
        """Write the manifest of entry ``key`` once all its chunks (``ranges``, in row order) are written, and
        remove the chunks of any earlier entry of (model, layer). Returns the manifest."""
        folder = self.entry_folder(model, layer, key)
        chunks = [self.chunk_record(model, layer, key, start, stop) for start, stop in ranges]
        first = np.load(os.path.join(folder, chunks[0]["file"]), mmap_mode="r")
        n = ranges[-1][1] if ranges else 0
        with atomic_write(os.path.join(folder, "sample_ids.npy")) as fh:
            np.save(fh, np.asarray(sample_ids, dtype=np.int64))
        data_fp = hashlib.sha256("".join(str(c.get("data_digest")) for c in chunks).encode()).hexdigest()
        manifest = {"format": FORMAT, "model": model, "layer": layer, "key": key, "shape": [n, int(first.shape[1])],
                    "dtype": str(first.dtype), "data_fingerprint": data_fp, "chunks": chunks, **info}
        path = os.path.join(self._folder(model, layer), "manifest.json")
        previous = None
        if os.path.exists(path):
            with open(path, encoding="utf-8") as fh:
                previous = json.load(fh).get("key")
        write_json(path, manifest)
        if previous not in (None, key):  # the entry it replaces
            shutil.rmtree(self.entry_folder(model, layer, previous), ignore_errors=True)
        return manifest

    def put(self, model: str, layer: str, chunks: np.ndarray | Iterable[np.ndarray],
            sample_ids: np.ndarray | None = None, *, produced_by: dict | None = None) -> StoredArray:
        """Write an entry from activations made elsewhere: an (N, D) array or an iterable of (n_i, D) chunks.

        Args:
            model: the model's name the entry is stored under.
            layer: the layer's name (an entry already there for model and layer is replaced).
            chunks: an array (N, D) (or (N, ...), flattened per sample), or an iterable of such chunks.
            sample_ids: (N,) integer ids of the rows; default ``0 .. N-1``.
            produced_by: what made the activations (free-form, JSON-serialisable), kept in the manifest.

        Returns:
            The entry as a [`StoredArray`][StoredArray].
        """
        if isinstance(chunks, np.ndarray) or hasattr(chunks, "shape"):
            chunks = [chunks]
        staging = f".put-{uuid.uuid4().hex}"
        digest, ranges, kinds, start = hashlib.sha256(), [], set(), 0
        try:
            for block in chunks:  # each chunk is written as it comes: an iterable is never held whole
                block = np.asarray(block)
                block = block.reshape(len(block), -1)
                kinds.add((block.shape[1], str(block.dtype)))
                if len(kinds) > 1:
                    raise StoreError(f"put({model!r}, {layer!r}): every chunk must have the same width and dtype, "
                                     f"got {sorted(kinds)}")
                digest.update(f"{block.dtype}|{block.shape}|".encode())
                digest.update(np.ascontiguousarray(block).tobytes())
                if len(block):
                    self.write_chunk(model, layer, staging, start, block)
                    ranges.append((start, start + len(block)))
                start += len(block)
            if not ranges:
                raise StoreError(f"put({model!r}, {layer!r}) got no rows; give an (N, D) array or (n_i, D) chunks")
            ids = np.arange(start) if sample_ids is None else np.asarray(sample_ids)
            if ids.shape != (start,):
                raise StoreError(f"sample_ids has shape {ids.shape}, expected ({start},): one id per row")
            key = entry_key("put:" + digest.hexdigest(), layer, None)
            target = self.entry_folder(model, layer, key)
            if not os.path.isdir(target):  # a key names its contents: an entry already there is this one
                try:
                    os.replace(self.entry_folder(model, layer, staging), target)
                except OSError:
                    if not os.path.isdir(target):  # not another writer's same entry landing first
                        raise
        finally:
            shutil.rmtree(self.entry_folder(model, layer, staging), ignore_errors=True)
        self.finish(model, layer, key, ranges=ranges, sample_ids=ids,
                    info={"model_fingerprint": None, "pooling": None, "layer_shape": [next(iter(kinds))[0]],
                          "produced_by": produced_by or {"by": "Store.put"}})
        return self.load(model, layer)
