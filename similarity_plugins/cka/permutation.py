"""Permutation test of CKA: the null distribution of CKA(X, P Y) over seeded row permutations P of Y.

Permuting the rows of Y permutes the rows and columns of its centred Gram matrix ``Lc`` (centring, biased or
unbiased, commutes with permutations) and leaves both self-HSIC terms unchanged, so each null value is
``<Kc, P Lc P^T> / sqrt(<Kc, Kc> <Lc, Lc>)``: no new Gram matrix, kernel bandwidth or centring. Linear CKA
computes ``<Kc, P Lc P^T> = ||Xc^T P Yc||_F^2`` in feature space (a batched GEMM; the debiased estimator adds
one dot product of row norms) when that is cheaper than the O(n^2) gathers of the Gram route.

Linear CKA (biased) is the RV coefficient; for it and for the other two forms, whose statistic has the same
``sum_ij A_ij B_{p(i) p(j)}`` shape, ``p_value_analytic`` comes from the exact first three moments of the
permutation distribution (`pearson3_p_value`).
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
import torch

from ..stats.calibration import check_alpha
from ..stats.designs import plan_permutations
from ..stats.permutation import GATHER_COST, batch_size, check_cost, pearson3_p_value, permuted_inner, summarise
from ..utils.arrays import ArrayLike, as_samples, available_bytes, check_same_n, to_numpy
from .grams import center_inplace, check_threshold, gram_rows, rbf_inplace
from .hsic import debiased_term, row_sq_norms
from .inputs import centered_float64, check_debiased_n


def _compressed(xc: np.ndarray) -> np.ndarray:
    """``xc`` (n, d) with the same Gram matrix ``xc xc^T`` but at most n columns (thin QR of ``xc^T``)."""
    n, d = xc.shape
    if d <= n:
        return xc
    return torch.linalg.qr(torch.from_numpy(xc.T), mode="r")[1].T.contiguous().numpy()


def _feature_terms(xc: np.ndarray, yc: np.ndarray, debiased: bool) -> tuple[float, float, Any]:
    """The self-HSIC terms of the feature route and a function: permutations (b, n) -> cross terms (b,)."""
    n = xc.shape[0]
    rx, ry = row_sq_norms(xc), row_sq_norms(yc)
    hxx, hyy = float(np.sum((xc.T @ xc) ** 2)), float(np.sum((yc.T @ yc) ** 2))
    if debiased:
        hxx = debiased_term(hxx, float(rx @ rx), float(rx.sum()), float(rx.sum()), n)[0]
        hyy = debiased_term(hyy, float(ry @ ry), float(ry.sum()), float(ry.sum()), n)[0]
    xt, yt, rxt, ryt = (torch.from_numpy(v) for v in (np.ascontiguousarray(xc.T), yc, rx, ry))

    def cross(perms: torch.Tensor) -> torch.Tensor:
        b, dy = len(perms), yt.shape[1]
        stacked = yt[perms.T.reshape(-1)].reshape(n, b * dy)  # column block k: P_k Yc
        m = (xt @ stacked).reshape(xt.shape[0], b, dy)
        out = (m * m).sum(dim=(0, 2))
        if debiased:
            sums = (float(rx.sum()), float(ry.sum()))
            dots = ryt[perms] @ rxt
            out = out - n / (n - 2.0) * dots + sums[0] * sums[1] / ((n - 1.0) * (n - 2.0))
        return out

    return hxx, hyy, cross


def _grams(xc: np.ndarray, yc: np.ndarray, kernel: str, debiased: bool, threshold: float) -> tuple[np.ndarray, ...]:
    out = []
    for arr, name in ((xc, "X"), (yc, "Y")):
        g = gram_rows(arr)
        if kernel == "rbf":
            g = rbf_inplace(g, threshold, name)
        out.append(center_inplace(g, debiased))
    return tuple(out)


def _statistic(xc: np.ndarray, yc: np.ndarray, kernel: str, debiased: bool, threshold: float, feature: bool,
               k: int) -> tuple[float, float, Callable[[torch.Tensor], torch.Tensor], int, tuple | None]:
    """The test statistic's parts for centred ``xc`` (n, dx) and ``yc`` (n, dy): the two self-HSICs, the cross
    term of a batch of permutations, the permutations per batch and the two Gram matrices (None in feature
    space). ``ValueError`` when a self-HSIC is not positive."""
    n, grams = xc.shape[0], None
    if feature:
        hxx, hyy, cross = _feature_terms(xc, yc, debiased)
        batch = batch_size(8.0 * n * (yc.shape[1] + xc.shape[1]), k)
    else:
        grams = _grams(xc, yc, kernel, debiased, threshold)
        kx, ky = (torch.from_numpy(g) for g in grams)
        hxx, hyy = float(np.vdot(grams[0], grams[0])), float(np.vdot(grams[1], grams[1]))
        cross = lambda perms: permuted_inner(kx, ky, perms)  # noqa: E731
        batch = batch_size(8.0 * n, k)  # one at a time inside; the batch bounds the permutations' own storage
    if not (hxx > 0.0 and hyy > 0.0):
        raise ValueError("CKA permutation test: a side's self-HSIC is not positive (a constant or degenerate "
                         "representation); the test is undefined")
    return hxx, hyy, cross, batch, grams


def cka_range(debiased: bool) -> tuple[float, float]:
    """The values CKA can take: [0, 1] for the biased estimator, [-1, 1] for the debiased one."""
    return (-1.0, 1.0) if debiased else (0.0, 1.0)


def cka_permutation_test(X: ArrayLike, Y: ArrayLike, kernel: str = "linear", debiased: bool = False,
                         threshold: float = 1.0, *, permutations: Any = 999, seed: int = 0,
                         analytic: bool = True, null_values: bool = False, alpha: float = 0.05,
                         groups: Any = None, permute: str = "within") -> dict[str, Any]:
    """The permutation test of [`cka`][similarity_plugins.cka.functional.cka] between X and row-permuted copies of Y.

    Args:
        X: (n, dx) array or tensor (higher rank flattens after axis 0).
        Y: (n, dy), the same n inputs.
        kernel: as [`cka`][similarity_plugins.cka.functional.cka].
        debiased: as [`cka`][similarity_plugins.cka.functional.cka].
        threshold: as [`cka`][similarity_plugins.cka.functional.cka].
        permutations: K >= 1 seeded permutations of Y's rows, or a (K, n) integer array of permutations (row k
            pairs X with ``Y[perms[k]]``; `similarity_plugins.stats.designs`).
        seed: the permutations' seed (`draws`).
        analytic: also compute ``p_value_analytic`` (needs the two n x n matrices; left out, with a warning in
            ``warnings``, when they do not fit in a quarter of the free memory, and with ``groups``: it is the
            law of all n! permutations).
        null_values: also return the K null values in permutation order (``null_values``, `summarise`).
        alpha: the level of the calibrated score's critical value ``tau``, in (0, 1).
        groups: one label per row: permutations move rows only inside their group, or whole groups (``permute``).
        permute: ``"within"`` or ``"groups"`` (with ``groups``).

    Returns:
        ``{"p_value", "null_mean", "null_std", "permutations", "alpha", "tau", "calibrated"[, "p_value_analytic"]
            [, "warnings"][, "null_values"]}``: the one-sided p-value (1 + #null >= observed) / (K + 1), the null's
            mean and standard deviation (CKA units), the critical value and the calibrated score
            (`similarity_plugins.stats.calibration`; upper bound 1), and for a restricted design ``permute`` and
            ``groups`` (their number).

    Raises:
        ValueError: bad input (as [`cka`][similarity_plugins.cka.functional.cka]) or bad permutation options.
    """
    alpha = check_alpha(alpha)
    threshold = check_threshold(threshold)
    xa, ya = as_samples(to_numpy(X, "X"), "X"), as_samples(to_numpy(Y, "Y"), "Y")
    n = check_same_n(xa, ya)
    plan = plan_permutations(permutations, n, seed, groups, permute)
    k = plan.k
    check_debiased_n(n, debiased)
    xc, yc = centered_float64(xa, "X")[0], centered_float64(ya, "Y")[0]
    if kernel == "linear":
        xc, yc = _compressed(xc), _compressed(yc)
    feature = kernel == "linear" and 2.0 * xc.shape[1] * yc.shape[1] <= GATHER_COST * n
    free = float(available_bytes())
    gram_bytes = 16.0 * n * n
    work = 2.0 * n * xc.shape[1] * yc.shape[1] if feature else 3.0 * n * n * GATHER_COST
    notes = [check_cost(k, work, "CKA permutation test", 0.0 if feature else gram_bytes, free, n, plan.distinct())]
    hxx, hyy, cross, batch, grams = _statistic(xc, yc, kernel, debiased, threshold, feature, k)
    scale = math.sqrt(hxx) * math.sqrt(hyy)
    identity = torch.arange(n)[None]
    observed_t = float(cross(identity)[0])
    null = torch.cat([cross(perms) for perms in plan.batches(batch)]) / scale
    out = summarise(observed_t / scale, null, "similarity", keep_null=null_values, alpha=alpha,
                    bounds=cka_range(debiased))
    out.update(plan.details())
    if analytic and plan.groups is None:
        if grams is None and 3.0 * gram_bytes <= free / 4:
            grams = _grams(xc, yc, kernel, debiased, threshold)
        if grams is not None:
            kx, ky = (torch.from_numpy(g) for g in grams)
            out["p_value_analytic"] = pearson3_p_value(observed_t, kx, ky)
        else:
            notes.append(f"p_value_analytic left out: its two {n} x {n} matrices need {gram_bytes / 2**30:.3g} GiB")
    notes = [w for w in notes if w]
    if notes:
        out["warnings"] = notes
    return out
