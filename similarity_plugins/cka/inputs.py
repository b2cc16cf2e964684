"""Input handling for the CKA maths: arrays or tensors to float64 NumPy, validation, memory budget."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Literal

import numpy as np

from ..utils.arrays import (
    ArrayLike,
    as_samples,
    available_bytes,
    check_same_n,
    format_bytes,
    raise_if_constant,
    raise_nonfinite,
    to_numpy,
)

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



# --------------------------------------------------------------------------- input handling
# The checks every measure shares live in utils.arrays (one set of rules and messages); CKA names itself.
def cka_to_numpy(x: ArrayLike, name: str) -> np.ndarray:
    """A NumPy view (or the cheapest exact copy) of ``x`` with a real floating dtype, on the CPU."""
    return to_numpy(x, name, "CKA")


def cka_as_samples(x: ArrayLike, name: str) -> np.ndarray:
    """``x`` as a 2-D (n, d) float32/float64 array; 1-D is (n, 1); higher rank flattens after axis 0."""
    return as_samples(cka_to_numpy(x, name), name)


def cka_check_same_n(x: np.ndarray, y: np.ndarray, xname: str = "X", yname: str = "Y") -> int:
    """The common sample count of ``x`` and ``y`` (`utils.arrays.check_same_n` with CKA's name)."""
    return check_same_n(x, y, xname, yname, "CKA")


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


def cka_raise_nonfinite(arr: np.ndarray, name: str) -> None:
    """Refuse NaN/Inf in ``arr`` naming where (`utils.arrays.raise_nonfinite` with CKA's name)."""
    raise_nonfinite(arr, name, "CKA")


def centered_float64(arr: np.ndarray, name: str) -> tuple[np.ndarray, np.ndarray]:
    """A fresh C-contiguous float64 copy of ``arr`` with column means removed, and those means.

    NaN/Inf are detected for free: they make the column means non-finite.
    """
    xc = np.array(arr, dtype=np.float64, order="C", copy=True)
    mean = xc.mean(axis=0)
    if not np.isfinite(mean).all():
        cka_raise_nonfinite(arr, name)
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


def cka_raise_if_constant(arr: np.ndarray, name: str, sum_sq: float, mean: np.ndarray) -> None:
    """Raise if every row of ``arr`` is identical (zero variance): `utils.arrays.raise_if_constant`."""
    raise_if_constant(arr, name, sum_sq, mean, "CKA")


def available_memory_bytes() -> int:
    """Bytes of memory available now on the CPU (`utils.arrays.available_bytes`)."""
    return available_bytes()


def gib(nbytes: float) -> str:
    """Human-readable byte count."""
    return format_bytes(nbytes)
