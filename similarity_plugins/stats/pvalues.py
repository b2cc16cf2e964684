"""Multiple-comparison corrections of p-values: Holm's step-down (family-wise error) and Benjamini-Hochberg
(false discovery rate). Pure functions on 1-D sequences; NaN entries are left out of the family and stay NaN."""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

CORRECTIONS = (None, "holm", "bh")


def _finite(p: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    arr = np.asarray(p, dtype=np.float64).reshape(-1)
    keep = ~np.isnan(arr)
    if ((arr[keep] < 0) | (arr[keep] > 1)).any():
        raise ValueError(f"p-values must lie in [0, 1], got {arr[keep][(arr[keep] < 0) | (arr[keep] > 1)][:3].tolist()}")
    return arr, keep


def _adjusted(p: Sequence[float], step: Callable[[np.ndarray, int], np.ndarray]) -> np.ndarray:
    """``p`` with its k finite values replaced by ``step(sorted values, k)`` put back in the input's order."""
    arr, keep = _finite(p)
    out = np.full(arr.shape, np.nan)
    vals = arr[keep]
    k = len(vals)
    if k:
        order = np.argsort(vals, kind="stable")
        adjusted = np.empty(k)
        adjusted[order] = step(vals[order], k)
        out[keep] = adjusted
    return out


def holm(p: Sequence[float]) -> np.ndarray:
    """Holm's step-down adjusted p-values.

    Args:
        p: m p-values in [0, 1] (NaN: not in the family).

    Returns:
        (m,) float64: with the k finite values sorted ascending, ``adj_(i) = max_{j<=i} min(1, (k - j + 1) p_(j))``,
            in the input's order; NaN where the input is NaN.
    """
    return _adjusted(p, lambda ranked, k: np.maximum.accumulate(np.minimum(1.0, (k - np.arange(k)) * ranked)))


def benjamini_hochberg(p: Sequence[float]) -> np.ndarray:
    """Benjamini-Hochberg adjusted p-values (q-values of the step-up FDR procedure).

    Args:
        p: m p-values in [0, 1] (NaN: not in the family).

    Returns:
        (m,) float64: with the k finite values sorted ascending, ``adj_(i) = min_{j>=i} min(1, k p_(j) / j)``,
            in the input's order; NaN where the input is NaN.
    """
    return _adjusted(p, lambda ranked, k: np.minimum.accumulate(np.minimum(1.0, ranked * k / np.arange(1, k + 1))[::-1])[::-1])


def adjust_p_values(p: Sequence[float], correction: str | None) -> np.ndarray:
    """``p`` adjusted by ``correction``: None (unchanged), ``"holm"`` or ``"bh"``; ``ValueError`` naming the valid ones."""
    if correction is None:
        return np.asarray(p, dtype=np.float64).reshape(-1).copy()
    if correction == "holm":
        return holm(p)
    if correction == "bh":
        return benjamini_hochberg(p)
    raise ValueError(f"correction must be one of None, 'holm', 'bh' (Benjamini-Hochberg); got {correction!r}")
