"""HSIC terms of linear CKA in feature space and Gram space, and the choice between them by cost."""

from __future__ import annotations

import math

import numpy as np

from ..utils.arrays import format_bytes, raise_if_constant, raise_nonfinite
from .grams import center_inplace, gram_cols, gram_rows, rbf_inplace
from .inputs import DEGENERATE_RTOL, GRAM_PASS_FLOPS, UNDERFLOW_MSG, on_both


# --------------------------------------------------------------------------- HSIC terms
def debiased_term(xty: float, r_dot: float, sum_rx: float, sum_ry: float, n: int) -> tuple[float, float]:
    """n(n-3) * unbiased HSIC in feature space, and the magnitude of its terms (rounding scale).

    With centred rows, ``K~`` = K with zero diagonal and ``r_i = |x_i|^2``: ``tr(K~L~) = xty - r.s``,
    ``1^T K~ 1 = -sum(r)``, ``1^T K~ L~ 1 = r.s``, which gives Kornblith's feature-space helper.
    """
    a = xty
    b = n / (n - 2.0) * r_dot
    c = sum_rx * sum_ry / ((n - 1.0) * (n - 2.0))
    return a - b + c, abs(a) + abs(b) + abs(c)


def row_sq_norms(xc: np.ndarray) -> np.ndarray:
    """Squared Euclidean norm of every row, (n,) float64."""
    return np.einsum("ij,ij->i", xc, xc)


def fro2(a: np.ndarray) -> float:
    """Squared Frobenius norm (no copy for strided views)."""
    return float(np.einsum("ij,ij->", a, a))


# Algebraic centring is used while n |mean|^2 <= _CENTRING_RATIO * sum of squared deviations: it then
# costs at most log10(ratio) + log10(sqrt(d)) of float64's 16 digits (below 1e-11 relative for d < 1e5).
_CENTRING_RATIO = 100.0


def _z_terms(
    z: np.ndarray, d1: int, d2: int, centred: bool, debiased: bool
) -> tuple[tuple[float, ...], np.ndarray]:
    """HSIC terms in feature space from ``z = [X | Y | 1]``, and the column sums of ``[X | Y]``.

    One symmetric rank-k update ``z^T z`` gives ``X^T X``, ``Y^T Y``, ``X^T Y`` and (through the
    column of ones) the column sums ``s`` at once. Unless ``centred``, centring is algebraic:
    ``Xc^T Yc = X^T Y - s_x s_y^T / n``, and centred squared row norms are ``|x_i|^2 - 2 x_i.m + |m|^2``.
    Terms: (hsic_xy, hsic_xx, hsic_yy, tol_xx, tol_yy, ss_x, ss_y). Biased: ``||Xc^T Yc||_F^2`` etc.
    Debiased: n(n-3) times the unbiased HSIC (Kornblith et al.'s feature-space form), with ``tol`` the
    rounding scale below which a self-term counts as zero. ``ss``: traces of ``Xc^T Xc``, ``Yc^T Yc``.
    """
    n = z.shape[0]
    dd = d1 + d2
    g = gram_cols(z)
    cxx, cyy, cxy = g[:d1, :d1], g[d1:dd, d1:dd], g[:d1, d1:dd]
    sums = g[dd, :dd].copy()
    mx, my = sums[:d1] / n, sums[d1:] / n
    if not centred:
        cxx -= np.outer(sums[:d1], mx)
        cyy -= np.outer(sums[d1:], my)
        cxy -= np.outer(sums[:d1], my)
    hxy, hxx, hyy = fro2(cxy), fro2(cxx), fro2(cyy)
    ssx, ssy = float(np.trace(cxx)), float(np.trace(cyy))
    tol_x = tol_y = 0.0
    if debiased:
        zx, zy = z[:, :d1], z[:, d1:dd]
        rx, ry = row_sq_norms(zx), row_sq_norms(zy)
        rtol = DEGENERATE_RTOL
        if not centred:
            rx -= 2.0 * (zx @ mx)
            rx += float(mx @ mx)
            ry -= 2.0 * (zy @ my)
            ry += float(my @ my)
            rtol *= _CENTRING_RATIO  # rounding may be that much larger than with centred data
        sum_rx, sum_ry = float(rx.sum()), float(ry.sum())
        hxy, _ = debiased_term(hxy, float(rx @ ry), sum_rx, sum_ry, n)
        hxx, mag_x = debiased_term(hxx, float(rx @ rx), sum_rx, sum_rx, n)
        hyy, mag_y = debiased_term(hyy, float(ry @ ry), sum_ry, sum_ry, n)
        tol_x, tol_y = rtol * mag_x, rtol * mag_y
    return (hxy, hxx, hyy, tol_x, tol_y, ssx, ssy), sums


