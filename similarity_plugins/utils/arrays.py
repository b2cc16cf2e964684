"""Input checks shared by every array-level measure (CKA and the representational measures).

Bottom layer: imports nothing from the package (torch only when a tensor is passed). One set of rules and
messages for every measure: the argument is named in each error, and ``what`` names the measure
(``"CKA"``, ``"Procrustes"``, ...). The functions accept NumPy arrays or torch tensors where it says so.

- `to_numpy`: array or tensor -> NumPy (CPU), float32/float64, complex refused.
- `to_tensor`: array or tensor -> float64 torch tensor on the tensor's own device (NumPy: CPU).
- `as_samples`: the (n, d) view every measure works on (1-D is one feature, higher rank flattens).
- `check_same_n`, `raise_nonfinite`, `raise_if_constant`: the shared refusals.
- `available_bytes`, `format_bytes`: the memory budget of measures that hold n x n matrices.
"""

from __future__ import annotations

import os
from typing import Any, Iterator, NoReturn

import numpy as np

ArrayLike = Any  # numpy.ndarray | torch.Tensor | nested sequences of numbers

_EPS = float(np.finfo(np.float64).eps)

def _is_torch(x: Any) -> bool:
    return type(x).__module__.split(".")[0] == "torch"


def _torch_real(x: Any, name: str, what: str):
    """A detached, dense, real torch tensor (same device, same dtype); refuses non-tensors and complex."""
    import torch

    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} is a {type(x).__name__}; pass a torch.Tensor or NumPy array")
    t = x.detach()
    if t.is_sparse:
        t = t.to_dense()
    if t.is_complex():
        raise ValueError(f"{name} is complex ({t.dtype}); {what} needs real-valued representations")
    return t


def unmasked(x: Any, name: str) -> Any:
    """``x`` itself, or a masked array's data (NumPy ``np.ma``, ``torch.masked.MaskedTensor``) when nothing is
    masked; ``ValueError`` naming ``name`` and
    the mask when some entries are masked: the metrics read every value, and ``np.asarray`` would silently score
    the values under the mask."""
    if type(x).__name__ == "MaskedTensor" and _is_torch(x):  # torch.masked: True marks the values that count
        hidden = ~x.get_mask()
        if not bool(hidden.any()):
            return x.get_data()
        raise ValueError(f"{name} is a torch MaskedTensor with {int(hidden.sum())} masked entries; the metrics "
                         f"cannot honour a mask: drop those rows from both inputs, or pass {name}.get_data() "
                         "with the masked values filled")
    if not isinstance(x, np.ma.MaskedArray):
        return x
    mask = np.ma.getmaskarray(x)
    if not mask.any():
        return np.ma.getdata(x)
    rows = int(mask.reshape(len(mask), -1).any(1).sum()) if mask.ndim else 1
    raise ValueError(f"{name} is a masked array with {int(mask.sum())} masked entries (in {rows} rows); the metrics "
                     f"cannot honour a mask: drop those rows from both inputs (keep = ~{name}.mask.any(axis=1)) or "
                     f"fill them ({name}.filled(value))")


def to_numpy(x: ArrayLike, name: str, what: str = "CKA") -> np.ndarray:
    """A NumPy view (or the cheapest exact copy) of ``x`` with a real floating dtype, on the CPU.

    ``x``: any-shape array, tensor (any device) or nested sequence. float32/float64 are kept; other real
    dtypes (half, bfloat16, integers, bool) become float64, which holds them exactly.
    """
    x = unmasked(x, name)
    if _is_torch(x):
        import torch

        t = _torch_real(x, name, what)
        if t.device.type != "cpu":
            t = t.cpu()
        if t.dtype not in (torch.float32, torch.float64):
            t = t.to(torch.float64)
        return t.numpy(force=True)
    arr = np.asarray(unmasked(x, name))
    if arr.dtype.kind == "c":
        raise ValueError(f"{name} is complex ({arr.dtype}); {what} needs real-valued representations")
    if arr.dtype not in (np.float32, np.float64):
        try:
            arr = arr.astype(np.float64)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{name} has dtype {arr.dtype}, which is not numeric") from exc
    return arr


def to_tensor(x: ArrayLike, name: str, what: str):
    """``x`` as a float64 torch tensor: a tensor stays on its device, anything else goes through
    `to_numpy` and lives on the CPU. May share memory with ``x`` when ``x`` is already float64:
    callers must not write into it."""
    import torch

    x = unmasked(x, name)
    if _is_torch(x):
        return _torch_real(x, name, what).to(torch.float64)
    arr = to_numpy(x, name, what)
    if any(s < 0 for s in arr.strides):
        arr = np.ascontiguousarray(arr)
    return torch.from_numpy(arr).to(torch.float64)


def as_samples(x: Any, name: str) -> Any:
    """``x`` (a NumPy array or torch tensor) as 2-D (n, d): 1-D is (n, 1); higher rank flattens after axis 0.

    Raises ``ValueError`` for a scalar or an empty input.
    """
    if x.ndim == 0:
        raise ValueError(f"{name} is a scalar; pass an array of shape (n_samples, n_features)")
    if int(np.prod(tuple(x.shape))) == 0:
        raise ValueError(
            f"{name} is empty (shape {tuple(x.shape)}); pass at least one sample with at least one feature"
        )
    if x.ndim == 1:
        return x.reshape(-1, 1)
    if x.ndim > 2:
        return x.reshape(x.shape[0], -1)
    return x


