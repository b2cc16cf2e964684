"""Input handling for the CKA maths: arrays or tensors to float64 NumPy, validation, memory budget."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Literal

import numpy as np

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