def feature_cka(xa: np.ndarray, ya: np.ndarray, debiased: bool) -> float:
    """Linear CKA in feature space: no n x n matrix; O((d1 + d2)^2) memory besides one float64 copy.

    1. Copy X and Y into one float64 buffer ``z = [X | Y | 1]`` (two threads; the one float32 ->
       float64 conversion); one symmetric rank-k update then gives every product and the column sums.
    2. Centring is algebraic (no second pass over the data) when the means do not dominate the spread.
    3. Otherwise centre z in place and recompute (exact; also decides constant/degenerate inputs), and
       on under/overflow rescale each block by a power of two (exact; CKA is scale invariant).
    """
    n, d1 = xa.shape
    d2 = ya.shape[1]
    dd = d1 + d2
    z = np.empty((n, dd + 1), dtype=np.float64)
    on_both(np.copyto, (z[:, :d1], xa), (z[:, d1:dd], ya), xa.size + ya.size)
    z[:, dd] = 1.0
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        t, sums = _z_terms(z, d1, d2, False, debiased)
    for block, arr, name in ((sums[:d1], xa, "X"), (sums[d1:], ya, "Y")):
        if not np.isfinite(block).all():  # NaN/Inf propagate into the column sums
            raise_nonfinite(arr, name)
    mx, my = sums[:d1] / n, sums[d1:] / n
    hxy, hxx, hyy, tol_x, tol_y, ssx, ssy = t
    if (
        all(math.isfinite(v) for v in t)
        and n * float(mx @ mx) <= _CENTRING_RATIO * ssx
        and n * float(my @ my) <= _CENTRING_RATIO * ssy
        and hxx > tol_x
        and hyy > tol_y
    ):
        return hxy / (math.sqrt(hxx) * math.sqrt(hyy))
    z[:, :dd] -= sums / n  # exact centring
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        t, _ = _z_terms(z, d1, d2, True, debiased)
    raise_if_constant(xa, "X", t[5], mx)
    raise_if_constant(ya, "Y", t[6], my)
    out = finish_cka(t, debiased)
    if out is None:
        pow2_rescale(z[:, :d1])
        pow2_rescale(z[:, d1:dd])
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            out = finish_cka(_z_terms(z, d1, d2, True, debiased)[0], debiased)
    if out is None:
        raise ValueError(UNDERFLOW_MSG)
    return out


def hsic_gram(
    xc: np.ndarray, yc: np.ndarray, debiased: bool, kernel: str, threshold: float
) -> tuple[float, ...]:
    """The HSIC terms of `_z_terms`, via n x n Gram matrices (at most three alive at once)."""
    grams = []
    ss = []
    scale = []
    for arr, name in ((xc, "X"), (yc, "Y")):
        g = gram_rows(arr)
        ss.append(float(np.trace(g)))
        if kernel == "rbf":
            g = rbf_inplace(g, threshold, name)
        scale.append(float(np.vdot(g, g)))
        grams.append(center_inplace(g, debiased))
    kx, ky = grams
    hxy = float(np.vdot(kx, ky))
    hxx = float(np.vdot(kx, kx))
    hyy = float(np.vdot(ky, ky))
    n = xc.shape[0]
    # Entrywise centring error is a few eps * max|K|; summed in squares over n^2 entries.
    tol_x, tol_y = ((DEGENERATE_RTOL * n) ** 2 * s for s in scale) if debiased else (0.0, 0.0)
    return hxy, hxx, hyy, tol_x, tol_y, ss[0], ss[1]


