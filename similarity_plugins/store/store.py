"""An activation store on disk: one entry per (model, layer), chunked ``.npy`` files named by their content.

Layout of a store folder ``STORE`` (`paths` holds the names and the checks that keep files inside it):

```text
STORE/store.json                       {"format": "similarity-plugins-store-2"}
STORE/<model>/<layer>/manifest.json    the entry: names, key, fingerprints, shape, dtype, samples, chunks, provenance
STORE/<model>/<layer>/<key>/<start>-<stop>-<inputs>-<checksum>.npy   rows start..stop-1, an (n_i, D) array
STORE/<model>/<layer>/<key>/ids-<checksum>.npy        (N,) int64: the sample id of each row
STORE/<model>/<layer>/<key>/digests-<checksum>.npy    (N, 2) uint64: each row's input digest (extracted entries)
```

``<model>`` and ``<layer>`` are the names quoted for the file system (`quote_name`). ``<key>`` is the entry's content
address: a digest of everything that makes its rows (`fill`). A chunk's name holds the digest of the inputs
it was made from and the checksum (XXH3-128) of its bytes, so two runs on other data never write one file. The
manifest is written once, from the chunks the writing run made or checked itself; until then an entry is partial
and `Store.load` refuses it. A chunk is verified against its checksum the first time it is read.
"""

from __future__ import annotations

import os
from typing import Any, Iterable, Iterator

import numpy as np

from ..utils.digest import fast_hash
from ..utils.io import atomic_write, json_text
from ..utils.text import how_to
from .manifest import checked_manifest
from .paths import (
    CHUNK,
    FORMAT,
    OLD_FORMATS,
    SAMPLES,
    CorruptChunk,
    StoreError,
    checked_folder,
    extract_again,
    key_folder,
    layer_folder,
    member,
    read_store_json,
)
from .put import put_entry


def file_checksum(path: str) -> str:
    """The checksum (`fast_hash`, hex) of a file's bytes, read in 4 MiB pieces."""
    h = fast_hash()
    with open(path, "rb") as fh:
        for piece in iter(lambda: fh.read(1 << 22), b""):
            h.update(piece)
    return h.hexdigest()


class StoredArray:
    """One entry's activations, shape (N, D), read chunk by chunk from memory-mapped files (never read whole).

    ``arr[i:j]`` and ``arr[idx]`` return NumPy copies of those rows; ``np.asarray(arr)`` reads everything;
    ``chunks()`` yields ``(start, block)`` with ``block`` a read-only memory map (n_i, D). Each chunk is checked
    against its checksum the first time it is touched (`CorruptChunk` names the file). ``model``, ``layer`` and
    ``store`` name the entry; `sample_ids` and `sample_digests` say which sample each row holds.
    """

    def __init__(self, store: Store, manifest: dict, folder: str) -> None:
        self.store, self.model, self.layer, self.manifest = store, manifest["model"], manifest["layer"], manifest
        self.folder, self._chunks = folder, manifest["chunks"]
        self.shape = (int(manifest["shape"][0]), int(manifest["shape"][1]))
        self.dtype = np.dtype(manifest["dtype"])
        self._starts = np.array([c["start"] for c in self._chunks], dtype=np.int64)
        self._verified: set[str] = set()

    def __len__(self) -> int:
        return self.shape[0]

    @property
    def nbytes(self) -> int:
        """Bytes of the whole array (N * D * itemsize)."""
        return self.shape[0] * self.shape[1] * self.dtype.itemsize

    @property
    def name(self) -> str:
        """``"model:layer"`` of the entry, for messages."""
        return f"{self.model}:{self.layer}"

    def _checked(self, name: str, pattern: Any) -> str:
        """The path of the entry's file ``name``, its bytes checked against the checksum in its name once."""
        path = member(self.folder, name, pattern, f"the manifest of {self.name} in {self.store.path}")
        if name not in self._verified:
            if not os.path.isfile(path):
                raise CorruptChunk(f"{path} is missing or not a file (removed or replaced after the entry was "
                                   f"written); {extract_again()}")
            if file_checksum(path) != pattern.fullmatch(name).groups()[-1]:
                raise CorruptChunk(f"{path} does not match its checksum (the file changed or is damaged); delete "
                                   f"it and {extract_again()}")
            self._verified.add(name)
        return path

    def _block(self, k: int) -> np.ndarray:
        chunk = self._chunks[k]
        path = self._checked(chunk["file"], CHUNK)
        block = np.load(path, mmap_mode="r", allow_pickle=False)
        if block.shape != (chunk["stop"] - chunk["start"], self.shape[1]) or block.dtype != self.dtype:
            raise CorruptChunk(f"chunk {path} holds {block.shape} {block.dtype}, its manifest says "
                               f"{(chunk['stop'] - chunk['start'], self.shape[1])} {self.dtype}; {extract_again()}")
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

    def sample_ids(self) -> np.ndarray:
        """The (N,) int64 sample id of each row, checked against its checksum."""
        path = self._checked(self.manifest["samples"]["ids"], SAMPLES["ids"])
        ids = np.load(path, allow_pickle=False)
        if ids.shape != (self.shape[0],) or ids.dtype.kind not in "iu":
            raise StoreError(f"{path} holds {ids.shape} {ids.dtype}, not ({self.shape[0]},) sample ids; "
                             f"{extract_again()}")
        return ids.astype(np.int64, copy=False)

    def sample_digests(self) -> np.ndarray | None:
        """The (N, 2) uint64 digest of each row's inputs and label (entries made by ``extract``), or None (``put``)."""
        name = self.manifest["samples"].get("digests")
        if name is None:
            return None
        digests = np.load(self._checked(name, SAMPLES["digests"]), allow_pickle=False)
        if digests.shape != (self.shape[0], 2) or digests.dtype != np.uint64:
            raise StoreError(f"the sample digests of {self.name} hold {digests.shape} {digests.dtype}; "
                             f"{extract_again()}")
        return digests

    def __repr__(self) -> str:
        return f"StoredArray({self.name!r}, shape={self.shape}, dtype={self.dtype}, chunks={len(self._chunks)})"