def check_same_n(x: Any, y: Any, xname: str = "X", yname: str = "Y", what: str = "CKA") -> int:
    """The common number of rows of ``x`` and ``y``; ``ValueError`` naming both counts when they differ."""
    if x.shape[0] != y.shape[0]:
        raise ValueError(
            f"{xname} has {x.shape[0]} samples but {yname} has {y.shape[0]}; {what} compares two "
            "representations of the same inputs, so both need one row per input"
        )
    return int(x.shape[0])


def raise_nonfinite(arr: Any, name: str, what: str = "CKA") -> NoReturn:
    """Raise the ``ValueError`` for an input that is not finite (NaN, Inf, or float64 overflow of its sums)."""
    if _is_torch(arr):
        has_nan, has_inf = bool(arr.isnan().any()), bool(arr.isinf().any())
        peak = float(arr.abs().max())
    else:
        has_nan, has_inf = bool(np.isnan(arr).any()), bool(np.isinf(arr).any())
        peak = float(np.max(np.abs(arr)))
    if has_nan:
        raise ValueError(f"{name} contains NaN; remove or replace those values before computing {what}")
    if has_inf:
        raise ValueError(f"{name} contains Inf; remove or replace those values before computing {what}")
    raise ValueError(
        f"{name} overflows float64 (max |value| = {peak:.3g}); rescale it "
        f"({what} is invariant to isotropic scaling)"
    )


def raise_if_constant(arr: Any, name: str, sum_sq: float, mean: Any, what: str = "CKA") -> None:
    """Raise if every row of ``arr`` (NumPy or torch, (n, d)) is identical (zero variance).

    ``sum_sq`` is the sum of squares of the centred copy and ``mean`` the column means. A constant input
    leaves only the rounding error of its column means, at most about n * eps * |mean| per entry, so the
    exact (one pass) test runs only when ``sum_sq`` is within that bound.
    """
    n = arr.shape[0]
    bound = 16.0 * float(n) ** 3 * _EPS**2 * float(mean @ mean)
    if sum_sq <= bound and (n == 1 or bool((arr == arr[0]).all())):
        raise ValueError(constant_message(name, n, what))


def constant_message(name: str, n: int, what: str = "CKA") -> str:
    """The refusal of an input whose ``n`` rows are all identical (zero variance), naming it and the measure."""
    return (f"{name} is constant across samples (zero variance: all {n} rows are identical), so {what} is undefined "
            "(0/0); check that the layer is not dead or that the inputs differ")


def available_bytes(device: Any = None) -> int:
    """Bytes free now: on a CUDA ``device`` its free memory; else the CPU's MemAvailable (Linux), else the
    free physical pages, else 8 GiB."""
    if device is not None and getattr(device, "type", None) == "cuda":
        import torch

        return int(torch.cuda.mem_get_info(device)[0])
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


def format_bytes(nbytes: float) -> str:
    """A byte count as text for messages: ``"1.50 GiB"``, ``"12.00 MiB"``, ``"3.00 KiB"``, ``"12 bytes"``."""
    for unit, size in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if nbytes >= size:
            return f"{nbytes / size:.2f} {unit}"
    return f"{int(nbytes)} bytes"


def nbytes_of(value: Any) -> int:
    """Bytes held by ``value``: its ``nbytes`` (NumPy arrays, torch tensors, any object with an integer ``nbytes``),
    or the sum over the items of a tuple, list or dict's values; 0 for anything else."""
    nbytes = getattr(value, "nbytes", None)
    if isinstance(nbytes, (int, np.integer)) and not isinstance(nbytes, bool):
        return int(nbytes)
    if isinstance(value, (tuple, list)):
        return sum(nbytes_of(v) for v in value)
    if isinstance(value, dict):
        return sum(nbytes_of(v) for v in value.values())
    return 0


def paired_blocks(x: Any, y: Any, rows: int, what: str = "the measure") -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """``(x[i:i+rows], y[i:i+rows])`` as NumPy arrays (float32 or float64) flattened to (b, d), for i = 0, rows, ...

    ``x`` and ``y``: anything with ``len`` and row slicing (arrays, tensors on any device, also ones that require
    grad, store entries read from disk). Raises ``ValueError`` when their lengths differ, and the error the
    in-memory measures give (`raise_nonfinite`, naming ``X`` or ``Y`` and ``what``) for a block with NaN or Inf."""
    n = len(x)
    if len(y) != n:
        raise ValueError(f"x has {n} rows and y {len(y)}: a streamed measure needs the same samples in both")
    for start in range(0, n, rows):
        xb, yb = to_numpy(x[start:start + rows], "X", what), to_numpy(y[start:start + rows], "Y", what)
        xb, yb = xb.reshape(len(xb), -1), yb.reshape(len(yb), -1)
        for block, name in ((xb, "X"), (yb, "Y")):
            if not np.isfinite(block.sum(dtype=np.float64)) and not np.isfinite(block).all():
                raise_nonfinite(block, name, what)
        yield xb, yb