def linear_plan(n: int, d1: int, d2: int, method: str, budget: int) -> str:
    """Pick feature or Gram space for linear CKA by flop count, subject to the memory budget.

    feature: n (d1^2 + d2^2) / 2 + n d1 d2 flops, 8 (d1 + d2)^2 bytes;
    gram:    n^2 (d1 + d2) / 2 flops + ~6 memory-bound passes over n^2 entries, 3 * 8 n^2 bytes;
    both also hold float64 copies of X and Y (8 n (d1 + d2) bytes).
    """
    copy_bytes = 8 * n * (d1 + d2 + 1)  # float64 copies of X and Y
    feat_bytes = 8 * (d1 + d2) ** 2 + copy_bytes
    gram_bytes = 3 * 8 * n * n + copy_bytes
    if method == "feature":
        return "feature"
    if method == "gram":
        return "gram"
    feat_cost = n * (d1 * d1 + d2 * d2) / 2.0 + float(n) * d1 * d2
    gram_cost = float(n) * n * (d1 + d2) / 2.0 + GRAM_PASS_FLOPS * float(n) * n
    feat_fits, gram_fits = feat_bytes <= budget, gram_bytes <= budget
    if feat_fits and gram_fits:
        return "feature" if feat_cost <= gram_cost else "gram"
    if feat_fits:
        return "feature"
    if gram_fits:
        return "gram"
    raise ValueError(
        f"linear CKA on n={n} samples with d1={d1}, d2={d2} features needs either "
        f"{format_bytes(feat_bytes)} (feature space, d x d matrices) or {format_bytes(gram_bytes)} (Gram space, n x n "
        f"matrices) but the budget is {format_bytes(budget)} (max_gram_bytes / available memory); "
        "reduce the feature dimension (e.g. pool spatial maps) or the number of samples"
    )


def finish_cka(
    terms: tuple[float, ...], debiased: bool, names: tuple[str, str] = ("X", "Y")
) -> float | None:
    """CKA from HSIC terms, ``None`` if they under/overflowed (caller rescales), or raise if degenerate."""
    hxy, hxx, hyy, tol_x, tol_y = terms[:5]
    if not (math.isfinite(hxy) and math.isfinite(hxx) and math.isfinite(hyy)):
        return None
    if debiased:
        if (hxx == 0.0 and tol_x == 0.0) or (hyy == 0.0 and tol_y == 0.0):
            return None  # every term underflowed
    elif hxx == 0.0 or hyy == 0.0:
        return None
    for h, tol, name in ((hxx, tol_x, names[0]), (hyy, tol_y, names[1])):
        if debiased and h <= tol:
            raise ValueError(
                f"the debiased self-similarity HSIC({name}, {name}) is zero within rounding "
                f"({h:.3g}): {name} is degenerate for the unbiased estimator (e.g. all rows equal "
                "but one); use debiased=False"
            )
    return hxy / (math.sqrt(hxx) * math.sqrt(hyy))


def pow2_rescale(arr: np.ndarray) -> None:
    """Scale ``arr`` in place by a power of two so that max |arr| is about 1 (exact, CKA-invariant)."""
    m = float(np.max(np.abs(arr)))
    if m > 0.0 and math.isfinite(m):
        np.ldexp(arr, -math.frexp(m)[1], out=arr)  # exact, also where 2**-e itself would overflow (subnormal m)
