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

from .arguments import add_metric_args, add_output_args, add_run_args, progress_of
from .options import metric_options
from .outputs import emit_interrupted, input_files, resolve_outputs

NUMPY_SUFFIXES = (".npy", ".npz")
TORCH_SUFFIXES = (".pt", ".pth")


def split_array_spec(spec: str) -> tuple[str, str | None]:
    """``"a.npz:acts"`` -> ``("a.npz", "acts")``; ``"a.npy"`` -> ``("a.npy", None)``. A ``:KEY`` suffix is
    read only after a ``.npz``/``.pt``/``.pth`` file name (and when the whole spec is not a file itself)."""
    path, colon, key = spec.rpartition(":")
    if colon and key and path.lower().endswith((".npz",) + TORCH_SUFFIXES) and not os.path.isfile(spec):
        return path, key
    return spec, None


def _unescaped_parts(spec: str) -> list[str]:
    r"""``spec`` split at each ``:`` that no backslash escapes; ``\:`` and ``\\`` are read as ``:`` and ``\``."""
    parts, current, chars = [], [], iter(spec)
    for char in chars:
        if char == "\\":
            current.append(next(chars, "\\"))
        elif char == ":":
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    return [*parts, "".join(current)]


def _holds(folder: str, model: str, layer: str) -> bool:
    """Whether the store ``folder`` has a complete entry (model, layer)."""
    from ..store.paths import StoreError, quote_name

    try:
        path = os.path.join(folder, quote_name(model, "model"), quote_name(layer, "layer"), "manifest.json")
    except StoreError:
        return False
    return os.path.isfile(os.path.join(folder, "store.json")) and os.path.isfile(path)


def store_entry_spec(spec: str) -> tuple[str, str, str] | None:
    r"""``"acts:a:block3"`` -> ``("acts", "a", "block3")`` when ``acts`` is a folder; None for any other spec.

    A model or layer name may hold ``:``: write it ``\:`` (a backslash as ``\\``), or plainly when only one way
    of reading the spec names an entry the store holds. ``ValueError`` when several do, naming them."""
    parts = _unescaped_parts(spec)
    ways = [(":".join(parts[:i]), ":".join(parts[i:j]), ":".join(parts[j:]))
            for i in range(1, len(parts) - 1) for j in range(i + 1, len(parts))]
    ways = [w for w in ways if all(w) and os.path.isdir(w[0])]
    if len(ways) <= 1:
        return ways[0] if ways else None
    held = [w for w in ways if _holds(*w)]
    if len(held) > 1:
        named = "; ".join(f"model {m!r} layer {layer!r} of {f}" for f, m, layer in held)
        raise ValueError(f"{spec!r} names {len(held)} store entries ({named}); write a ':' that belongs to a name "
                         "as '\\:'")
    return held[0] if held else ways[-1]  # none held: the plain reading (the last two ':'), whose error names what is


def load_array(spec: str) -> Any:
    """The array an ARRAY spec names (a NumPy array, a torch tensor or a store entry, (N, ...));
    ``FileNotFoundError`` or ``ValueError`` naming the file for a missing, unreadable or unsuitable one."""
    entry = store_entry_spec(spec)
    if entry is not None:
        from ..store.store import Store

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
        report = score(x, y, args.metrics, options=options, seed=args.seed, progress=progress_of(args),
                       shared_samples=args.shared_samples)
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: the rows that finished, the others marked interrupted
        report, interrupted = getattr(exc, "report", None), exc
        if report is None:
            raise
    return emit_interrupted(report, args.out, args.csv, time.perf_counter() - start, interrupted)


def register(sub: argparse._SubParsersAction) -> None:
    """Add this module's command(s) to the ``similarity-plugins`` parser."""
    p = sub.add_parser("score", help="score two arrays of activations (same rows) with the metrics that need no model")
    p.add_argument("x", help="ARRAY of network A's activations (N, ...): FILE.npy, FILE.npz[:KEY], FILE.pt[:KEY] "
                   "or STORE:MODEL:LAYER (an activation store entry; a ':' inside a name as '\\:')")
    p.add_argument("y", help="ARRAY of network B's activations, the same N rows (two store entries are paired by "
                   "sample id)")
    p.add_argument("--shared-samples", action="store_true",
                   help="two store entries whose sample ids differ: keep the samples both hold (says how many each "
                        "loses) instead of refusing them")
    add_metric_args(p, default="every metric that reads only activations", epochs=False)
    add_run_args(p, device=None, seed="seed of the metrics and of the 80/20 split of the rows that metrics fitting "
                 "on a train split use")
    add_output_args(p)
    p.set_defaults(func=cmd_score)
