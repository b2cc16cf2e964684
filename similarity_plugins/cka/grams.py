"""Gram matrices (linear, RBF), their centring (biased and unbiased) and CKA from Gram matrices."""

from __future__ import annotations

import math

import numpy as np

from ..utils.arrays import ArrayLike, as_samples, check_same_n, raise_nonfinite, to_numpy
from .inputs import centered_float64, check_debiased_n, check_min_samples


# --------------------------------------------------------------------------- Gram matrices
def gram_rows(xc: np.ndarray) -> np.ndarray:
    """``xc @ xc.T`` (n x n, float64, symmetric; NumPy uses a rank-k update for this form)."""
    return xc @ xc.T


def gram_cols(xc: np.ndarray) -> np.ndarray:
    """``xc.T @ xc`` (d x d, float64, symmetric).

    NumPy recognises the ``A.T @ A`` form and calls the symmetric rank-k update (half the flops of a
    GEMM). NumPy's own BLAS is used on purpose for every product here: a second OpenBLAS (SciPy's)
    leaves its threads spinning after each call and slows NumPy's next GEMM down by up to 2x.
    """
    return xc.T @ xc


def _sq_dist_inplace(gram: np.ndarray) -> np.ndarray:
    """Turn a linear Gram matrix into squared pairwise distances, in place (reference order)."""
    sq_norms = np.diag(gram).copy()
    gram *= -2.0
    gram += sq_norms[:, None]
    gram += sq_norms[None, :]
    return gram


def rbf_inplace(gram: np.ndarray, threshold: float, name: str) -> np.ndarray:
    """Linear Gram matrix -> RBF Gram matrix, in place, bandwidth from the median squared distance."""
    sq = _sq_dist_inplace(gram)
    sq_median = float(np.median(sq))
    if not np.isfinite(sq).all():
        raise ValueError(f"the squared pairwise distances of {name} overflow float64; rescale {name} (divide it by "
                         f"a large constant): the RBF bandwidth follows its scale, so CKA is unchanged")
    if not sq.any():
        raise ValueError(f"every squared pairwise distance of {name} is 0: its rows are identical, or so small that "
                         f"their squares underflow float64 (then rescale {name}: RBF CKA is unchanged by it)")
    if not sq_median > 0.0:
        raise ValueError(
            f"the median squared pairwise distance of {name} is {sq_median:g} (more than half of the "
            "pairs of rows are identical), so the RBF bandwidth is zero; use kernel='linear' or "
            "deduplicate the samples"
        )
    np.divide(sq, -(2.0 * threshold**2 * sq_median), out=sq)
    np.exp(sq, out=sq)
    return sq


def center_inplace(gram: np.ndarray, unbiased: bool) -> np.ndarray:
    """Kornblith's ``center_gram`` applied in place to a float64 symmetric matrix."""
    n = gram.shape[0]
    if unbiased:
        np.fill_diagonal(gram, 0.0)
        means = np.sum(gram, 0, dtype=np.float64) / (n - 2)
        means -= np.sum(means) / (2 * (n - 1))
        gram -= means[:, None]
        gram -= means[None, :]
        np.fill_diagonal(gram, 0.0)
    else:
        means = np.mean(gram, 0, dtype=np.float64)
        means -= np.mean(means) / 2
        gram -= means[:, None]
        gram -= means[None, :]
    return gram


def check_threshold(threshold: float) -> float:
    """The RBF bandwidth factor as a float; ``ValueError`` unless it is finite and > 0."""
    threshold = float(threshold)
    if not (math.isfinite(threshold) and threshold > 0.0):
        raise ValueError(f"threshold must be a positive finite number (got {threshold})")
    return threshold


def gram_linear(x: ArrayLike) -> np.ndarray:
    """Linear-kernel Gram matrix ``x @ x.T``.

    Args:
        x: (n, d) array or tensor (higher rank is flattened after axis 0).

    Returns:
        (n, n) float64 NumPy array.
    """
    arr = np.asarray(as_samples(to_numpy(x, "x"), "x"), dtype=np.float64)
    return gram_rows(arr)


