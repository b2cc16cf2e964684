"""Measures streamed block by block from arrays too large to hold: Procrustes, the CCA family and ridge regression
from float64 moments (linear CKA streams in `cka.streaming`).

``functional.streamed``, a grid from an activation store and ``score`` on store entries read the rows ``rows``
at a time (NumPy arrays, tensors, or an activation store's entries, read from disk) and keep only float64 sums
whose size does not depend on n: the shifted first and second moments ``n``, ``sum x``, ``sum y``, ``X'^T X'``,
``Y'^T Y'``, ``X'^T Y'`` (`StreamedMoments`, ``8 (dx + dy)^2`` bytes).

- ``procrustes``: ``||Cxy||_* / sqrt(tr Cxx tr Cyy)``;
- ``cca``, ``svcca``, ``pwcca``: each side whitened from its covariance (``Cxx = V diag(s^2) V^T``), then the
  measures of `measures.cca` on those sides with ``q_x^T q_y = diag(1/s_x) V_x^T Cxy V_y diag(1/s_y)``. A
  direction counts when its variance is above ``max(n, d) eps`` of the largest (eigenvalues of a covariance
  carry ``sqrt(eps)`` relative error in their square roots); the in-memory measures keep singular values down
  to ``max(n, d) eps`` of the largest, so the two agree unless a side has directions between those bounds;
- ``linear-regression``: the ridge map from the normal equations ``(Cxx + lambda I) W = Cxy`` of the training
  rows, then a second pass over the test rows for the residual and total sums of squares.

Every refusal is the in-memory measure's (too few samples, a constant side, NaN or Inf: the same messages).
Permutation tests do not stream: each permutation pairs every row of ``x`` with another row of ``y``, a full
pass over both arrays per permutation. Measures that need an n x n matrix (RBF CKA, RSA, mutual kNN) cannot
stream: [`nxn_bytes`][nxn_bytes] states their memory, and `check_budget` warns before they run over it.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
import torch

from ..utils.arrays import constant_message, format_bytes, paired_blocks
from .cca import WhitenedSide, cca_from_nodes, pwcca_from_nodes, svcca_from_nodes
from .common import Measured, check_count

STREAMED = ("cka-linear", "cka-debiased", "procrustes", "cca", "svcca", "pwcca", "linear-regression")
NXN = ("cka-rbf", "rsa", "mutual-knn", "cknna")
#: The bytes an n x n measure may take before a warning (the default ``memory_budget``): 4 GiB.
NXN_BUDGET = 4 * 2**30
_EPS = float(np.finfo(np.float64).eps)
_WHAT = {"procrustes": "Procrustes", "cca": "CCA", "svcca": "SVCCA", "pwcca": "PWCCA"}


class MemoryBudgetWarning(UserWarning):
    """A measure whose memory, by its formula, exceeds the budget (``memory_budget``, or a grid's ``cache_bytes``):
    it still runs, and may run out of memory. Use fewer samples (``max_samples``) or a measure that streams."""


def nxn_bytes(n: int, measure: str) -> int:
    """Bytes an n x n measure holds for one pair: ``8 n^2`` per float64 matrix, times the matrices it keeps
    (RBF CKA: 2 centred Gram matrices plus one for the kernel; RSA: 2 RDMs; mutual kNN and CKNNA: 1 similarity
    matrix per side, blocked, so 2)."""
    per = {"cka-rbf": 3, "rsa": 2, "mutual-knn": 2, "cknna": 2}
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


class RowView:
    """The rows ``index`` of ``base`` (an array, a tensor or a store entry), read only when sliced: ``view[i:j]`` is
    ``base[index[i:j]]``."""

    def __init__(self, base: Any, index: np.ndarray) -> None:
        self.base, self.index = base, np.asarray(index)
        self.shape = (len(self.index), *tuple(base.shape[1:]))

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, rows: Any) -> Any:
        return self.base[self.index[rows]]


def streamed_sources(context: Any, front: Any, end: Any, layer: Any, limit: Any = None,
                     split: str = "test") -> tuple[Any, Any] | None:
    """The two nodes' rows on disk (``context.row_source``), cut to the first ``limit`` samples, when a measure
    should stream them (both on disk, and `stream_pays`); None when it should read them with ``activations``."""
    x, y = context.row_source(front, layer.front, split), context.row_source(end, layer.end, split)
    if x is None or y is None:
        return None
    if limit:
        x, y = RowView(x, np.arange(min(int(limit), len(x)))), RowView(y, np.arange(min(int(limit), len(y))))
    dx, dy = int(np.prod(x.shape[1:])), int(np.prod(y.shape[1:]))
    return (x, y) if stream_pays(len(x), dx, dy) else None


def warn_nxn(context: Any, front: Any, end: Any, layer: Any, measure: str) -> None:
    """Before an n x n measure loads two nodes that are rows on disk (``context.row_source``), warn
    (`MemoryBudgetWarning`) when its matrices and the rows exceed the grid's ``cache_bytes`` (default
    `NXN_BUDGET`)."""
    x, y = context.row_source(front, layer.front), context.row_source(end, layer.end)
    if x is None or y is None:
        return
    n, width = len(x), int(np.prod(x.shape[1:])) + int(np.prod(y.shape[1:]))
    check_budget(nxn_bytes(n, measure) + 8 * n * width, f"{measure} on n = {n} samples", context.derived_bytes)


def stream_pays(n: int, dx: int, dy: int) -> bool:
    """Whether the moments of a pair (``8 (dx + dy)^2`` bytes) are smaller than its rows in float32
    (``4 n (dx + dy)``): then a grid or ``score`` reads rows on disk in blocks rather than whole."""
    return 2 * (dx + dy) < n


class StreamedMoments:
    """Float64 first and second moments of paired rows, about the first block's means (well conditioned), and
    whether each side is constant; ``what`` names the measure in refusals."""

    def __init__(self, what: str = "the measure") -> None:
        self.what, self.n = what, 0
        self.shift: tuple[np.ndarray, np.ndarray] | None = None
        self._first: list[np.ndarray | None] = [None, None]
        self._const = [True, True]

    def update(self, x: np.ndarray, y: np.ndarray) -> None:
        """Add rows ``x`` (b, dx) and ``y`` (b, dy)."""
        x, y = np.array(x, dtype=np.float64), np.array(y, dtype=np.float64)  # copies, shifted in place below
        if not len(x):
            return
        if self.shift is None:
            self.shift = (x.mean(0), y.mean(0))
            self._first = [x[0].copy(), y[0].copy()]
            dx, dy = x.shape[1], y.shape[1]
            self.sx, self.sy = np.zeros(dx), np.zeros(dy)
            self.xx, self.yy, self.xy = np.zeros((dx, dx)), np.zeros((dy, dy)), np.zeros((dx, dy))
        for i, side in enumerate((x, y)):
            self._const[i] = self._const[i] and bool((side == self._first[i]).all())
        x -= self.shift[0]
        y -= self.shift[1]
        self.n += len(x)
        self.sx += x.sum(0)
        self.sy += y.sum(0)
        self.xx += x.T @ x
        self.yy += y.T @ y
        self.xy += x.T @ y

    def check(self, min_n: int, names: tuple[str, str] = ("X", "Y"), what: str | None = None) -> None:
        """The in-memory measure's refusals (``what``, default the measure these moments were read for): fewer than
        ``min_n`` samples, then a constant side (X first)."""
        what = what or self.what
        check_count(self.n, what, min_n)
        for name, constant in zip(names, self._const):
            if constant:
                raise ValueError(constant_message(name, self.n, what))

    def centred(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(Xc^T Xc, Yc^T Yc, Xc^T Yc)``: the centred sums of squares and cross products."""
        mx, my = self.sx / self.n, self.sy / self.n
        return (self.xx - self.n * np.outer(mx, mx), self.yy - self.n * np.outer(my, my),
                self.xy - self.n * np.outer(mx, my))

    def means(self) -> tuple[np.ndarray, np.ndarray]:
        """The column means of x and y."""
        return self.shift[0] + self.sx / self.n, self.shift[1] + self.sy / self.n


