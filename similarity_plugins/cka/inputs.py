"""What the CKA maths adds to the input checks every measure shares (`utils.arrays`): its kernel and method names,
its fewest samples, float64 centring and the preparation of X and Y side by side."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Literal

import numpy as np

from ..utils.arrays import raise_nonfinite

Kernel = Literal["linear", "rbf"]
LinearMethod = Literal["auto", "feature", "gram"]

_EPS = float(np.finfo(np.float64).eps)
# Rounding-error scale (relative to the terms' magnitude) below which a debiased self-HSIC counts as 0.
DEGENERATE_RTOL = 1e3 * _EPS
# Gram-space passes over an n x n matrix (centring, dots) are memory-bound; weight per element.
GRAM_PASS_FLOPS = 40.0
UNDERFLOW_MSG = "CKA under- or overflowed float64 even after rescaling; check the magnitude of X and Y"
# Inputs with at least this many values (X and Y together) are converted in two threads.
_PARALLEL_PREP_MIN_VALUES = 1 << 20

# The checks every measure shares (conversion, shapes, non-finite and constant inputs, memory) live in utils.arrays,
# whose messages name CKA by default; this module holds what is CKA's own.

#: The fewest samples CKA means anything on: with two, the centred representations are one line each and every
#: pair scores 1; the debiased estimator divides by n - 3.
MIN_SAMPLES = 3
MIN_SAMPLES_DEBIASED = 4


def check_debiased_n(n: int, debiased: bool) -> None:
    """Refuse fewer samples than `MIN_SAMPLES_DEBIASED` for the debiased estimator."""
    if debiased and n < MIN_SAMPLES_DEBIASED:
        raise ValueError(
            f"debiased CKA needs at least {MIN_SAMPLES_DEBIASED} samples (its estimator divides by n - 3) but got "
            f"n={n}; use more samples or debiased=False"
        )


def check_min_samples(n: int, debiased: bool) -> None:
    """Refuse fewer samples than CKA means anything on: `MIN_SAMPLES`, or `MIN_SAMPLES_DEBIASED`."""
    check_debiased_n(n, debiased)
    if n < MIN_SAMPLES:
        raise ValueError(f"CKA needs at least {MIN_SAMPLES} samples (with 2, every pair of representations scores 1) "
                         f"but got n={n}; use more samples")



def centered_float64(arr: np.ndarray, name: str) -> tuple[np.ndarray, np.ndarray]:
    """A fresh C-contiguous float64 copy of ``arr`` with column means removed, and those means.

    NaN/Inf are detected for free: they make the column means non-finite.
    """
    xc = np.array(arr, dtype=np.float64, order="C", copy=True)
    mean = xc.mean(axis=0)
    if not np.isfinite(mean).all():
        raise_nonfinite(arr, name)
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


def on_both(fn: Callable[..., Any], args_x: tuple, args_y: tuple, size: int) -> tuple[Any, Any]:
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
