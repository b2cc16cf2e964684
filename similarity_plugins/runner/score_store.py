"""``score`` on two activation store entries: paired by sample before any work, read from disk as the metrics
need them (whole, or in blocks by the measures that reduce to sums over samples)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..store.rows import AlignedRows, align, as_entries

_BLOCK = 8192  # rows read per block by the check of the values


def stored_sides(x: Any, y: Any, shared: bool) -> tuple[AlignedRows, AlignedRows, dict] | None:
    """``(x rows, y rows, {"kept", "dropped"})`` when ``x`` and ``y`` are both store entries (`Store.load`): paired
    by sample id (`align`) and checked to hold finite values (one pass, block by block); None for anything else
    (arrays are paired by position)."""
    entries = as_entries(x, y)
    if entries is None:
        if shared:
            raise ValueError("shared_samples pairs the samples of two store entries (Store.load); x and y are paired "
                             "by position: leave shared_samples out")
        return None
    aligned = align(entries, shared=shared)
    for view, name in zip(aligned.views, ("x", "y")):
        _check_finite(view, name)
    return aligned.views[0], aligned.views[1], aligned.summary()


def _check_finite(view: AlignedRows, name: str) -> None:
    """The refusal ``score`` gives an array with NaN or Inf rows, for an entry read in blocks."""
    bad, first = 0, None
    for start in range(0, len(view), _BLOCK):
        block = view[start:start + _BLOCK]
        rows = ~np.isfinite(block).all(axis=1)
        if rows.any():
            bad += int(rows.sum())
            first = start + int(np.flatnonzero(rows)[0]) if first is None else first
    if bad:
        raise ValueError(f"{name} has non-finite values (NaN or inf) in {bad} of its {len(view)} rows (the first: row "
                         f"{first}); remove or fix those rows")


def rows_of(view: AlignedRows, rows: torch.Tensor) -> torch.Tensor:
    """The rows ``rows`` of a stored side, read from disk as a float tensor."""
    every = len(rows) == len(view) and bool((rows == torch.arange(len(view))).all())
    return torch.from_numpy(np.asarray(view if every else view.take(rows.numpy())))


def row_view(view: AlignedRows, rows: torch.Tensor) -> AlignedRows:
    """The rows ``rows`` of a stored side as a view read in blocks (`Context.row_source`)."""
    every = len(rows) == len(view) and bool((rows == torch.arange(len(view))).all())
    return view if every else view.take(rows.numpy())


def stored_identity(view: AlignedRows) -> dict:
    """What identifies a stored side in a report's provenance: its store and entry, the shape read, its dtype and
    the fingerprint of the entry's samples (None for an entry written by ``put``)."""
    entry = view.array
    return {"store": entry.store.path, "entry": entry.name, "shape": list(view.shape), "dtype": str(view.dtype),
            "fingerprint": entry.manifest.get("data_fingerprint")}