def moments(x: Any, y: Any, rows: int, what: str) -> StreamedMoments:
    """`StreamedMoments` of every row of ``x`` and ``y``, read ``rows`` at a time, for the measure ``what`` (a name
    such as ``"procrustes"``, or the name its errors give)."""
    what = _WHAT.get(what, what)
    m = StreamedMoments(what)
    for xb, yb in paired_blocks(x, y, rows, what):
        m.update(xb, yb)
    return m


def procrustes_from_moments(m: StreamedMoments) -> Measured:
    """[`procrustes`][procrustes] of the rows whose `StreamedMoments` are ``m``."""
    from .procrustes import MIN_SAMPLES

    m.check(MIN_SAMPLES, what="Procrustes")
    cxx, cyy, cxy = m.centred()
    score = float(np.linalg.svd(cxy, compute_uv=False).sum() / math.sqrt(np.trace(cxx) * np.trace(cyy)))
    score = min(1.0, max(0.0, score))
    return Measured(score, {"n": m.n, "angular_distance": math.acos(score)})


def _moment_side(c: np.ndarray, n: int) -> tuple[WhitenedSide, np.ndarray]:
    """A whitened side of `measures.cca` from its centred covariance ``c`` (d, d), and the map ``V diag(1/s)``
    (d, d; zero for directions below the rank) that takes cross products to its whitened basis."""
    vals, vecs = np.linalg.eigh(c)
    vals, vecs = np.clip(vals[::-1], 0.0, None), vecs[:, ::-1]
    rank = int((vals > vals[0] * max(n, len(c)) * _EPS).sum()) if vals[0] > 0 else 0
    s = np.sqrt(vals)
    inverse = np.zeros_like(s)
    inverse[:rank] = 1.0 / s[:rank]
    side = WhitenedSide(None, torch.from_numpy(s[:, None] * vecs.T), torch.from_numpy(s), rank, rank, rows=n)
    return side, vecs * inverse


