"""Write and read IRI sets as ``.npz`` (NumPy) or ``.safetensors`` files."""

from __future__ import annotations

import json
import os

import numpy as np
import torch

from .result import IRISet

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
        try:
            from safetensors.torch import save
        except ImportError as exc:
            raise ValueError("writing .safetensors needs the safetensors package: pip install "
                             "'similarity-plugins[io]', or write .npz instead") from exc
        with atomic_write(path) as fh:
            fh.write(save(arrays, metadata={"summary": summary}))
    elif path.endswith(".npz"):
        with atomic_write(path) as fh:
            np.savez(fh, summary_json=np.array(summary), **{k: v.numpy() for k, v in arrays.items()})
    else:
        raise ValueError(f"unknown IRI file type for {path!r}; use a .npz or .safetensors name")
    return path


def load_iris(path: str | os.PathLike) -> tuple[IRISet, dict]:
    """Read a file written by :func:`save_iris`: returns ``(IRISet, extras)`` where extras may hold
    ``labels``, ``seeds`` and ``summary`` (the dict saved with it)."""
    path = os.fspath(path)
    if path.endswith(".safetensors"):
        from safetensors import safe_open

        with safe_open(path, framework="pt") as fh:
            tensors = {k: fh.get_tensor(k) for k in fh.keys()}
            summary = json.loads((fh.metadata() or {}).get("summary", "{}"))
    else:
        with np.load(path) as npz:
            tensors = {k: torch.from_numpy(npz[k]) for k in npz.files if k != "summary_json"}
            summary = json.loads(str(npz["summary_json"])) if "summary_json" in npz.files else {}
    iris = IRISet(*(tensors[name] for name in ARRAYS), settings=dict(summary.get("settings", {})))
    extras = {k: tensors[k] for k in ("labels", "seeds") if k in tensors}
    extras["summary"] = summary
    return iris, extras