class Store:
    """A folder of activations: ``Store(path)`` opens one, ``Store.create(path)`` makes one (see the page *Extract
    once, score many*).

    ``models`` lists the model names, ``layers(model)`` a model's layers, ``load(model, layer)`` an entry's
    (N, D) [`StoredArray`][StoredArray], ``sample_ids(model, layer)`` its (N,) sample ids and ``entry(model,
    layer)`` its manifest (fingerprints, shape, dtype, samples, chunks and what produced it).
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = os.fspath(path)
        self._base = os.path.realpath(self.path)  # every folder the store uses must lead below it
        #: ``{model: {"forwarded": samples, "found": samples}}`` of the last ``extract`` call that returned this store
        self.extracted: dict[str, dict[str, int]] = {}
        marker = os.path.join(self.path, "store.json")
        if not os.path.isfile(marker):
            raise StoreError(f"{self.path} is not an activation store (no store.json); make one with "
                             + how_to("Store.create(path) or similarity_plugins.extract(..., store=path)",
                                      "similarity-plugins extract ... --store DIR"))
        fmt = read_store_json(marker, "store marker")
        fmt = fmt.get("format") if isinstance(fmt, dict) else None
        if fmt in OLD_FORMATS:
            raise StoreError(f"{self.path} holds a store of the earlier format {fmt!r}, whose keys and checksums this "
                             f"version ({FORMAT!r}) does not read; extract into a new folder, or delete this one")
        if fmt != FORMAT:
            raise StoreError(f"{marker} names the format {fmt!r}; this version reads {FORMAT!r}")

    @classmethod
    def create(cls, path: str | os.PathLike) -> Store:
        """Make a store folder at ``path`` (or open the store already there; a ``store.json`` that is not JSON is
        written again) and return it."""
        path = os.fspath(path)
        if os.path.exists(path) and not os.path.isdir(path):
            raise StoreError(f"{path} is a file; give a folder for the store")
        marker = os.path.join(path, "store.json")
        try:
            fresh = not os.path.isfile(marker) or read_store_json(marker, "store marker") is None
        except StoreError:
            fresh = True  # not JSON (damaged): the marker holds nothing else
        if fresh:
            with atomic_write(marker, "w", follow_links=False) as fh:
                fh.write(json_text({"format": FORMAT}))
        return cls(path)

    def __repr__(self) -> str:
        return f"Store({self.path!r})"

    # -- reading -------------------------------------------------------------------------------------------------
    def _folder(self, model: str, layer: str) -> str:
        return layer_folder(self.path, model, layer, self._base)

    def _read(self, path: str, model: str | None = None, layer: str | None = None) -> dict:
        return checked_manifest(read_store_json(path, "manifest"), path, model, layer)

    def _manifests(self) -> Iterator[dict]:
        for model_dir in sorted(os.listdir(self.path)):
            base = checked_folder(self.path, os.path.join(self.path, model_dir), self._base)
            if model_dir.startswith(".") or not os.path.isdir(base):
                continue
            for layer_dir in sorted(os.listdir(base)):
                path = os.path.join(checked_folder(self.path, os.path.join(base, layer_dir), self._base), "manifest.json")
                if os.path.isfile(path):
                    yield self._read(path)

    def contents(self) -> dict[str, list[str]]:
        """``{model: [layer, ...]}`` of every complete entry (models sorted, layers in the order they were extracted,
        then by name), each manifest read once."""
        found: dict[str, list[dict]] = {}
        for manifest in self._manifests():
            found.setdefault(manifest["model"], []).append(manifest)
        return {model: [m["layer"] for m in sorted(found[model], key=lambda m: (m.get("order", 0), m["layer"]))]
                for model in sorted(found)}

    @property
    def models(self) -> list[str]:
        """The names of the models with at least one complete entry, sorted."""
        return list(self.contents())

    def layers(self, model: str) -> list[str]:
        """The layers of ``model`` with a complete entry, in the order they were extracted (then by name)."""
        held = self.contents()
        if model not in held:
            raise StoreError(f"the store {self.path} holds no model {model!r}; it holds: {', '.join(held) or 'nothing'}")
        return held[model]

    def entry(self, model: str, layer: str) -> dict:
        """The manifest of the entry (model, layer): a dict with ``model``, ``layer``, ``key``,
        ``model_fingerprint``, ``data_fingerprint``, ``pooling``, ``shape`` (N, D), ``layer_shape`` (per
        sample), ``dtype``, ``samples``, ``chunks`` and ``produced_by``. Raises `StoreError` when there is none
        or it is damaged (naming the file)."""
        path = os.path.join(self._folder(model, layer), "manifest.json")
        if not os.path.isfile(path):
            layers = self.layers(model)  # raises naming the models when the model is unknown
            raise StoreError(f"the store {self.path} has no complete entry for model {model!r} at layer {layer!r}; "
                             f"it holds layers: {', '.join(layers)}")
        return self._read(path, model, layer)

    def load(self, model: str, layer: str) -> StoredArray:
        """The activations of ``model`` at ``layer``: a (N, D) [`StoredArray`][StoredArray], memory-mapped."""
        manifest = self.entry(model, layer)
        return StoredArray(self, manifest, key_folder(self.path, model, layer, manifest["key"], self._base))

    def sample_ids(self, model: str, layer: str) -> np.ndarray:
        """The (N,) int64 sample ids of an entry (row i holds sample ``ids[i]``)."""
        return self.load(model, layer).sample_ids()

    def put(self, model: str, layer: str, chunks: np.ndarray | Iterable[np.ndarray],
            sample_ids: np.ndarray | None = None, *, produced_by: dict | None = None) -> StoredArray:
        """Write an entry from activations made elsewhere: an (N, D) array or an iterable of (n_i, D) chunks.

        Args:
            model: the model's name the entry is stored under.
            layer: the layer's name (an entry already there for model and layer is replaced).
            chunks: an array (N, D) (or (N, ...), flattened per sample), or an iterable of such chunks.
            sample_ids: (N,) distinct integer ids of the rows; default ``0 .. N-1``. Entries are paired by these
                ids when they are compared.
            produced_by: what made the activations (free-form, JSON-serialisable), kept in the manifest.

        Returns:
            The entry as a [`StoredArray`][StoredArray].

        Raises:
            StoreError: no rows, chunks of different widths or dtypes, ids that are not one distinct integer per
                row, a name that cannot be a folder name (`quote_name`).
        """
        put_entry(self, model, layer, chunks, sample_ids, produced_by)
        return self.load(model, layer)
