"""Array-level CKA: NumPy arrays or torch tensors in, a Python float out.

Definitions follow Kornblith et al. 2019 ("Similarity of Neural Network Representations Revisited")
and their reference colab code: ``gram_linear``, ``gram_rbf`` (bandwidth = ``threshold`` times the
median of all squared pairwise distances), ``center_gram`` (with the unbiased U-statistic form of
Song et al. 2012) and CKA = HSIC(K, L) / sqrt(HSIC(K, K) HSIC(L, L)). Everything is computed in
float64 on the CPU; torch tensors on any device are moved to the CPU first.

Linear CKA never builds n x n Gram matrices when the feature dimensions are small: it works in
feature space with ``X^T Y``, ``X^T X`` and ``Y^T Y`` (column-centred, float64; one symmetric rank-k
update of ``[X | Y]``), and switches to Gram space only when that is cheaper (few samples, many
features). :class:`StreamingLinearCKA` gives the same numbers from batches, holding O(d^2) state.
"""

from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Literal

import numpy as np

__all__ = [
    "StreamingLinearCKA",
    "center_gram",
    "cka",
    "cka_from_grams",
    "gram_linear",
    "gram_rbf",
]

ArrayLike = Any  # numpy.ndarray | torch.Tensor | nested sequences of numbers
Kernel = Literal["linear", "rbf"]
LinearMethod = Literal["auto", "feature", "gram"]

_EPS = float(np.finfo(np.float64).eps)
# Rounding-error scale (relative to the terms' magnitude) below which a debiased self-HSIC counts as 0.
_DEGENERATE_RTOL = 1e3 * _EPS
# Gram-space passes over an n x n matrix (centring, dots) are memory-bound; weight per element.
_GRAM_PASS_FLOPS = 40.0
_UNDERFLOW_MSG = "CKA under- or overflowed float64 even after rescaling; check the magnitude of X and Y"
# Inputs with at least this many values (X and Y together) are converted in two threads.
_PARALLEL_PREP_MIN_VALUES = 1 << 20


# --------------------------------------------------------------------------- input handling
def _to_numpy(x: ArrayLike, name: str) -> np.ndarray:
    """A NumPy view (or the cheapest exact copy) of ``x`` with a real floating dtype, on the CPU."""
    if type(x).__module__.split(".")[0] == "torch":
        import torch

        if not isinstance(x, torch.Tensor):
            raise ValueError(f"{name} is a {type(x).__name__}; pass a torch.Tensor or NumPy array")
        t = x.detach()
        if t.is_sparse:
            t = t.to_dense()
        if t.is_complex():
            raise ValueError(f"{name} is complex ({t.dtype}); CKA needs real-valued representations")
        if t.device.type != "cpu":
            t = t.cpu()
        if t.dtype not in (torch.float32, torch.float64):
            t = t.to(torch.float64)  # half, bfloat16, integers, bool: exact in float64
        return t.numpy(force=True)
    arr = np.asarray(x)
    if arr.dtype.kind == "c":
        raise ValueError(f"{name} is complex ({arr.dtype}); CKA needs real-valued representations")
    if arr.dtype not in (np.float32, np.float64):
        try:
            arr = arr.astype(np.float64)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{name} has dtype {arr.dtype}, which is not numeric") from exc
    return arr


def _as_samples(x: ArrayLike, name: str) -> np.ndarray:
    """``x`` as a 2-D (n, d) float32/float64 array; 1-D is (n, 1); higher rank flattens after axis 0."""
    arr = _to_numpy(x, name)
    if arr.ndim == 0:
        raise ValueError(f"{name} is a scalar; pass an array of shape (n_samples, n_features)")
    if arr.size == 0:
        raise ValueError(
            f"{name} is empty (shape {tuple(arr.shape)}); pass at least one sample with at least one feature"
        )
    if arr.ndim == 1:
        arr = arr.reshape(-1, 1)
    elif arr.ndim > 2:
        arr = arr.reshape(arr.shape[0], -1)
    return arr


def _check_same_n(x: np.ndarray, y: np.ndarray, xname: str = "X", yname: str = "Y") -> int:
    if x.shape[0] != y.shape[0]:
        raise ValueError(
            f"{xname} has {x.shape[0]} samples but {yname} has {y.shape[0]}; CKA compares two "
            "representations of the same inputs, so both need one row per input"
        )
    return int(x.shape[0])


