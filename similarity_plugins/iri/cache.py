"""On-disk cache of IRI sets and checkpoints: content-addressed keys and atomic writes.

A key is the SHA-256 of everything that determines a set: the front's weights (the bytes of every
parameter and buffer of the modules that run before the cut), those modules' classes and non-tensor settings
(``core.fingerprint.module_config``: BatchNorm ``eps``, conv ``dilation``, pool ``padding``, ... and the traced
front's code), the layer name, the seeds' bytes, shape and dtype, and the settings. Each file carries a digest
of its contents, checked on load (``utils.digest``): a damaged file is a miss, warned "corrupt".
Files are written with ``torch.save`` to a temporary file in the same
directory, then moved into place with ``os.replace``, so a reader never sees a half-written file and a
killed run never leaves one behind under the final name.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any, Iterable

import torch
from torch import nn

from ..core.fingerprint import update_module_configs
from ..core.parallel import update_digest
from ..utils.digest import load_verified, save_verified

FORMAT_VERSION = "iri-cache-2"   # 2: module configurations in the key, contents verified on load


def fingerprint(named_tensors: Iterable[tuple[str, torch.Tensor]], layer: str, seeds: torch.Tensor,
                settings: dict[str, Any], modules: Iterable[tuple[str, nn.Module]] = ()) -> str:
    """Hex digest identifying an IRI set: weights (name, tensor) pairs, the class and non-tensor configuration
    of the ``modules`` (name, module) that run, layer, seeds and settings."""
    h = hashlib.sha256(FORMAT_VERSION.encode())
    for name, t in sorted(named_tensors, key=lambda item: item[0]):
        update_digest(h, "w:" + name, t)
    update_module_configs(h, modules)
    h.update(f"layer|{layer}|".encode())
    update_digest(h, "seeds", seeds)
    h.update(json.dumps(settings, sort_keys=True, default=str).encode())
    return h.hexdigest()


def atomic_save(obj: Any, path: str | os.PathLike, kind: str = "iri-set") -> None:
    """``torch.save(obj)`` to ``path`` atomically, with a digest of its contents (:func:`~..utils.digest.save_verified`)."""
    save_verified(obj, path, kind)


def load_file(path: str | os.PathLike, kind: str = "iri-set") -> Any | None:
    """Load a file written by :func:`atomic_save`; None (with a "corrupt" warning) unless it verifies."""
    return load_verified(path, kind)


def result_path(cache_dir: str | os.PathLike, key: str) -> str:
    """Where the finished IRI set with ``key`` lives."""
    return os.path.join(os.fspath(cache_dir), f"iris-{key}.pt")


def checkpoint_path(cache_dir: str | os.PathLike, key: str) -> str:
    """Where the checkpoint of an unfinished run with ``key`` lives."""
    return os.path.join(os.fspath(cache_dir), f"iris-{key}.ckpt.pt")
