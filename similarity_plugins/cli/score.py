"""The ``score`` command: two arrays of activations from files, the metrics that read only activations, a report.

An ARRAY is ``FILE.npy``, ``FILE.npz:KEY`` (``FILE.npz`` alone when it holds one array), ``FILE.pt``
(a tensor saved with ``torch.save``), ``FILE.pt:KEY`` (one tensor of a saved dict) or ``STORE:MODEL:LAYER``
(an entry of an activation store folder, read block by block, its checksums checked). NumPy files are
read with ``allow_pickle=False`` and torch files with ``torch.load(weights_only=True)``, so no file can
run code. A missing or unreadable file is an error naming it (exit 2).
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from .common import add_metric_args, add_output_args, add_run_args, emit_interrupted, metric_options, progress_of
from .outputs import input_files, resolve_outputs

NUMPY_SUFFIXES = (".npy", ".npz")
TORCH_SUFFIXES = (".pt", ".pth")


def split_array_spec(spec: str) -> tuple[str, str | None]:
    """``"a.npz:acts"`` -> ``("a.npz", "acts")``; ``"a.npy"`` -> ``("a.npy", None)``. A ``:KEY`` suffix is
    read only after a ``.npz``/``.pt``/``.pth`` file name (and when the whole spec is not a file itself)."""
    path, colon, key = spec.rpartition(":")
    if colon and key and path.lower().endswith((".npz",) + TORCH_SUFFIXES) and not os.path.isfile(spec):
        return path, key
    return spec, None


def store_entry_spec(spec: str) -> tuple[str, str, str] | None:
    """``"acts:a:block3"`` -> ``("acts", "a", "block3")`` when ``acts`` is a folder; None for any other spec."""
    parts = spec.rsplit(":", 2)
    if len(parts) == 3 and all(parts) and os.path.isdir(parts[0]):
        return parts[0], parts[1], parts[2]
    return None


def load_array(spec: str) -> Any:
    """The array an ARRAY spec names (a NumPy array, a torch tensor or a store entry, (N, ...));
    ``FileNotFoundError`` or ``ValueError`` naming the file for a missing, unreadable or unsuitable one."""
    entry = store_entry_spec(spec)
    if entry is not None:
        from ..networks.store import Store

        folder, model, layer = entry
        return Store(folder).load(model, layer)
    path, key = split_array_spec(spec)
    if not os.path.exists(path):
        raise FileNotFoundError(f"no such file: {path}")
    suffix = os.path.splitext(path)[1].lower()
    if suffix not in NUMPY_SUFFIXES + TORCH_SUFFIXES:
        raise ValueError(f"cannot read {path}: expected a .npy, .npz, .pt or .pth file")
    try:
        value = _load_torch(path) if suffix in TORCH_SUFFIXES else _load_numpy(path)
    except Exception as exc:  # noqa: BLE001 - every reader's failure is one line naming the file
        raise ValueError(f"cannot read {path}: {type(exc).__name__}: {exc}") from None
    return _pick(value, path, key)


def _load_numpy(path: str) -> Any:
    import numpy as np

    loaded = np.load(path, allow_pickle=False)
    if isinstance(loaded, np.lib.npyio.NpzFile):
        with loaded:
            return {k: loaded[k] for k in loaded.files}
    return loaded


def _load_torch(path: str) -> Any:
    import torch

    return torch.load(path, map_location="cpu", weights_only=True)


def _pick(value: Any, path: str, key: str | None) -> Any:
    if isinstance(value, dict):
        names = sorted(map(str, value))
        if key is None and len(value) == 1:
            return next(iter(value.values()))
        if key is None:
            raise ValueError(f"{path} holds {len(value)} arrays ({', '.join(names)}); name one as {path}:KEY")
        if key not in value:
            from ..utils.text import did_you_mean

            raise ValueError(f"{path} has no array {key!r}{did_you_mean(key, names)} (it holds: {', '.join(names)})")
        return value[key]
    if key is not None:
        raise ValueError(f"{path} holds one array, not a dict: drop ':{key}'")
    return value


def cmd_score(args: argparse.Namespace) -> int:
    from ..runner.score import score, select_score_metrics

    resolve_outputs(args, ("--out", "--csv"),  # before any work (exit 2 naming the path)
                  input_files(*(split_array_spec(spec)[0] for spec in (args.x, args.y)
                                if store_entry_spec(spec) is None)))
    options = metric_options(args, select_score_metrics(args.metrics))
    x, y = load_array(args.x), load_array(args.y)
    start = time.perf_counter()
    interrupted = None
    try:
        report = score(x, y, args.metrics, options=options, seed=args.seed, progress=progress_of(args))
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: the rows that finished, the others marked interrupted
        report, interrupted = getattr(exc, "report", None), exc
        if report is None:
            raise
    return emit_interrupted(report, args.out, args.csv, time.perf_counter() - start, interrupted)


def register(sub: argparse._SubParsersAction) -> None:
    """Add this module's command(s) to the ``similarity-plugins`` parser."""
    p = sub.add_parser("score", help="score two arrays of activations (same rows) with the metrics that need no model")
    p.add_argument("x", help="ARRAY of network A's activations (N, ...): FILE.npy, FILE.npz[:KEY], FILE.pt[:KEY] "
                   "or STORE:MODEL:LAYER (an activation store entry)")
    p.add_argument("y", help="ARRAY of network B's activations, the same N rows")
    add_metric_args(p, default="every metric that reads only activations", epochs=False)
    add_run_args(p, device=None, seed="seed of the metrics and of the 80/20 split of the rows that metrics fitting "
                 "on a train split use")
    add_output_args(p)
    p.set_defaults(func=cmd_score)