def cca_family_from_moments(m: StreamedMoments, measure: str = "cca", *, variance: float = 0.99,
                            dims: Any = None) -> Measured:
    """[`cca`][cca], [`svcca`][svcca] (``variance``, ``dims``) or [`pwcca`][pwcca] of the rows whose
    `StreamedMoments` are ``m`` (see the module docstring for the rank rule)."""
    m.check(3, what=_WHAT[measure])
    cxx, cyy, cxy = m.centred()
    (a, wx), (b, wy) = _moment_side(cxx, m.n), _moment_side(cyy, m.n)
    cross = torch.from_numpy(wx.T @ cxy @ wy)
    if measure == "cca":
        return cca_from_nodes(a, b, details=True, cross=cross)
    if measure == "svcca":
        return svcca_from_nodes(a, b, variance, dims, details=True, cross=cross)
    return pwcca_from_nodes(a, b, details=True, cross=cross)


def from_moments(m: StreamedMoments, measure: str, **arguments: Any) -> Measured:
    """``procrustes``, ``cca``, ``svcca`` or ``pwcca`` (with the measure's keyword ``arguments``) from ``m``."""
    return procrustes_from_moments(m) if measure == "procrustes" else cca_family_from_moments(m, measure, **arguments)


def pair_moments(context: Any, kind: str, key: Any, compute: Any) -> Any:
    """The moments (``compute()``) of the pair ``key``, kept for the metrics of one family that read the same pair
    one after another (a grid runs a pair's cells together): one pass over the rows serves them all. Only the last
    pair of each ``kind`` is kept (in a slot ``context.remember`` holds), so a grid holds one pair's moments at a
    time."""
    held = context.remember(("streamed pair", kind), dict)  # one slot: {pair key: moments}
    if key not in held:
        held.clear()
        held[key] = compute()
    return held[key]


def streamed_regression(x_train: Any, y_train: Any, x_test: Any, y_test: Any, *, rows: int = 8192,
                        alpha: float | None = None) -> Measured:
    """[`linear_regression`][linear_regression] with given test rows (variance-weighted R^2 of a ridge map from x to
    y), from the training rows' moments and a pass over the test rows, ``rows`` at a time.

    Args:
        x_train: (n, dx) front training rows.
        y_train: (n, dy) end training rows of the same samples.
        x_test: (m, dx) front test rows.
        y_test: (m, dy) end test rows.
        rows: samples read per block.
        alpha: relative ridge strength (default `DEFAULT_ALPHA`).

    Returns:
        R^2 on the test rows with ``alpha``, ``ridge_lambda``, ``n_train``, ``n_test``, equal to
            ``linear_regression(x_train, y_train, alpha, X_test=x_test, Y_test=y_test)`` up to float64 rounding.

    Raises:
        ValueError: the in-memory measure's refusals (fewer than 2 rows, a constant side, NaN or Inf), and ``dx``
            over the training rows (the normal equations in feature space need ``dx <= n_train``).
    """
    from .regression import DEFAULT_ALPHA, check_alpha

    alpha = check_alpha(DEFAULT_ALPHA if alpha is None else alpha)
    fit = moments(x_train, y_train, rows, "linear-regression")
    check_count(fit.n, "linear-regression", 2)
    check_count(len(x_test), "linear-regression", 2)
    fit.check(2, ("X (train rows)", "Y (train rows)"))
    cxx, _, cxy = fit.centred()
    dx = len(cxx)
    if dx > fit.n:
        raise ValueError(f"linear-regression streamed: {dx} front features over {fit.n} training rows; the normal "
                         "equations need dx <= n_train, so use the in-memory measure (score) for this pair")
    lam = alpha * float(np.trace(cxx)) / dx
    weights = np.linalg.solve(cxx + np.eye(dx) * lam, cxy)
    mx, my = fit.means()
    sse, test = 0.0, StreamedMoments("linear-regression")
    for xb, yb in paired_blocks(x_test, y_test, rows, "linear-regression"):
        xt, yt = xb.astype(np.float64), yb.astype(np.float64)
        sse += float((((yt - my) - (xt - mx) @ weights) ** 2).sum())
        test.update(yt[:, :1], yt)
    total = float(np.trace(test.centred()[1]))
    if not total > 0.0:
        raise ValueError("linear-regression: Y is constant over the test rows (zero total variance), so R^2 is "
                         "undefined (0/0); check that the layer is not dead or that the inputs differ")
    return Measured(1.0 - sse / total, {"alpha": alpha, "ridge_lambda": lam, "n_train": fit.n, "n_test": test.n,
                                        "split": "given test rows"})