def _check_debiased_n(n: int, debiased: bool) -> None:
    if debiased and n < 4:
        raise ValueError(
            f"debiased CKA needs at least 4 samples (its estimator divides by n - 3) but got n={n}; "
            "use more samples or debiased=False"
        )


def _raise_nonfinite(arr: np.ndarray, name: str) -> None:
    if np.isnan(arr).any():
        raise ValueError(f"{name} contains NaN; remove or replace those values before computing CKA")
    if np.isinf(arr).any():
        raise ValueError(f"{name} contains Inf; remove or replace those values before computing CKA")
    raise ValueError(
        f"{name} overflows float64 (max |value| = {float(np.max(np.abs(arr))):.3g}); rescale it "
        "(CKA is invariant to isotropic scaling)"
    )


def _centered_float64(arr: np.ndarray, name: str) -> tuple[np.ndarray, np.ndarray]:
    """A fresh C-contiguous float64 copy of ``arr`` with column means removed, and those means.

    NaN/Inf are detected for free: they make the column means non-finite.
    """
    xc = np.array(arr, dtype=np.float64, order="C", copy=True)
    mean = xc.mean(axis=0)
    if not np.isfinite(mean).all():
        _raise_nonfinite(arr, name)
    xc -= mean
    return xc, mean


_POOL: tuple[int, ThreadPoolExecutor] | None = None


def _prep_pool() -> ThreadPoolExecutor | None:
    """Worker threads for the O(n d) conversions (NumPy releases the GIL there); None on 1 CPU.

    Keyed by process id: a pool inherited through fork() has no threads and would never run.
    """
    global _POOL
    if (os.cpu_count() or 1) < 2:
        return None
    if _POOL is None or _POOL[0] != os.getpid():
        _POOL = (os.getpid(), ThreadPoolExecutor(max_workers=2, thread_name_prefix="similarity_plugins-cka"))
    return _POOL[1]


def _both(fn: Callable[..., Any], args_x: tuple, args_y: tuple, size: int) -> tuple[Any, Any]:
    """``(fn(*args_x), fn(*args_y))``, run concurrently when the work is large enough.

    Element-wise NumPy work is single-threaded while BLAS uses every core, so preparing X and Y side
    by side keeps the conversion a small fraction of the GEMM time. Errors for X are raised first.
    """
    pool = _prep_pool() if size >= _PARALLEL_PREP_MIN_VALUES else None
    if pool is None:
        return fn(*args_x), fn(*args_y)
    fy = pool.submit(fn, *args_y)
    try:
        rx = fn(*args_x)
    finally:
        ry_exc = fy.exception()
    if ry_exc is not None:
        raise ry_exc
    return rx, fy.result()


def _raise_if_constant(arr: np.ndarray, name: str, sum_sq: float, mean: np.ndarray) -> None:
    """Raise if every row of ``arr`` is identical (zero variance).

    ``sum_sq`` is the sum of squares of the centred copy. A constant input leaves only the rounding
    error of its column means, at most about n * eps * |mean| per entry, so the exact (one pass) test
    runs only when ``sum_sq`` is within that bound.
    """
    n = arr.shape[0]
    bound = 16.0 * float(n) ** 3 * _EPS**2 * float(mean @ mean)
    if sum_sq <= bound and (n == 1 or bool((arr == arr[0]).all())):
        raise ValueError(
            f"{name} is constant across samples (zero variance: all {n} rows are identical), so CKA "
            "is undefined (0/0); check that the layer is not dead or that the inputs differ"
        )


