"""IRI sets on disk: the content-addressed cache (keys, atomic writes) and the ``.npz`` / ``.safetensors``
files that ``similarity-plugins iris`` writes.

A cache key is the SHA-256 of everything that determines a set: the front's weights (the bytes of every
parameter and buffer of the modules that run before the cut), those modules' classes and non-tensor settings
(``networks.fingerprint.module_config``: BatchNorm ``eps``, conv ``dilation``, pool ``padding``, ... and the traced
front's code), the layer name, the seeds' bytes, shape and dtype, and the settings. Each cache file carries a
digest of its contents, checked on load (``utils.digest``): a damaged file is a miss, warned "corrupt". Files
are written to a temporary file in the same directory, then moved into place with ``os.replace``, so a reader
never sees a half-written file and a killed run never leaves one behind under the final name.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
from typing import Any, Iterable

import numpy as np
import torch
from torch import nn

from ..networks.fingerprint import update_module_configs
from ..utils.digest import load_verified, save_verified, update_tensor_digest
from ..utils.extras import require
from .result import IRISet

FORMAT_VERSION = "iri-cache-2"   # 2: settings name the preset; module configurations in the key; verified contents


def fingerprint(named_tensors: Iterable[tuple[str, torch.Tensor]], layer: str, seeds: torch.Tensor,
                settings: dict[str, Any], modules: Iterable[tuple[str, nn.Module]] = ()) -> str:
    """Hex digest identifying an IRI set: weights (name, tensor) pairs, the class and non-tensor configuration
    of the ``modules`` (name, module) that run, layer, seeds and settings."""
    h = hashlib.sha256(FORMAT_VERSION.encode())
    for name, t in sorted(named_tensors, key=lambda item: item[0]):
        update_tensor_digest(h, "w:" + name, t)
    update_module_configs(h, modules)
    h.update(f"layer|{layer}|".encode())
    update_tensor_digest(h, "seeds", seeds)
    h.update(json.dumps(settings, sort_keys=True, default=str).encode())
    return h.hexdigest()


def atomic_save(obj: Any, path: str | os.PathLike, kind: str = "iri-set") -> None:
    """``torch.save(obj)`` to ``path`` atomically, with a digest of its contents (`save_verified`)."""
    save_verified(obj, path, kind)


def load_file(path: str | os.PathLike, kind: str = "iri-set") -> Any | None:
    """Load a file written by `atomic_save`; None (with a "corrupt" warning) unless it verifies."""
    return load_verified(path, kind)


def result_path(cache_dir: str | os.PathLike, key: str) -> str:
    """Where the finished IRI set with ``key`` lives."""
    return os.path.join(os.fspath(cache_dir), f"iris-{key}.pt")


def check_cache_dir(cache_dir: str | os.PathLike, needed_bytes: float = 0.0) -> None:
    """Refuse, before any IRI work, a cache folder where the set could not be saved: ``OSError`` naming the folder
    and why (a file where the folder should be, a folder that is not writable, a path too long for the file
    system, fewer than ``needed_bytes`` free on its disk), so that no finished work is lost at the end."""
    import shutil

    from ..utils.arrays import format_bytes
    from ..utils.io import unwritable_reason

    reason = unwritable_reason(checkpoint_path(cache_dir, "0" * 64))
    if reason is None and needed_bytes > 0:
        folder = os.path.abspath(os.fspath(cache_dir))
        while not os.path.exists(folder):
            folder = os.path.dirname(folder)
        free = shutil.disk_usage(folder).free
        if free < needed_bytes:
            reason = f"its disk has {format_bytes(free)} free, the IRI files need about {format_bytes(needed_bytes)}"
    if reason is not None:
        raise OSError(errno.EACCES, f"cannot use IRI cache folder {os.fspath(cache_dir)!r}: {reason}; give "
                      "another iri_cache_dir (cache_dir) or none", os.fspath(cache_dir))


def checkpoint_path(cache_dir: str | os.PathLike, key: str) -> str:
    """Where the checkpoint of an unfinished run with ``key`` lives."""
    return os.path.join(os.fspath(cache_dir), f"iris-{key}.ckpt.pt")


ARRAYS = ("inputs", "rel_error", "steps", "seed_distance")


def save_iris(iris: IRISet, path: str | os.PathLike, *, labels: torch.Tensor | None = None,
              seeds: torch.Tensor | None = None) -> str:
    """Save ``iris`` to ``path`` (``.npz`` or ``.safetensors``), atomically (temp file + rename).

    Arrays: ``inputs`` (N, ...) float32, ``rel_error`` (N,), ``steps`` (N,), ``seed_distance`` (N,),
    plus ``labels`` (N,) and ``seeds`` (N, ...) when given; the summary and settings go in as JSON
    (an array ``summary_json`` in .npz, the metadata in .safetensors). Returns the path.
    """
    path = os.fspath(path)
    arrays = {name: getattr(iris, name).detach().cpu().contiguous() for name in ARRAYS}
    if labels is not None:
        arrays["labels"] = labels.detach().cpu().long().contiguous()
    if seeds is not None:
        arrays["seeds"] = seeds.detach().cpu().contiguous()
    summary = json.dumps(dict(iris.summary), default=str)
    from ..utils.io import atomic_write

    if path.endswith(".safetensors"):
        save = require("safetensors.torch", "io", "writing .safetensors (.npz needs nothing more)").save
        with atomic_write(path) as fh:
            fh.write(save(arrays, metadata={"summary": summary}))
    elif path.endswith(".npz"):
        with atomic_write(path) as fh:
            np.savez(fh, summary_json=np.array(summary), **{k: v.numpy() for k, v in arrays.items()})
    else:
        raise ValueError(f"unknown IRI file type for {path!r}; use a .npz or .safetensors name")
    return path


def load_iris(path: str | os.PathLike) -> tuple[IRISet, dict]:
    """Read a file written by `save_iris`: returns ``(IRISet, extras)`` where extras may hold
    ``labels``, ``seeds`` and ``summary`` (the dict saved with it). `BadFile` (a ``ValueError``) naming the file
    when it cannot be read as one (damaged, another kind of file, an array or the summary missing)."""
    from ..utils.readback import BadFile

    path = os.fspath(path)
    try:
        tensors, summary = _read_iri_arrays(path)
    except (OSError, ValueError, KeyError, EOFError) as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        raise BadFile(f"IRI file {path!r} cannot be read ({type(exc).__name__}: {exc}); was it written by "
                      "similarity-plugins iris, and whole?") from None
    missing = [name for name in ARRAYS if name not in tensors]
    if missing or not isinstance(summary, dict):
        raise BadFile(f"IRI file {path!r} is not an IRI set: " + (f"the arrays {', '.join(missing)} are missing"
                      if missing else "its summary is not a JSON object"))
    iris = IRISet(*(tensors[name] for name in ARRAYS), settings=dict(summary.get("settings", {})))
    extras = {k: tensors[k] for k in ("labels", "seeds") if k in tensors}
    extras["summary"] = summary
    return iris, extras


def _read_iri_arrays(path: str) -> tuple[dict[str, torch.Tensor], Any]:
    """The arrays and the summary of an ``.npz`` or ``.safetensors`` IRI file, as they are."""
    if path.endswith(".safetensors"):
        safe_open = require("safetensors", "io", "reading .safetensors").safe_open
        with safe_open(path, framework="pt") as fh:
            tensors = {k: fh.get_tensor(k) for k in fh.keys()}
            summary = json.loads((fh.metadata() or {}).get("summary", "{}"))
    else:
        with np.load(path, allow_pickle=False) as npz:
            tensors = {k: torch.from_numpy(npz[k]) for k in npz.files if k != "summary_json"}
            summary = json.loads(str(npz["summary_json"])) if "summary_json" in npz.files else {}
    return tensors, summary
