"""On-disk cache of IRI sets and checkpoints: content-addressed keys and atomic writes.

A key is the SHA-256 of everything that determines a set: the front's weights (the bytes of every
parameter and buffer of the modules that run before the cut), the layer name, the seeds' bytes, shape
and dtype, and the settings. Files are written with ``torch.save`` to a temporary file in the same
directory, then moved into place with ``os.replace``, so a reader never sees a half-written file and a
killed run never leaves one behind under the final name.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any, Iterable

import torch

from ..core.parallel import update_digest

FORMAT_VERSION = "iri-cache-1"


def fingerprint(named_tensors: Iterable[tuple[str, torch.Tensor]], layer: str, seeds: torch.Tensor,
                settings: dict[str, Any]) -> str:
    """Hex digest identifying an IRI set: weights (name, tensor) pairs, layer, seeds and settings."""
    h = hashlib.sha256(FORMAT_VERSION.encode())
    for name, t in sorted(named_tensors, key=lambda item: item[0]):
        update_digest(h, "w:" + name, t)
    h.update(f"layer|{layer}|".encode())
    update_digest(h, "seeds", seeds)
    h.update(json.dumps(settings, sort_keys=True, default=str).encode())
    return h.hexdigest()


def atomic_save(obj: Any, path: str | os.PathLike) -> None:
    """``torch.save(obj)`` to ``path`` atomically (temp file in the same directory, then ``os.replace``)."""
    from ..utils.io import atomic_write

    with atomic_write(path) as f:
        torch.save(obj, f)


def load_file(path: str | os.PathLike) -> Any | None:
    """Load a file written by :func:`atomic_save` (``weights_only=True``); None if it is unreadable."""
    try:
        return torch.load(os.fspath(path), map_location="cpu", weights_only=True)
    except Exception:  # noqa: BLE001 - a corrupt or foreign file is a cache miss, not an error
        return None


def result_path(cache_dir: str | os.PathLike, key: str) -> str:
    """Where the finished IRI set with ``key`` lives."""
    return os.path.join(os.fspath(cache_dir), f"iris-{key}.pt")


def checkpoint_path(cache_dir: str | os.PathLike, key: str) -> str:
    """Where the checkpoint of an unfinished run with ``key`` lives."""
    return os.path.join(os.fspath(cache_dir), f"iris-{key}.ckpt.pt")
