"""Linear (ridge) regression from the front's activations to the end's: variance-weighted R^2 on held-out rows."""

from __future__ import annotations

import math

import numpy as np
import torch

from ..utils.arrays import ArrayLike
from .common import Measured, centred, finish, pair

__all__ = ["DEFAULT_ALPHA", "TRAIN_FRACTION", "linear_regression"]

#: ridge strength relative to the mean eigenvalue of the front's training covariance (see the docstring)
DEFAULT_ALPHA = 1e-3
#: share of the rows used for fitting when no split is given (a seeded random permutation)
TRAIN_FRACTION = 0.8


def _ridge_predict(xc: torch.Tensor, yc: torch.Tensor, xq: torch.Tensor, lam: float) -> torch.Tensor:
    """Ridge prediction ``xq W`` with ``W = (xc^T xc + lam I)^{-1} xc^T yc`` by a Cholesky solve: in feature
    space when d <= n, else in sample space (``xq xc^T (xc xc^T + lam I)^{-1} yc``, the same map)."""
    n, d = xc.shape
    try:
        if d <= n:
            gram = xc.T @ xc
            gram.diagonal().add_(lam)
            return xq @ torch.cholesky_solve(xc.T @ yc, torch.linalg.cholesky(gram))
        gram = xc @ xc.T
        gram.diagonal().add_(lam)
        return (xq @ xc.T) @ torch.cholesky_solve(yc, torch.linalg.cholesky(gram))
    except torch.linalg.LinAlgError as exc:
        raise ValueError(f"linear-regression: the ridge system is not positive definite in float64 (lambda={lam:g}); "
                         "use a larger alpha") from exc


def _fit_score(xtr, ytr, xte, yte, alpha: float) -> tuple[float, dict]:
    """Fit the ridge map on (xtr, ytr), return the variance-weighted R^2 on (xte, yte) and details."""
    xc, sx = centred(xtr, "X (train rows)", "linear-regression")
    yc, _ = centred(ytr, "Y (train rows)", "linear-regression")
    mx, my = xtr.mean(dim=0), ytr.mean(dim=0)
    lam = alpha * sx / xtr.shape[1]  # alpha x mean eigenvalue of xc^T xc (scale-free)
    residual = (yte - my) - _ridge_predict(xc, yc, xte - mx, lam)
    total = float(torch.linalg.vector_norm(yte - yte.mean(dim=0)) ** 2)
    if not total > 0.0:
        raise ValueError("linear-regression: Y is constant over the test rows (zero total variance), so R^2 is "
                         "undefined (0/0); check that the layer is not dead or that the inputs differ")
    r2 = 1.0 - float(torch.linalg.vector_norm(residual) ** 2) / total
    return r2, {"alpha": alpha, "ridge_lambda": lam, "n_train": int(xtr.shape[0]), "n_test": int(xte.shape[0])}


def _rows(split: dict, n: int, seed: int) -> tuple[np.ndarray, np.ndarray, str]:
    if split is None:
        order = np.random.default_rng(seed).permutation(n)
        cut = min(n - 2, max(2, int(math.ceil(TRAIN_FRACTION * n))))
        return order[:cut], order[cut:], f"random {cut}/{n - cut} rows (seed {seed})"
    unknown = set(split) - {"train", "test"}
    if unknown or "train" not in split or "test" not in split:
        raise ValueError(f"linear-regression: split must be {{'train': rows, 'test': rows}} (got keys {sorted(split)})")
    return np.asarray(split["train"], dtype=np.int64), np.asarray(split["test"], dtype=np.int64), "given"


def linear_regression(X: ArrayLike, Y: ArrayLike, alpha: float = DEFAULT_ALPHA, *, X_test: ArrayLike = None,
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
        X: (n, dx) front activations. Y: (n, dy) end activations of the same inputs.
        alpha: relative ridge strength, > 0. details: return a [`Measured`][Measured] (``alpha``,
            ``ridge_lambda``, ``n_train``, ``n_test``, ``split``).

    Returns:
        R^2 (<= 1; 1 is a perfect linear map; below 0 is worse than predicting the mean), or a [`Measured`][Measured].

    Raises:
        ValueError: bad input, ``alpha`` not a positive finite number, fewer than 2 train or test rows, a
            constant side, or a bad ``split``.
    """
    alpha = float(alpha)
    if not (math.isfinite(alpha) and alpha > 0.0):
        raise ValueError(f"linear-regression: alpha must be a positive finite number (got {alpha!r})")
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
    r2, info = _fit_score(xtr, ytr, xte, yte, alpha)
    info["split"] = how
    return finish(r2, info, details)
