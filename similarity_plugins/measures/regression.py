"""Linear (ridge) regression from the front's activations to the end's: variance-weighted R^2 on held-out rows."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from ..utils.arrays import ArrayLike
from .common import Measured, centred, finish, pair

#: ridge strength relative to the mean eigenvalue of the front's training covariance (see the docstring)
DEFAULT_ALPHA = 1e-3
#: share of the rows used for fitting when no split is given (a seeded random permutation)
TRAIN_FRACTION = 0.8


@dataclass(frozen=True)
class RidgeFront:
    """The front's part of the ridge fit, shared by every end it is fitted to (a grid's node).

    ``xc``: the centred training rows (n, d) float64; ``mean``: their column means (d,); ``lam``: the ridge
    strength; ``factor``: the Cholesky factor of ``xc^T xc + lam I`` (d <= n, feature space) or of
    ``xc xc^T + lam I`` (sample space); ``alpha``: the relative strength asked for.
    """

    xc: torch.Tensor
    mean: torch.Tensor
    lam: float
    factor: torch.Tensor
    alpha: float

    @property
    def feature_space(self) -> bool:
        return self.xc.shape[1] <= self.xc.shape[0]

    def predict(self, yc: torch.Tensor, xq: torch.Tensor) -> torch.Tensor:
        """Ridge prediction ``xq W`` with ``W = (xc^T xc + lam I)^{-1} xc^T yc`` (in sample space when d > n:
        ``xq xc^T (xc xc^T + lam I)^{-1} yc``, the same map). ``yc``: centred training targets; ``xq``: (m, d)."""
        if self.feature_space:
            return xq @ torch.cholesky_solve(self.xc.T @ yc, self.factor)
        return (xq @ self.xc.T) @ torch.cholesky_solve(yc, self.factor)


def check_alpha(alpha: float) -> float:
    """The ridge strength ``alpha`` as a float.

    Raises:
        ValueError: ``alpha`` is not a positive finite number.
    """
    alpha = float(alpha)
    if not (math.isfinite(alpha) and alpha > 0.0):
        raise ValueError(f"linear-regression: alpha must be a positive finite number (got {alpha!r})")
    return alpha


def ridge_front(X: ArrayLike, alpha: float = 1e-3) -> RidgeFront:
    """The front's part of [`linear_regression`][linear_regression] from its training rows ``X`` (n, d): centring,
    ``lambda = alpha x tr(Xc^T Xc) / d`` and one Cholesky factorisation. Raises ``ValueError`` for bad input, a
    constant ``X`` or a system that is not positive definite."""
    alpha = check_alpha(alpha)
    xtr, _ = pair(X, X, "linear-regression", min_n=2)
    xc, sx = centred(xtr, "X (train rows)", "linear-regression")
    lam = alpha * sx / xtr.shape[1]  # alpha x mean eigenvalue of xc^T xc (scale-free)
    n, d = xc.shape
    gram = xc.T @ xc if d <= n else xc @ xc.T
    gram.diagonal().add_(lam)
    try:
        factor = torch.linalg.cholesky(gram)
    except torch.linalg.LinAlgError as exc:
        raise ValueError(f"linear-regression: the ridge system is not positive definite in float64 (lambda={lam:g}); "
                         "use a larger alpha") from exc
    return RidgeFront(xc, xtr.mean(dim=0), lam, factor, alpha)


def _fit_score(front: RidgeFront, ytr, xte, yte) -> tuple[float, dict]:
    """The variance-weighted R^2 on (xte, yte) of the ridge map from ``front`` to ``ytr``, and details."""
    if ytr.shape[0] != front.xc.shape[0]:
        raise ValueError(f"linear-regression: X has {front.xc.shape[0]} train rows but Y has {ytr.shape[0]}; they "
                         "must be the same inputs")
    if xte.shape[1] != front.xc.shape[1]:
        raise ValueError(f"linear-regression: train rows have {front.xc.shape[1]}/{ytr.shape[1]} features but test "
                         f"rows {xte.shape[1]}/{yte.shape[1]}; both must come from the same layers")
    yc, _ = centred(ytr, "Y (train rows)", "linear-regression")
    residual = (yte - ytr.mean(dim=0)) - front.predict(yc, xte - front.mean)
    total = float(torch.linalg.vector_norm(yte - yte.mean(dim=0)) ** 2)
    if not total > 0.0:
        raise ValueError("linear-regression: Y is constant over the test rows (zero total variance), so R^2 is "
                         "undefined (0/0); check that the layer is not dead or that the inputs differ")
    r2 = 1.0 - float(torch.linalg.vector_norm(residual) ** 2) / total
    return r2, {"alpha": front.alpha, "ridge_lambda": front.lam, "n_train": int(ytr.shape[0]),
                "n_test": int(xte.shape[0])}


def linear_regression_from_front(front: RidgeFront, Y: ArrayLike, X_test: ArrayLike, Y_test: ArrayLike, *,
                                 details: bool = False) -> float | Measured:
    """[`linear_regression`][linear_regression] with given test rows, from the front's `ridge_front`: ``Y`` (n, dy)
    the end's training rows (the inputs of the front's), ``X_test`` / ``Y_test`` the test rows of both."""
    ytr, _ = pair(Y, Y, "linear-regression", min_n=2)
    xte, yte = pair(X_test, Y_test, "linear-regression", min_n=2)
    if yte.shape[1] != ytr.shape[1]:
        raise ValueError(f"linear-regression: train rows have {front.xc.shape[1]}/{ytr.shape[1]} features but test "
                         f"rows {xte.shape[1]}/{yte.shape[1]}; both must come from the same layers")
    r2, info = _fit_score(front, ytr, xte, yte)
    info["split"] = "given test rows"
    return finish(r2, info, details)


def _rows(split: dict, n: int, seed: int) -> tuple[np.ndarray, np.ndarray, str]:
    if split is None:
        order = np.random.default_rng(seed).permutation(n)
        cut = min(n - 2, max(2, int(math.ceil(TRAIN_FRACTION * n))))
        return order[:cut], order[cut:], f"random {cut}/{n - cut} rows (seed {seed})"
    unknown = set(split) - {"train", "test"}
    if unknown or "train" not in split or "test" not in split:
        raise ValueError(f"linear-regression: split must be {{'train': rows, 'test': rows}} (got keys {sorted(split)})")
    return np.asarray(split["train"], dtype=np.int64), np.asarray(split["test"], dtype=np.int64), "given"


def linear_regression(X: ArrayLike, Y: ArrayLike, alpha: float = 1e-3, *, X_test: ArrayLike = None,
                      Y_test: ArrayLike = None, split: dict | None = None, seed: int = 0,
                      details: bool = False) -> float | Measured:
    """Variance-weighted R^2 of a ridge map from X (front) to Y (end), fitted and scored on separate rows.

    ``R^2 = 1 - sum ||y_i - yhat_i||^2 / sum ||y_i - mean(y)||^2`` over the test rows (all end units
    together: sklearn's ``r2_score(multioutput="variance_weighted")``), with ``yhat = (x - mx) W + my``
    fitted on the training rows (means ``mx``, ``my`` of those rows) and ``W`` the ridge solution with
    ``lambda = alpha x tr(Xc^T Xc) / dx``: ``alpha`` is relative to the mean eigenvalue of the front's
    (training) covariance, so the score does not change when X is rescaled. Default ``alpha = 1e-3``:
    it shrinks only directions with under 0.1% of the mean variance (dead or near-constant units) and
    bounds the condition number of the solve by ``1 + dx / alpha`` (1e8 for dx = 1e5), so the fit stays
    accurate in float64 and barely differs from least squares when the data determine it.

    Rows: ``X_test``/``Y_test`` given: X, Y are the training rows. Else ``split={"train": rows, "test":
    rows}`` (index arrays) of X, Y; else a random permutation from ``numpy.random.default_rng(seed)``,
    its first ceil(0.8 n) rows for training (``details["split"]`` says which was used).

    Args:
        X: (n, dx) front activations.
        Y: (n, dy) end activations of the same inputs.
        alpha: relative ridge strength, > 0.
        details: return a [`Measured`][Measured] (``alpha``,
            ``ridge_lambda``, ``n_train``, ``n_test``, ``split``).

    Returns:
        R^2 (<= 1; 1 is a perfect linear map; below 0 is worse than predicting the mean), or a [`Measured`][Measured].

    Raises:
        ValueError: bad input, ``alpha`` not a positive finite number, fewer than 2 train or test rows, a
            constant side, or a bad ``split``.
    """
    alpha = check_alpha(alpha)
    if (X_test is None) != (Y_test is None):
        raise ValueError("linear-regression: pass both X_test and Y_test, or neither")
    if X_test is not None:
        xtr, ytr = pair(X, Y, "linear-regression", min_n=2)
        xte, yte = pair(X_test, Y_test, "linear-regression", min_n=2)
        how = "given test rows"
    else:
        x, y = pair(X, Y, "linear-regression", min_n=4)
        train, test, how = _rows(split, x.shape[0], seed)
        if len(train) < 2 or len(test) < 2:
            raise ValueError("linear-regression: the split needs at least 2 train and 2 test rows")
        tr, te = torch.as_tensor(train, device=x.device), torch.as_tensor(test, device=x.device)
        xtr, ytr, xte, yte = x[tr], y[tr], x[te], y[te]
    if xte.shape[1] != xtr.shape[1] or yte.shape[1] != ytr.shape[1]:
        raise ValueError(f"linear-regression: train rows have {xtr.shape[1]}/{ytr.shape[1]} features but test rows "
                         f"{xte.shape[1]}/{yte.shape[1]}; both must come from the same layers")
    r2, info = _fit_score(ridge_front(xtr, alpha), ytr, xte, yte)
    info["split"] = how
    return finish(r2, info, details)
