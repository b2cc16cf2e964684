"""The public functional API: ``cka(X, Y, kernel, debiased, threshold)`` on arrays or tensors."""

from __future__ import annotations

import numpy as np

from ..utils.arrays import ArrayLike, as_samples, available_bytes, check_same_n, format_bytes, raise_if_constant, to_numpy
from .grams import check_threshold
from .hsic import feature_cka, finish_cka, fro2, hsic_gram, linear_plan, pow2_rescale
from .inputs import UNDERFLOW_MSG, Kernel, LinearMethod, centered_float64, check_min_samples, on_both


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
    _check_kernel_and_method(kernel, method)
    threshold = check_threshold(threshold)
    xa = as_samples(to_numpy(X, "X"), "X")
    ya = as_samples(to_numpy(Y, "Y"), "Y")
    n = check_same_n(xa, ya)
    check_min_samples(n, debiased)
    budget = int(max_gram_bytes) if max_gram_bytes is not None else available_bytes()
    if kernel == "rbf":
        _check_rbf_fits(n, budget)
        plan = "gram"
    else:
        plan = linear_plan(n, xa.shape[1], ya.shape[1], method, budget)

    if plan == "feature":
        return feature_cka(xa, ya, debiased)
    return _gram_cka(xa, ya, debiased, kernel, threshold)


def _check_kernel_and_method(kernel: str, method: str) -> None:
    if kernel not in ("linear", "rbf"):
        raise ValueError(f"kernel must be 'linear' or 'rbf' (got {kernel!r})")
    if method not in ("auto", "feature", "gram"):
        raise ValueError(f"method must be 'auto', 'feature' or 'gram' (got {method!r})")
    if kernel == "rbf" and method == "feature":
        raise ValueError("method='feature' exists only for kernel='linear'; RBF CKA needs Gram matrices")


def _check_rbf_fits(n: int, budget: int) -> None:
    """RBF CKA holds about three n x n float64 matrices; raise if they exceed ``budget`` bytes."""
    need = 3 * 8 * n * n
    if need > budget:
        raise ValueError(
            f"RBF CKA on n={n} samples needs about {format_bytes(need)} for its {n} x {n} float64 Gram "
            f"matrices (3 x n^2 x 8 bytes) but only {format_bytes(budget)} is available (max_gram_bytes); "
            "use linear CKA (cka(..., kernel='linear'), the 'cka-linear' metric) or "
            "StreamingLinearCKA, which need no n x n matrices, or subsample the inputs"
        )


def _gram_cka(xa: np.ndarray, ya: np.ndarray, debiased: bool, kernel: str, threshold: float) -> float:
    """CKA via n x n Gram matrices of the column-centred float64 samples (linear or RBF)."""
    (xc, mx), (yc, my) = on_both(centered_float64, (xa, "X"), (ya, "Y"), xa.size + ya.size)
    # check before building n x n matrices (and before the RBF bandwidth)
    raise_if_constant(xa, "X", fro2(xc), mx)
    raise_if_constant(ya, "Y", fro2(yc), my)
    for attempt in range(2):
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            out = finish_cka(hsic_gram(xc, yc, debiased, kernel, threshold), debiased)
        if out is not None:
            return out
        if attempt == 0:  # under/overflow: rescale exactly by powers of two and retry once
            pow2_rescale(xc)
            pow2_rescale(yc)
    raise ValueError(UNDERFLOW_MSG)
