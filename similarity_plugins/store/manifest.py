"""The check of an activation store's manifest before anything in it is used: its names, key, shape, dtype,
samples and chunks, so that a damaged or edited manifest is refused naming the file, never followed."""

from __future__ import annotations

from typing import Any

import numpy as np

from .paths import CHUNK, FORMAT, KEY, OLD_FORMATS, SAMPLES, StoreError, extract_again


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def checked_manifest(manifest: Any, path: str, model: str | None = None, layer: str | None = None) -> dict:
    """``manifest`` (read from ``path``) once it is checked: the format, the names (``model`` and ``layer`` when
    given: the entry asked for, so two names that share a folder on a case-insensitive file system are told
    apart), the key, shape (N >= 1, D >= 1), a numeric dtype, the sample files and chunks that cover rows
    0..N-1 in order, each a file name the store writes with the rows in its name.

    Raises:
        StoreError: naming ``path`` and the first problem.
    """
    def expect(ok: Any, problem: str) -> None:
        if not ok:
            raise StoreError(f"the manifest {path} {problem}; it was edited or damaged: {extract_again()}")

    expect(isinstance(manifest, dict), "is not a JSON object")
    if manifest.get("format") in OLD_FORMATS:
        raise StoreError(f"the manifest {path} was written by an earlier version (format {manifest['format']!r}); "
                         f"{extract_again()} into a new store folder")
    expect(manifest.get("format") == FORMAT, f"names the format {manifest.get('format')!r}, not {FORMAT!r}")
    expect(isinstance(manifest.get("model"), str) and isinstance(manifest.get("layer"), str), "names no model and layer")
    if model is not None and (manifest["model"], manifest["layer"]) != (model, layer):
        raise StoreError(f"the folder of {path} holds the entry of model {manifest['model']!r} at layer "
                         f"{manifest['layer']!r}, not of model {model!r} at layer {layer!r}: two names share one "
                         "folder (a file system that ignores case?); give one of them another name")
    expect(isinstance(manifest.get("key"), str) and KEY.fullmatch(manifest["key"]), "has no valid key")
    shape = manifest.get("shape")
    expect(isinstance(shape, list) and len(shape) == 2 and all(_count(v) and v > 0 for v in shape),
           f"has the shape {shape!r}, not [N, D] with N, D >= 1")
    try:
        dtype = np.dtype(manifest.get("dtype"))
    except TypeError:
        dtype = np.dtype(object)
    expect(dtype.kind in "fiu", f"has the dtype {manifest.get('dtype')!r}, not a numeric one")
    samples = manifest.get("samples")
    expect(isinstance(samples, dict) and isinstance(samples.get("ids"), str) and SAMPLES["ids"].fullmatch(samples["ids"])
           and (samples.get("digests") is None or (isinstance(samples["digests"], str)
                                                   and SAMPLES["digests"].fullmatch(samples["digests"]))),
           "names no valid sample files")
    chunks = manifest.get("chunks")
    expect(isinstance(chunks, list) and chunks, "lists no chunks")
    start = 0
    for chunk in chunks:
        name = chunk.get("file") if isinstance(chunk, dict) else None
        match = CHUNK.fullmatch(name) if isinstance(name, str) else None
        expect(match, f"names {name!r}, which is not a chunk file of this store")
        expect(chunk.get("start") == start == int(match[1]) and chunk.get("stop") == int(match[2]) > start,
               f"lists the chunk {name} for rows {chunk.get('start')!r}..{chunk.get('stop')!r}, where rows "
               f"{start}.. come next")
        start = chunk["stop"]
    expect(start == shape[0], f"has chunks of {start} rows for a shape of {shape[0]} rows")
    return manifest


def manifest_files(manifest: dict) -> list[str]:
    """The names of the files in its key folder that a checked manifest uses: chunks and sample files."""
    samples = [manifest["samples"][k] for k in ("ids", "digests") if manifest["samples"].get(k)]
    return [c["file"] for c in manifest["chunks"]] + samples
