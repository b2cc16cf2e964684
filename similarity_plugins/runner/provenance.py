"""What a result was made from, recorded in its ``meta["provenance"]``: the package version, the date, the
machine, each model's identity, the data's size and fingerprint, and the options.

A reader (a co-author, a reviewer, the HTML page) can then tell which weights, which inputs and which settings
gave the numbers. A model is identified by its class and, when it was loaded from the Hugging Face hub at a
resolved commit (``model.source``, see `similarity_plugins.hf`), by the hub id and commit; any other model by
the XXH3-128 digest of its weights and module settings (`module_digest`). A data split is identified by its number
of samples and the XXH3-128 digest of its content (`split_digest`: every input and label); arrays by their shape,
dtype and SHA-256. Recording costs one hash of each model's weights and one pass over each split the metrics read.
"""

from __future__ import annotations

import datetime
import hashlib
import os
import platform
from functools import lru_cache
from typing import Any, Iterable, Mapping

import numpy as np
import torch
from torch import nn

from ..host.results import jsonable
from ..networks.data import split_digest, split_size
from ..networks.model_state import model_dtype
from ..networks.parallel import module_digest
from ..networks.wrapped import source_of
from ..utils.digest import update_tensor_digest
from ..utils.rng import isolated_rng


def provenance(models: Mapping[str, nn.Module], data: Mapping[str, Any], *, options: Any, device: torch.device,
               batch_size: int = 256) -> dict:
    """The provenance record of one run.

    Args:
        models: ``{role or name: model}`` (``{"front": a, "end": b}`` for ``compare``); empty for arrays.
        data: ``{split name: dataset or loader}`` for the splits the metrics read, or ``{name: tensor}`` for
            arrays (``score``); a None value is left out.
        options: the options as the user gave them.
        device: where the metrics ran.
        batch_size: the batch size the data is read with (as the run read it).

    Returns:
        A JSON-ready dict: ``package`` (version), ``date`` (UTC, ISO 8601), ``machine`` (platform, Python, CPU,
            GPU when the device is one, torch), ``models`` (``{name: {"class", "dtype", "parameters", "source",
            "fingerprint"}}``), ``data`` (``{name: {"size" or "shape", "dtype", "fingerprint"}}``) and ``options``.
    """
    splits = {}
    with isolated_rng(device):  # a dataset that draws random numbers while it is read leaves no trace
        for name, split in data.items():
            if isinstance(split, torch.Tensor):
                splits[name] = array_identity(split)
            elif split is not None:
                splits[name] = {"size": split_size(split),
                                "fingerprint": split_digest(split, batch_size, f"the {name} split")}
    return jsonable({"package": package_version(),
                     "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                     "machine": machine(device), "models": {name: model_identity(m) for name, m in models.items()},
                     "data": splits, "options": _recorded(options or {})})


def splits_read(data: Any, needs: Iterable[tuple[str, ...] | None]) -> dict[str, Any]:
    """``{split name: split}`` of the splits of ``data`` (a `Data`) that metrics declaring ``needs`` read (an
    undeclared need reads both); a split ``data`` lacks is left out."""
    wanted: set[str] = set()
    for need in needs:
        wanted.update(("train", "test") if need is None else need)
    return {name: getattr(data, name) for name in ("train", "test") if name in wanted and getattr(data, name) is not None}


def store_provenance(store: Any, per_model: Mapping[str, list[str]]) -> dict:
    """``{"models", "data"}`` of a grid run from an activation store alone: what each model's entries record.

    Args:
        store: a `Store`.
        per_model: ``{model: [layer, ...]}``, the entries the grid reads.

    Returns:
        ``models``: ``{model: {"class", "source", "fingerprint", "store"}}`` from the first layer's entry (its
            ``produced_by`` and ``model_fingerprint``); ``data``: ``{"test": {"size", "fingerprint"}}``, the
            fingerprint a list when the entries were extracted from different data.
    """
    models, sizes, prints = {}, set(), []
    for name, layers in per_model.items():
        for layer in layers:
            entry = store.entry(name, layer)
            sizes.add(int(entry["shape"][0]))
            if entry.get("data_fingerprint") not in prints:
                prints.append(entry.get("data_fingerprint"))
            made = entry.get("produced_by") or {}
            models.setdefault(name, {"class": made.get("model_class"), "source": made.get("source"),
                                     "fingerprint": entry.get("model_fingerprint"), "store": store.path})
    size = sizes.pop() if len(sizes) == 1 else sorted(sizes)
    return jsonable({"models": models, "data": {"test": {"size": size, "fingerprint": prints[0] if len(prints) == 1
                                                        else prints}}})


def _recorded(value: Any) -> Any:
    """Options as recorded: arrays (a permutation table, group labels) by their shape, dtype and SHA-256."""
    if isinstance(value, Mapping):
        return {str(k): _recorded(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_recorded(v) for v in value]
    if isinstance(value, (torch.Tensor, np.ndarray)):
        return {"array": array_identity(torch.as_tensor(value))}
    return value


def model_identity(model: nn.Module) -> dict:
    """A model's class (``module.QualName``), dtype, parameter count, ``source`` (where it was loaded from, when it
    says: ``{"path", "hub_id", "revision", "commit"}``) and fingerprint (None when a hub commit pins the weights)."""
    kind = type(model)
    source = source_of(model)
    pinned = bool(source and source.get("hub_id") and source.get("commit"))
    dtype = model_dtype(model)
    return {"class": f"{kind.__module__}.{kind.__qualname__}", "dtype": None if dtype is None else str(dtype),
            "parameters": sum(p.numel() for p in model.parameters()), "source": source,
            "fingerprint": None if pinned else module_digest([model])}


def array_identity(x: torch.Tensor) -> dict:
    """An array's ``shape``, ``dtype`` and ``fingerprint`` (SHA-256 of its values)."""
    h = hashlib.sha256(b"array-digest-1")
    update_tensor_digest(h, "x", x)
    return {"shape": list(x.shape), "dtype": str(x.dtype), "fingerprint": h.hexdigest()}


def machine(device: torch.device) -> dict:
    """Where the run happened: platform, Python and torch versions, CPU model and count, and the GPU's name and
    memory when ``device`` is a CUDA device."""
    out = {"platform": platform.platform(), "python": platform.python_version(), "torch": torch.__version__,
           "cpu": cpu_name(), "cpu_count": os.cpu_count(), "device": str(device)}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        out.update(gpu=props.name, gpu_memory_gib=round(props.total_memory / 2**30, 1), cuda=torch.version.cuda)
    return out


@lru_cache(maxsize=1)
def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, else `platform.processor`), or ``"unknown"``."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


@lru_cache(maxsize=1)
def package_version() -> str:
    """The installed similarity-plugins version (its distribution metadata), or ``"unknown"`` when not installed."""
    from importlib import metadata

    try:
        return metadata.version("similarity-plugins")
    except metadata.PackageNotFoundError:
        return "unknown"