def _available_memory_bytes() -> int:
    """Bytes of memory available now (MemAvailable on Linux, else free physical pages)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return 8 * 1024**3


def _gib(nbytes: float) -> str:
    """Human-readable byte count."""
    for unit, size in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if nbytes >= size:
            return f"{nbytes / size:.2f} {unit}"
    return f"{int(nbytes)} bytes"


# --------------------------------------------------------------------------- Gram matrices
def _gram_rows(xc: np.ndarray) -> np.ndarray:
    """``xc @ xc.T`` (n x n, float64, symmetric; NumPy uses a rank-k update for this form)."""
    return xc @ xc.T


def _gram_cols(xc: np.ndarray) -> np.ndarray:
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


def _rbf_inplace(gram: np.ndarray, threshold: float, name: str) -> np.ndarray:
    """Linear Gram matrix -> RBF Gram matrix, in place, bandwidth from the median squared distance."""
    sq = _sq_dist_inplace(gram)
    sq_median = float(np.median(sq))
    if not sq_median > 0.0:
        raise ValueError(
            f"the median squared pairwise distance of {name} is {sq_median:g} (more than half of the "
            "pairs of rows are identical), so the RBF bandwidth is zero; use kernel='linear' or "
            "deduplicate the samples"
        )
    np.divide(sq, -(2.0 * threshold**2 * sq_median), out=sq)
    np.exp(sq, out=sq)
    return sq


def _center_inplace(gram: np.ndarray, unbiased: bool) -> np.ndarray:
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


def _check_threshold(threshold: float) -> float:
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
    arr = np.asarray(_as_samples(x, "x"), dtype=np.float64)
    return _gram_rows(arr)


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
    threshold = _check_threshold(threshold)
    xc, _ = _centered_float64(_as_samples(x, "x"), "x")
    return _rbf_inplace(_gram_rows(xc), threshold, "x")


def _as_gram(gram: ArrayLike, name: str) -> np.ndarray:
    arr = np.asarray(_to_numpy(gram, name), dtype=np.float64)
    if arr.ndim != 2 or arr.shape[0] != arr.shape[1] or arr.shape[0] == 0:
        raise ValueError(f"{name} must be a non-empty square (n, n) Gram matrix, got shape {arr.shape}")
    if not np.isfinite(arr).all():
        _raise_nonfinite(arr, name)
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
    _check_debiased_n(arr.shape[0], unbiased)
    return _center_inplace(arr.copy(), unbiased)


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
    n = _check_same_n(kx, ky, "gram_x", "gram_y")
    _check_debiased_n(n, debiased)
    kx = _center_inplace(kx.copy(), debiased)
    ky = _center_inplace(ky.copy(), debiased)
    hxy = float(np.vdot(kx, ky))
    hxx = float(np.vdot(kx, kx))
    hyy = float(np.vdot(ky, ky))
    for h, name in ((hxx, "gram_x"), (hyy, "gram_y")):
        if not h > 0.0:
            raise ValueError(
                f"{name} is zero after centring (a constant representation); CKA is undefined (0/0)"
            )
    return hxy / (math.sqrt(hxx) * math.sqrt(hyy))


# --------------------------------------------------------------------------- HSIC terms
def _debiased_term(xty: float, r_dot: float, sum_rx: float, sum_ry: float, n: int) -> tuple[float, float]:
    """n(n-3) * unbiased HSIC in feature space, and the magnitude of its terms (rounding scale).

    With centred rows, ``K~`` = K with zero diagonal and ``r_i = |x_i|^2``: ``tr(K~L~) = xty - r.s``,
    ``1^T K~ 1 = -sum(r)``, ``1^T K~ L~ 1 = r.s``, which gives Kornblith's feature-space helper.
    """
    a = xty
    b = n / (n - 2.0) * r_dot
    c = sum_rx * sum_ry / ((n - 1.0) * (n - 2.0))
    return a - b + c, abs(a) + abs(b) + abs(c)


def _row_sq_norms(xc: np.ndarray) -> np.ndarray:
    """Squared Euclidean norm of every row, (n,) float64."""
    return np.einsum("ij,ij->i", xc, xc)


def _fro2(a: np.ndarray) -> float:
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
    g = _gram_cols(z)
    cxx, cyy, cxy = g[:d1, :d1], g[d1:dd, d1:dd], g[:d1, d1:dd]
    sums = g[dd, :dd].copy()
    mx, my = sums[:d1] / n, sums[d1:] / n
    if not centred:
        cxx -= np.outer(sums[:d1], mx)
        cyy -= np.outer(sums[d1:], my)
        cxy -= np.outer(sums[:d1], my)
    hxy, hxx, hyy = _fro2(cxy), _fro2(cxx), _fro2(cyy)
    ssx, ssy = float(np.trace(cxx)), float(np.trace(cyy))
    tol_x = tol_y = 0.0
    if debiased:
        zx, zy = z[:, :d1], z[:, d1:dd]
        rx, ry = _row_sq_norms(zx), _row_sq_norms(zy)
        rtol = _DEGENERATE_RTOL
        if not centred:
            rx -= 2.0 * (zx @ mx)
            rx += float(mx @ mx)
            ry -= 2.0 * (zy @ my)
            ry += float(my @ my)
            rtol *= _CENTRING_RATIO  # rounding may be that much larger than with centred data
        sum_rx, sum_ry = float(rx.sum()), float(ry.sum())
        hxy, _ = _debiased_term(hxy, float(rx @ ry), sum_rx, sum_ry, n)
        hxx, mag_x = _debiased_term(hxx, float(rx @ rx), sum_rx, sum_rx, n)
        hyy, mag_y = _debiased_term(hyy, float(ry @ ry), sum_ry, sum_ry, n)
        tol_x, tol_y = rtol * mag_x, rtol * mag_y
    return (hxy, hxx, hyy, tol_x, tol_y, ssx, ssy), sums


def _feature_cka(xa: np.ndarray, ya: np.ndarray, debiased: bool) -> float:
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
    _both(np.copyto, (z[:, :d1], xa), (z[:, d1:dd], ya), xa.size + ya.size)
    z[:, dd] = 1.0
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        t, sums = _z_terms(z, d1, d2, False, debiased)
    for block, arr, name in ((sums[:d1], xa, "X"), (sums[d1:], ya, "Y")):
        if not np.isfinite(block).all():  # NaN/Inf propagate into the column sums
            _raise_nonfinite(arr, name)
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
    _raise_if_constant(xa, "X", t[5], mx)
    _raise_if_constant(ya, "Y", t[6], my)
    out = _finish(t, debiased)
    if out is None:
        _pow2_rescale(z[:, :d1])
        _pow2_rescale(z[:, d1:dd])
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            out = _finish(_z_terms(z, d1, d2, True, debiased)[0], debiased)
    if out is None:
        raise ValueError(_UNDERFLOW_MSG)
    return out


def _hsic_gram(
    xc: np.ndarray, yc: np.ndarray, debiased: bool, kernel: str, threshold: float
) -> tuple[float, ...]:
    """The HSIC terms of :func:`_z_terms`, via n x n Gram matrices (at most three alive at once)."""
    grams = []
    ss = []
    scale = []
    for arr, name in ((xc, "X"), (yc, "Y")):
        g = _gram_rows(arr)
        ss.append(float(np.trace(g)))
        if kernel == "rbf":
            g = _rbf_inplace(g, threshold, name)
        scale.append(float(np.vdot(g, g)))
        grams.append(_center_inplace(g, debiased))
    kx, ky = grams
    hxy = float(np.vdot(kx, ky))
    hxx = float(np.vdot(kx, kx))
    hyy = float(np.vdot(ky, ky))
    n = xc.shape[0]
    # Entrywise centring error is a few eps * max|K|; summed in squares over n^2 entries.
    tol_x, tol_y = ((_DEGENERATE_RTOL * n) ** 2 * s for s in scale) if debiased else (0.0, 0.0)
    return hxy, hxx, hyy, tol_x, tol_y, ss[0], ss[1]


def _linear_plan(n: int, d1: int, d2: int, method: str, budget: int) -> str:
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
    gram_cost = float(n) * n * (d1 + d2) / 2.0 + _GRAM_PASS_FLOPS * float(n) * n
    feat_fits, gram_fits = feat_bytes <= budget, gram_bytes <= budget
    if feat_fits and gram_fits:
        return "feature" if feat_cost <= gram_cost else "gram"
    if feat_fits:
        return "feature"
    if gram_fits:
        return "gram"
    raise ValueError(
        f"linear CKA on n={n} samples with d1={d1}, d2={d2} features needs either "
        f"{_gib(feat_bytes)} (feature space, d x d matrices) or {_gib(gram_bytes)} (Gram space, n x n "
        f"matrices) but the budget is {_gib(budget)} (max_gram_bytes / available memory); "
        "reduce the feature dimension (e.g. pool spatial maps) or the number of samples"
    )


def _finish(
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


def _pow2_rescale(arr: np.ndarray) -> None:
    """Scale ``arr`` in place by a power of two so that max |arr| is about 1 (exact, CKA-invariant)."""
    m = float(np.max(np.abs(arr)))
    if m > 0.0 and math.isfinite(m):
        arr *= 2.0 ** (-math.frexp(m)[1])


# --------------------------------------------------------------------------- public functional API
def cka(
    X: ArrayLike,
    Y: ArrayLike,
    kernel: Kernel = "linear",
    debiased: bool = False,
    threshold: float = 1.0,
    *,
    method: LinearMethod = "auto",
    max_gram_bytes: int | None = None,
) -> float:
    """Centered Kernel Alignment between two representations of the same n inputs.

    Equal (to float64 rounding) to Kornblith et al.'s reference ``cka(gram_x, gram_y, debiased)`` with
    ``gram_linear`` or ``gram_rbf(., threshold)``. Linear CKA is computed in feature space
    (``||Xc^T Yc||_F^2 / (||Xc^T Xc||_F ||Yc^T Yc||_F)``, and the unbiased HSIC estimator written with
    ``Xc^T Yc``, row norms and their sums) unless n x n Gram matrices are cheaper (``method='auto'``).

    Args:
        X: (n, d1) NumPy array or torch tensor (any device, any real dtype; higher rank is flattened
            after axis 0, 1-D is one feature).
        Y: (n, d2) array or tensor for the same n inputs.
        kernel: ``"linear"`` or ``"rbf"``.
        debiased: use the unbiased HSIC estimator (Song et al. 2012); needs n >= 4.
        threshold: RBF bandwidth as a fraction of the median squared distance (rbf only).
        method: linear only: ``"auto"`` (cheapest that fits), ``"feature"`` or ``"gram"``.
        max_gram_bytes: memory budget in bytes for the n x n (or d x d) float64 matrices; default: the
            memory available now. RBF needs about 3 * 8 * n^2 bytes.

    Returns:
        CKA as a Python float (biased: in [0, 1]; debiased can be slightly negative).

    Raises:
        ValueError: unknown kernel/method, mismatched sample counts, empty input, NaN/Inf (naming the
            argument), n < 4 with ``debiased``, a constant representation, or Gram matrices that would
            not fit in memory (RBF: use linear CKA / ``StreamingLinearCKA`` instead).
    """
    if kernel not in ("linear", "rbf"):
        raise ValueError(f"kernel must be 'linear' or 'rbf' (got {kernel!r})")
    if method not in ("auto", "feature", "gram"):
        raise ValueError(f"method must be 'auto', 'feature' or 'gram' (got {method!r})")
    if kernel == "rbf" and method == "feature":
        raise ValueError("method='feature' exists only for kernel='linear'; RBF CKA needs Gram matrices")
    threshold = _check_threshold(threshold)
    xa = _as_samples(X, "X")
    ya = _as_samples(Y, "Y")
    n = _check_same_n(xa, ya)
    _check_debiased_n(n, debiased)
    budget = int(max_gram_bytes) if max_gram_bytes is not None else _available_memory_bytes()
    if kernel == "rbf":
        need = 3 * 8 * n * n
        if need > budget:
            raise ValueError(
                f"RBF CKA on n={n} samples needs about {_gib(need)} for its {n} x {n} float64 Gram "
                f"matrices (3 x n^2 x 8 bytes) but only {_gib(budget)} is available (max_gram_bytes); "
                "use linear CKA (cka(..., kernel='linear'), the 'cka-linear' metric) or "
                "StreamingLinearCKA, which need no n x n matrices, or subsample the inputs"
            )
        plan = "gram"
    else:
        plan = _linear_plan(n, xa.shape[1], ya.shape[1], method, budget)

    if plan == "feature":
        return _feature_cka(xa, ya, debiased)
    return _gram_cka(xa, ya, debiased, kernel, threshold)


def _gram_cka(xa: np.ndarray, ya: np.ndarray, debiased: bool, kernel: str, threshold: float) -> float:
    """CKA via n x n Gram matrices of the column-centred float64 samples (linear or RBF)."""
    (xc, mx), (yc, my) = _both(_centered_float64, (xa, "X"), (ya, "Y"), xa.size + ya.size)
    # check before building n x n matrices (and before the RBF bandwidth)
    _raise_if_constant(xa, "X", _fro2(xc), mx)
    _raise_if_constant(ya, "Y", _fro2(yc), my)
    for attempt in range(2):
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            out = _finish(_hsic_gram(xc, yc, debiased, kernel, threshold), debiased)
        if out is not None:
            return out
        if attempt == 0:  # under/overflow: rescale exactly by powers of two and retry once
            _pow2_rescale(xc)
            _pow2_rescale(yc)
    raise ValueError(_UNDERFLOW_MSG)


# --------------------------------------------------------------------------- streaming
class StreamingLinearCKA:
    """Exact linear CKA (biased or debiased) from batches, with O((d1 + d2)^2) state.

    Stateful like a torchmetrics metric: ``update(X_batch, Y_batch)`` any number of times (batches may
    differ in size; NumPy arrays or torch tensors on any device; higher rank is flattened after axis 0),
    then ``compute()``; ``reset()`` starts over; ``n`` is the number of samples seen. The result equals
    ``cka(X_all, Y_all, "linear", debiased)`` to float64 rounding.

    State, in float64, about a fixed shift ``c`` (the mean of the first data accumulated, which keeps
    the moments well conditioned): with ``z_i = [x_i - c_x, y_i - c_y]``, ``a_i = |x_i - c_x|^2`` and
    ``b_i = |y_i - c_y|^2`` it holds ``n``, ``G = sum z_i z_i^T`` (so ``X'^T X'``, ``Y'^T Y'``,
    ``X'^T Y'``), ``W = sum z_i [a_i, b_i, 1]`` (so ``X'^T a``, ``X'^T b``, ``Y'^T a``, ``Y'^T b`` and the
    column sums) and ``sum a``, ``sum b``, ``sum a^2``, ``sum b^2``, ``sum a b``. Centring with the
    running mean ``m`` is then algebra: ``Xc^T Yc = X'^T Y' - n m_x m_y^T``, and the centred row norms
    ``r_i = a_i - 2 x'_i.m_x + |m_x|^2`` give ``sum r``, ``sum r_x r_y`` and ``sum r_x^2``, which is all
    the debiased estimator (Kornblith's feature-space form) needs.

    Rule for the state: the moments take ``8 ((d1 + d2)^2 + 4 (d1 + d2) + 5)`` bytes whatever n is, while
    keeping the samples takes ``8 n (d1 + d2)`` bytes. Batches are therefore buffered (copied) while the
    buffer is smaller than the moments would be (n small, d large); as soon as it is not, and the moments
    fit in ``max_state_bytes``, the buffer is folded into the moments and dropped. ``compute()`` on a
    buffer calls :func:`cka`, which uses Gram space when n is small. If neither the moments nor the
    buffer fit in ``max_state_bytes``, ``update`` raises ValueError. A float64 scratch buffer for one
    batch is reused between updates (not counted in ``state_nbytes``).

    Args:
        debiased: use the unbiased HSIC estimator (needs n >= 4 at ``compute``).
        max_state_bytes: memory budget for the state; default: half the memory available at the first
            ``update``.
    """

    def __init__(self, debiased: bool = False, *, max_state_bytes: int | None = None) -> None:
        self.debiased = bool(debiased)
        self.max_state_bytes = max_state_bytes
        self.reset()

    # ----------------------------------------------------------------- state management
    def reset(self) -> None:
        """Forget every sample seen."""
        self.n = 0
        self._d: tuple[int, int] | None = None
        self._budget: int | None = None
        self._buffer: list[tuple[np.ndarray, np.ndarray]] | None = []
        self._m: dict[str, np.ndarray] | None = None
        self._scratch: np.ndarray | None = None
        # Exact constant-representation tracking: the first row, and whether all rows equal it.
        self._first: list[np.ndarray | None] = [None, None]
        self._const = [True, True]

    @property
    def mode(self) -> str:
        """``"buffer"`` while samples are kept, ``"moments"`` once they are folded into moments."""
        return "buffer" if self._m is None else "moments"

    @property
    def state_nbytes(self) -> int:
        """Bytes held by the state now (accumulators, or buffered samples)."""
        if self._m is not None:
            return int(sum(v.nbytes for v in self._m.values()))
        return int(sum(x.nbytes + y.nbytes for x, y in (self._buffer or [])))

    def _moment_bytes(self) -> int:
        d1, d2 = self._d or (0, 0)
        dd = d1 + d2
        return 8 * (dd * dd + 4 * dd + 5)  # g, w, c, scalars (exactly what _fold_buffer allocates)

    def _buffer_bytes_f64(self) -> int:
        d1, d2 = self._d or (0, 0)
        return 8 * self.n * (d1 + d2)

    # ----------------------------------------------------------------- update
    def update(self, X_batch: ArrayLike, Y_batch: ArrayLike) -> None:
        """Add a batch: ``X_batch`` (b, d1) and ``Y_batch`` (b, d2) for the same b inputs."""
        xb = _as_samples(X_batch, "X_batch")
        yb = _as_samples(Y_batch, "Y_batch")
        b = _check_same_n(xb, yb, "X_batch", "Y_batch")
        dims = (xb.shape[1], yb.shape[1])
        if self._d is None:
            self._d = dims
            self._budget = (
                int(self.max_state_bytes)
                if self.max_state_bytes is not None
                else _available_memory_bytes() // 2
            )
        elif dims != self._d:
            raise ValueError(
                f"batches have (d1, d2) = {dims} features but earlier batches had {self._d}; every "
                "batch must come from the same two layers"
            )
        if self._m is not None:
            self._accumulate(xb, yb)
            self._track_constant(xb, yb)
            self.n += b
            return
        self._check_finite_batch(xb, "X_batch")
        self._check_finite_batch(yb, "Y_batch")
        self._track_constant(xb, yb)
        assert self._buffer is not None and self._budget is not None
        self._buffer.append((np.array(xb, copy=True), np.array(yb, copy=True)))
        self.n += b
        moment_bytes = self._moment_bytes()
        if self._buffer_bytes_f64() >= moment_bytes and moment_bytes <= self._budget:
            self._fold_buffer()
        elif self.state_nbytes > self._budget:
            d1, d2 = self._d
            raise ValueError(
                f"StreamingLinearCKA state does not fit in max_state_bytes={_gib(self._budget)}: the "
                f"moments need {_gib(moment_bytes)} (d1={d1}, d2={d2}) and the buffered samples "
                f"already take {_gib(self.state_nbytes)}; reduce the feature dimension (e.g. pool "
                "spatial maps), use fewer samples, or raise max_state_bytes"
            )

    @staticmethod
    def _check_finite_batch(arr: np.ndarray, name: str) -> None:
        if not np.isfinite(arr.sum(axis=0, dtype=np.float64)).all():
            _raise_nonfinite(arr, name)

    def _track_constant(self, xb: np.ndarray, yb: np.ndarray) -> None:
        for i, arr in enumerate((xb, yb)):
            if self._first[i] is None:
                self._first[i] = np.array(arr[0], dtype=np.float64)
            if self._const[i]:
                self._const[i] = bool((arr == self._first[i]).all())

    def _fold_buffer(self) -> None:
        assert self._buffer is not None and self._d is not None
        d1, d2 = self._d
        dd = d1 + d2
        n = self.n
        cx = sum(x.sum(axis=0, dtype=np.float64) for x, _ in self._buffer) / n
        cy = sum(y.sum(axis=0, dtype=np.float64) for _, y in self._buffer) / n
        self._m = {
            "c": np.concatenate([cx, cy]),  # the shift
            "g": np.zeros((dd, dd)),  # sum z z^T
            "w": np.zeros((dd, 3)),  # sum z [a, b, 1]
            "scalars": np.zeros(5),  # sum a, sum b, sum a^2, sum b^2, sum a b
        }
        buffer, self._buffer = self._buffer, None
        for x, y in buffer:
            self._accumulate(x, y)

    @staticmethod
    def _fill_shifted(dst: np.ndarray, arr: np.ndarray, shift: np.ndarray, out_norms: np.ndarray) -> None:
        """``dst = arr - shift`` in float64 and its squared row norms into ``out_norms``."""
        np.copyto(dst, arr)
        with np.errstate(over="ignore", invalid="ignore"):
            dst -= shift
            np.einsum("ij,ij->i", dst, dst, out=out_norms)

    def _accumulate(self, xb: np.ndarray, yb: np.ndarray) -> None:
        """Fold one batch into the moments (the batch is already validated for shape)."""
        m = self._m
        assert m is not None and self._d is not None
        d1 = self._d[0]
        b = xb.shape[0]
        dd = m["c"].shape[0]
        if self._scratch is None or self._scratch.shape[0] < b:
            self._scratch = np.empty((b, dd))
        z = self._scratch[:b]
        abo = np.empty((b, 3))  # columns a, b, 1
        abo[:, 2] = 1.0
        _both(
            self._fill_shifted,
            (z[:, :d1], xb, m["c"][:d1], abo[:, 0]),
            (z[:, d1:], yb, m["c"][d1:], abo[:, 1]),
            xb.size + yb.size,
        )
        with np.errstate(over="ignore", invalid="ignore"):  # NaN/Inf are reported just below
            w = z.T @ abo  # X'^T [a b 1] and Y'^T [a b 1]
        if not np.isfinite(w[:d1, 2]).all():
            _raise_nonfinite(xb, "X_batch")
        if not np.isfinite(w[d1:, 2]).all():
            _raise_nonfinite(yb, "Y_batch")
        m["g"] += _gram_cols(z)
        m["w"] += w
        a, bb = abo[:, 0], abo[:, 1]
        m["scalars"] += (a.sum(), bb.sum(), a @ a, bb @ bb, a @ bb)

    # ----------------------------------------------------------------- compute
    def compute(self) -> float:
        """Linear CKA of all samples seen so far, as a Python float."""
        if self.n == 0:
            raise ValueError("StreamingLinearCKA has seen no samples; call update(X_batch, Y_batch) first")
        _check_debiased_n(self.n, self.debiased)
        for i, name in enumerate(("X", "Y")):
            if self._const[i]:
                raise ValueError(
                    f"{name} is constant across samples (zero variance: all {self.n} rows are "
                    "identical), so CKA is undefined (0/0); check that the layer is not dead or that "
                    "the inputs differ"
                )
        if self._m is None:
            assert self._buffer is not None
            xs = np.concatenate([x for x, _ in self._buffer])
            ys = np.concatenate([y for _, y in self._buffer])
            # transient work memory is checked by cka() against the memory available now
            return cka(xs, ys, "linear", self.debiased)
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            out = _finish(self._terms(), self.debiased)
        if out is None:
            raise ValueError(
                "StreamingLinearCKA: the accumulated moments under- or overflowed float64; rescale "
                "the inputs (CKA is invariant to isotropic scaling)"
            )
        return out

    def _terms(self) -> tuple[float, ...]:
        """HSIC terms (same layout as :func:`_z_terms`) from the moments."""
        m = self._m
        assert m is not None and self._d is not None
        d1 = self._d[0]
        n = self.n
        w = m["w"]
        s = w[:, 2]
        c = m["g"] - np.outer(s, s / n)  # centred [X Y]^T [X Y]
        cxx, cyy, cxy = c[:d1, :d1], c[d1:, d1:], c[:d1, d1:]
        hxy, hxx, hyy = _fro2(cxy), _fro2(cxx), _fro2(cyy)
        if not self.debiased:
            return hxy, hxx, hyy, 0.0, 0.0
        sxx, syy, sxy = m["g"][:d1, :d1], m["g"][d1:, d1:], m["g"][:d1, d1:]
        mx, my = s[:d1] / n, s[d1:] / n
        xa, xb, ya, yb = w[:d1, 0], w[:d1, 1], w[d1:, 0], w[d1:, 1]
        sa, sb, saa, sbb, sab = (float(v) for v in m["scalars"])
        mxx = float(mx @ mx)
        myy = float(my @ my)
        # sum of centred row norms: sum r = sum a - n |m|^2
        rx = sa - n * mxx
        ry = sb - n * myy
        # sum_i r_x,i r_y,i with r = a - 2 x'.m + |m|^2 expanded (using m.s = n |m|^2)
        rxy = (
            sab
            - 2.0 * float(my @ ya)
            - 2.0 * float(mx @ xb)
            + 4.0 * float(mx @ sxy @ my)
            + myy * sa
            + mxx * sb
            - 3.0 * n * mxx * myy
        )
        rxx = saa - 4.0 * float(mx @ xa) + 4.0 * float(mx @ sxx @ mx) + 2.0 * mxx * sa - 3.0 * n * mxx**2
        ryy = sbb - 4.0 * float(my @ yb) + 4.0 * float(my @ syy @ my) + 2.0 * myy * sb - 3.0 * n * myy**2
        hxy, _ = _debiased_term(hxy, rxy, rx, ry, n)
        hxx, tx = _debiased_term(hxx, rxx, rx, rx, n)
        hyy, ty = _debiased_term(hyy, ryy, ry, ry, n)
        return hxy, hxx, hyy, _DEGENERATE_RTOL * tx, _DEGENERATE_RTOL * ty

    def __repr__(self) -> str:
        return (
            f"StreamingLinearCKA(debiased={self.debiased}, n={self.n}, mode={self.mode!r}, "
            f"state_nbytes={self.state_nbytes})"
        )
