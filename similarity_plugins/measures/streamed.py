"""Measures streamed block by block from arrays too large to hold: linear CKA, Procrustes and CCA from moments.

``functional.streamed`` reads ``x`` and ``y`` (NumPy arrays, tensors, or an activation store's entries,
which are read from disk) ``rows`` at a time and keeps only float64 sums whose size does not depend on n:

- ``cka-linear`` / ``cka-debiased``: the moments of [`StreamingLinearCKA`][StreamingLinearCKA],
  ``8 ((dx + dy)^2 + 4 (dx + dy) + 5)`` bytes;
- ``procrustes`` and ``cca``: the shifted first and second moments ``n``, ``sum x``, ``sum y``,
  ``X'^T X'``, ``Y'^T Y'``, ``X'^T Y'``, ``8 (dx + dy)^2`` bytes; Procrustes is ``||Cxy||_* / sqrt(tr Cxx tr Cyy)``
  and the canonical correlations are the singular values of ``Cxx^(-1/2) Cxy Cyy^(-1/2)``;
- ``linear-regression``: the ridge map from the normal equations ``(Cxx + lambda I) W = Cxy`` of the training
  rows (the moments above, on the rows of `linear_regression`'s seeded split), then a second pass over the
  test rows for the residual and total sums of squares; plus one byte per sample for the split.

Permutation tests do not stream: each permutation pairs every row of ``x`` with another row of ``y``, so each
one is a full pass over both arrays (K passes over the disk). ``functional.streamed`` refuses
``permutations`` naming this; load the arrays (``score``) or subsample (``max_samples``) for a p-value.

Measures that need an n x n matrix (RBF CKA, RSA, mutual kNN) cannot stream: [`nxn_bytes`][nxn_bytes] states
their memory; ``functional.streamed`` warns (`MemoryBudgetWarning`) before it loads both arrays and runs them
when that exceeds ``memory_budget`` (default `NXN_BUDGET`, 4 GiB).
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np

from ..utils.arrays import format_bytes, paired_blocks

__all__ = ["nxn_bytes", "MemoryBudgetWarning"]

STREAMED = ("cka-linear", "cka-debiased", "procrustes", "cca", "linear-regression")
NXN = ("cka-rbf", "rsa", "mutual-knn")
#: The bytes an n x n measure may take before a warning (the default ``memory_budget``): 4 GiB.
NXN_BUDGET = 4 * 2**30
_EPS = float(np.finfo(np.float64).eps)


class MemoryBudgetWarning(UserWarning):
    """A measure whose memory, by its formula, exceeds the budget given (it still runs)."""


def nxn_bytes(n: int, measure: str) -> int:
    """Bytes an n x n measure holds for one pair: ``8 n^2`` per float64 matrix, times the matrices it keeps
    (RBF CKA: 2 centred Gram matrices plus one for the kernel; RSA: 2 RDMs; mutual kNN: 1 similarity matrix
    per side, blocked, so 2)."""
    per = {"cka-rbf": 3, "rsa": 2, "mutual-knn": 2}
    if measure not in per:
        raise ValueError(f"nxn_bytes knows {', '.join(per)}, not {measure!r}")
    return per[measure] * 8 * int(n) ** 2


def check_budget(nbytes: int, what: str, memory_budget: int | None) -> None:
    """Warn (`MemoryBudgetWarning`) before work that needs more than ``memory_budget`` (default `NXN_BUDGET`)."""
    budget = NXN_BUDGET if memory_budget is None else int(memory_budget)
    if nbytes > budget:
        warnings.warn(f"{what} needs about {format_bytes(nbytes)}, over the memory budget of {format_bytes(budget)}; "
                      "use fewer samples (max_samples) or a measure that streams: " + ", ".join(STREAMED),
                      MemoryBudgetWarning, stacklevel=3)


class StreamedMoments:
    """Float64 first and second moments of paired rows, about the first block's means (well conditioned)."""

    def __init__(self) -> None:
        self.n = 0
        self.shift: tuple[np.ndarray, np.ndarray] | None = None

    def update(self, x: np.ndarray, y: np.ndarray) -> None:
        """Add rows ``x`` (b, dx) and ``y`` (b, dy)."""
        x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
        if not len(x):
            return
        if self.shift is None:
            self.shift = (x.mean(0), y.mean(0))
            dx, dy = x.shape[1], y.shape[1]
            self.sx, self.sy = np.zeros(dx), np.zeros(dy)
            self.xx, self.yy, self.xy = np.zeros((dx, dx)), np.zeros((dy, dy)), np.zeros((dx, dy))
        x, y = x - self.shift[0], y - self.shift[1]
        self.n += len(x)
        self.sx += x.sum(0)
        self.sy += y.sum(0)
        self.xx += x.T @ x
        self.yy += y.T @ y
        self.xy += x.T @ y

    def centred(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(Xc^T Xc, Yc^T Yc, Xc^T Yc)``: the centred sums of squares and cross products."""
        mx, my = self.sx / self.n, self.sy / self.n
        return (self.xx - self.n * np.outer(mx, mx), self.yy - self.n * np.outer(my, my),
                self.xy - self.n * np.outer(mx, my))


def _inverse_sqrt(c: np.ndarray, n: int) -> tuple[np.ndarray, int]:
    """``(W, k)``: W (d, k) with ``W^T C W = I`` on the k directions of numerical rank (NumPy's rule on the
    singular values ``sqrt(eigenvalues)`` of the centred data)."""
    vals, vecs = np.linalg.eigh(c)
    vals, vecs = vals[::-1], vecs[:, ::-1]
    s = np.sqrt(np.clip(vals, 0.0, None))
    k = int((s > s[0] * max(n, len(c)) * _EPS * 10).sum()) if s[0] > 0 else 0
    return vecs[:, :k] / s[:k], k


def _procrustes(m: StreamedMoments) -> float:
    cxx, cyy, cxy = m.centred()
    tx, ty = float(np.trace(cxx)), float(np.trace(cyy))
    if tx <= 0 or ty <= 0:
        raise ValueError("Procrustes: a side is constant across samples (zero variance)")
    return float(np.linalg.svd(cxy, compute_uv=False).sum() / math.sqrt(tx * ty))


def _cca(m: StreamedMoments) -> float:
    cxx, cyy, cxy = m.centred()
    wx, kx = _inverse_sqrt(cxx, m.n)
    wy, ky = _inverse_sqrt(cyy, m.n)
    if kx + ky >= m.n - 1:
        raise ValueError(f"CCA is degenerate here: n - 1 = {m.n - 1} <= {kx} + {ky} (the directions kept); use "
                         "more samples")
    rho = np.clip(np.linalg.svd(wx.T @ cxy @ wy, compute_uv=False), 0.0, 1.0)
    return float(rho.mean())


def streamed_procrustes(x: Any, y: Any, *, rows: int = 8192) -> float:
    """[`procrustes`][procrustes] of ``x`` (n, dx) and ``y`` (n, dy) from float64 moments read ``rows`` at a time."""
    return _procrustes(_moments(x, y, rows))


def streamed_cca(x: Any, y: Any, *, rows: int = 8192) -> float:
    """[`cca`][cca] (mean canonical correlation) of ``x`` and ``y`` from float64 moments read ``rows`` at a time."""
    return _cca(_moments(x, y, rows))


def _moments(x: Any, y: Any, rows: int) -> StreamedMoments:
    moments = StreamedMoments()
    for xb, yb in paired_blocks(x, y, rows):
        moments.update(xb, yb)
    return moments


def streamed_regression(x: Any, y: Any, *, rows: int = 8192, alpha: float | None = None, seed: int = 0) -> float:
    """[`linear_regression`][linear_regression] (variance-weighted R^2 of a ridge map from ``x`` to ``y``) read
    ``rows`` at a time, on the same seeded split of the rows (its first ``ceil(0.8 n)`` for fitting).

    Args:
        x: (n, dx) front rows.
        y: (n, dy) end rows of the same samples.
        rows: samples read per block.
        alpha: relative ridge strength (default `DEFAULT_ALPHA`).
        seed: the seed of the train/test split.

    Returns:
        R^2 on the held-out rows, equal to ``linear_regression(x, y, alpha, seed=seed)`` up to float64 rounding.

    Raises:
        ValueError: fewer than 4 rows, ``dx`` over the training rows (the normal equations in feature space
            need ``dx <= n_train``; use the in-memory measure), a constant side, non-finite values.
    """
    from .regression import DEFAULT_ALPHA, TRAIN_FRACTION, check_alpha

    alpha = check_alpha(DEFAULT_ALPHA if alpha is None else alpha)
    n = len(x)
    if n < 4:
        raise ValueError(f"linear-regression needs at least 4 rows to split, got {n}")
    order = np.random.default_rng(seed).permutation(n)
    cut = min(n - 2, max(2, int(math.ceil(TRAIN_FRACTION * n))))
    train = np.zeros(n, dtype=bool)
    train[order[:cut]] = True
    fit = StreamedMoments()
    for start, (xb, yb) in _indexed_blocks(x, y, rows):
        keep = train[start:start + len(xb)]
        fit.update(xb[keep], yb[keep])
    weights, mx, my = _ridge_solution(fit, alpha)
    sse, test = 0.0, StreamedMoments()
    for start, (xb, yb) in _indexed_blocks(x, y, rows):
        held = ~train[start:start + len(xb)]
        xt, yt = xb[held].astype(np.float64), yb[held].astype(np.float64)
        sse += float((((yt - my) - (xt - mx) @ weights) ** 2).sum())
        test.update(yt[:, :1], yt)
    total = float(np.trace(test.centred()[1]))
    if not total > 0.0:
        raise ValueError("linear-regression: Y is constant over the test rows (zero total variance), so R^2 is "
                         "undefined (0/0); check that the layer is not dead or that the inputs differ")
    return 1.0 - sse / total


def _ridge_solution(m: StreamedMoments, alpha: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(W, mean x, mean y)`` of the training moments: ``(Cxx + lambda I) W = Cxy``, ``lambda = alpha tr(Cxx)/dx``."""
    cxx, _, cxy = m.centred()
    dx = len(cxx)
    if dx > m.n:
        raise ValueError(f"linear-regression streamed: {dx} front features over {m.n} training rows; the normal "
                         "equations need dx <= n_train, so use the in-memory measure (score) for this pair")
    trace = float(np.trace(cxx))
    if not trace > 0.0:
        raise ValueError("linear-regression: X (train rows) is constant across samples (zero variance)")
    system = cxx + np.eye(dx) * (alpha * trace / dx)
    try:
        weights = np.linalg.solve(system, cxy)
    except np.linalg.LinAlgError as exc:
        raise ValueError("linear-regression: the ridge system is singular in float64; use a larger alpha") from exc
    return weights, m.shift[0] + m.sx / m.n, m.shift[1] + m.sy / m.n


def _indexed_blocks(x: Any, y: Any, rows: int):
    """``(first row, (x block, y block))`` of `paired_blocks`."""
    for i, blocks in enumerate(paired_blocks(x, y, rows)):
        yield i * rows, blocks