def gram_rbf(x: ArrayLike, threshold: float = 1.0) -> np.ndarray:
    """RBF-kernel Gram matrix, bandwidth set from the median squared distance (Kornblith et al.).

    ``K_ij = exp(-||x_i - x_j||^2 / (2 * threshold^2 * median(D)))`` where ``D`` holds all n^2 squared
    pairwise distances (diagonal zeros included), computed as ``-2 x x^T + |x_i|^2 + |x_j|^2`` from the
    column-centred rows (translation-invariant, more accurate than the raw rows).

    Args:
        x: (n, d) array or tensor (higher rank is flattened after axis 0).
        threshold: bandwidth as a fraction of the median distance; > 0.

    Returns:
        (n, n) float64 NumPy array with unit diagonal.

    Raises:
        ValueError: non-finite input, threshold <= 0, or a zero median distance.
    """
    threshold = check_threshold(threshold)
    xc, _ = centered_float64(as_samples(to_numpy(x, "x"), "x"), "x")
    return rbf_inplace(gram_rows(xc), threshold, "x")


def _as_gram(gram: ArrayLike, name: str) -> np.ndarray:
    arr = np.asarray(to_numpy(gram, name), dtype=np.float64)
    if arr.ndim != 2 or arr.shape[0] != arr.shape[1] or arr.shape[0] == 0:
        raise ValueError(f"{name} must be a non-empty square (n, n) Gram matrix, got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise_nonfinite(arr, name)
    if not np.allclose(arr, arr.T):
        raise ValueError(f"{name} is not symmetric; a Gram matrix must equal its transpose")
    return arr


def center_gram(gram: ArrayLike, unbiased: bool = False) -> np.ndarray:
    """Centre a symmetric Gram matrix (Kornblith et al.'s ``center_gram``).

    Biased: ``H K H`` with ``H = I - 11^T/n``. Unbiased: the U-centring of Song et al. 2012 /
    Szekely and Rizzo (zero diagonal), whose inner products give the unbiased HSIC estimator up to the
    factor ``n (n - 3)``.

    Args:
        gram: (n, n) symmetric matrix (n >= 4 when ``unbiased``).
        unbiased: use the U-statistic centring.

    Returns:
        A new (n, n) float64 NumPy array.
    """
    arr = _as_gram(gram, "gram")
    check_debiased_n(arr.shape[0], unbiased)
    return center_inplace(arr.copy(), unbiased)


def cka_from_grams(gram_x: ArrayLike, gram_y: ArrayLike, debiased: bool = False) -> float:
    """CKA from two Gram matrices: ``<Kc, Lc> / (||Kc||_F ||Lc||_F)`` after (U-)centring.

    Args:
        gram_x: (n, n) symmetric Gram matrix of the first representation.
        gram_y: (n, n) symmetric Gram matrix of the second representation.
        debiased: use the unbiased HSIC estimator (n >= 4).

    Returns:
        CKA as a Python float (biased: in [0, 1]; debiased may be slightly negative).
    """
    kx = _as_gram(gram_x, "gram_x")
    ky = _as_gram(gram_y, "gram_y")
    n = check_same_n(kx, ky, "gram_x", "gram_y")
    check_min_samples(n, debiased)
    kx = center_inplace(kx.copy(), debiased)
    ky = center_inplace(ky.copy(), debiased)
    hxy = float(np.vdot(kx, ky))
    hxx = float(np.vdot(kx, kx))
    hyy = float(np.vdot(ky, ky))
    for h, name in ((hxx, "gram_x"), (hyy, "gram_y")):
        if not h > 0.0:
            raise ValueError(
                f"{name} is zero after centring (a constant representation); CKA is undefined (0/0)"
            )
    return hxy / (math.sqrt(hxx) * math.sqrt(hyy))
