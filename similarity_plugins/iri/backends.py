"""Array backends for the IRI update step: NumPy (CPU), CuPy (GPU, fused kernels) and PyTorch (reference).

The update step (``update.py``) is written once against a small array namespace ``xp`` that offers only
``sqrt``, ``maximum``/``minimum`` (array or scalar second argument) and ``row_norm``; in-place operators
(``+=``, ``*=``, ``x[...] = ...``) do the rest. Each backend supplies that namespace and converts the
optimizer's torch state tensors to its own arrays through DLPack, so no data is copied: the NumPy and CuPy
arrays are views of the same memory the torch tensors own.

``backend="auto"`` picks CuPy when the model runs on CUDA and CuPy imports, else NumPy on the CPU and the
torch backend for any other device (NumPy cannot see device memory).
"""

from __future__ import annotations

import contextlib
import types
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import numpy as np
import torch

BACKENDS = ("auto", "numpy", "torch", "cupy")


def _cupy() -> Any | None:
    try:
        import cupy  # type: ignore[import-not-found]
    except Exception:  # noqa: BLE001 - any import failure (missing CUDA libraries too) means "no cupy"
        return None
    return cupy


def _numpy_row_norm(a: np.ndarray) -> np.ndarray:
    return np.sqrt(np.einsum("ij,ij->i", a, a))[:, None]


def _torch_max(a: torch.Tensor, b: Any) -> torch.Tensor:
    return torch.maximum(a, b) if isinstance(b, torch.Tensor) else torch.clamp(a, min=b)


def _torch_min(a: torch.Tensor, b: Any) -> torch.Tensor:
    return torch.minimum(a, b) if isinstance(b, torch.Tensor) else torch.clamp(a, max=b)


def _torch_sqrt(a: torch.Tensor) -> torch.Tensor:
    # torch's vectorised CPU float32 sqrt (SLEEF) can be 1 ulp off the correctly rounded result that NumPy,
    # CuPy and CUDA give; sqrt in float64 rounded to float32 is exact, so the reference matches NumPy bit for bit.
    if a.device.type == "cpu" and a.dtype == torch.float32:
        return torch.sqrt(a.double()).float()
    return torch.sqrt(a)


NUMPY_NS = types.SimpleNamespace(name="numpy", sqrt=np.sqrt, maximum=np.maximum, minimum=np.minimum,
                                 row_norm=_numpy_row_norm)
TORCH_NS = types.SimpleNamespace(name="torch", sqrt=_torch_sqrt, maximum=_torch_max, minimum=_torch_min,
                                 row_norm=lambda a: torch.linalg.vector_norm(a, dim=1, keepdim=True))


@dataclass
class Backend:
    """One array library for the update step.

    ``xp``: the namespace the shared update code is written against. ``view(t)``: a zero-copy array view
    of a torch tensor (contiguous, no grad). ``column(values, like)``: a small per-sample (B, 1) array on
    the backend's device built from a host NumPy vector. ``fuse(fn)``: compile ``fn`` into one kernel where
    the library can (CuPy), else return it unchanged. ``stream()``: a context that orders the backend's
    work after torch's (a no-op on the CPU).
    """

    name: str
    xp: Any
    view: Callable[[torch.Tensor], Any]
    column: Callable[[np.ndarray, torch.device], Any]
    fuse: Callable[[Callable], Callable] = field(default=lambda fn: fn)
    stream: Callable[[torch.device], contextlib.AbstractContextManager] = field(
        default=lambda device: contextlib.nullcontext())


def _numpy_view(t: torch.Tensor) -> np.ndarray:
    if t.device.type != "cpu":
        raise ValueError(f"the numpy backend needs CPU tensors, got one on {t.device}; use backend='cupy' or 'torch'")
    return np.from_dlpack(t.detach())


def numpy_backend() -> Backend:
    """NumPy on the CPU; arrays are DLPack views of the torch state."""
    return Backend("numpy", NUMPY_NS, _numpy_view, lambda values, device: values[:, None])


def torch_backend() -> Backend:
    """Pure PyTorch (any device): the reference implementation of the update step."""
    def column(values: np.ndarray, device: torch.device) -> torch.Tensor:
        return torch.from_numpy(values[:, None]).to(device, non_blocking=False)

    return Backend("torch", TORCH_NS, lambda t: t.detach(), column)


_CUPY_BACKENDS: dict[int, tuple[Any, "Backend"]] = {}


def cupy_backend(cupy: Any | None = None) -> Backend:
    """CuPy on a CUDA device: the update runs as one fused elementwise kernel (``cupy.fuse``).

    ``cupy`` may be passed explicitly (tests substitute a stand-in module to exercise this code on the CPU).
    One Backend object per module, so fused kernels compile once per process.
    """
    cp = cupy if cupy is not None else _cupy()
    if cp is None:
        raise RuntimeError("backend='cupy' needs CuPy; install the gpu extra (pip install 'similarity-plugins[gpu]') "
                           "or use backend='torch'")
    hit = _CUPY_BACKENDS.get(id(cp))
    if hit is not None and hit[0] is cp:
        return hit[1]
    norm = getattr(getattr(cp, "linalg", None), "norm", None)
    xp = types.SimpleNamespace(
        name="cupy", sqrt=cp.sqrt, maximum=cp.maximum, minimum=cp.minimum,
        row_norm=(lambda a: norm(a, axis=1, keepdims=True)) if norm is not None else _numpy_row_norm,
    )

    def view(t: torch.Tensor) -> Any:
        return cp.from_dlpack(t.detach())

    def column(values: np.ndarray, device: torch.device) -> Any:
        return cp.asarray(values[:, None])

    def fuse(fn: Callable) -> Callable:
        return cp.fuse(fn) if hasattr(cp, "fuse") else fn

    @contextlib.contextmanager
    def stream(device: torch.device) -> Iterator[None]:
        if device.type != "cuda" or not hasattr(cp, "cuda"):
            yield
            return
        # Run CuPy on torch's current stream so the two libraries' work stays ordered without syncs.
        handle = torch.cuda.current_stream(device).cuda_stream
        with cp.cuda.Device(device.index if device.index is not None else torch.cuda.current_device()):
            with cp.cuda.ExternalStream(handle):
                yield

    backend = Backend("cupy", xp, view, column, fuse, stream)
    _CUPY_BACKENDS[id(cp)] = (cp, backend)
    return backend


def available_backends() -> list[str]:
    """Backends usable in this process: always "numpy" and "torch"; "cupy" when CuPy imports and CUDA is up."""
    names = ["numpy", "torch"]
    if torch.cuda.is_available() and _cupy() is not None:
        names.append("cupy")
    return names


def resolve_backend(name: str, device: torch.device) -> Backend:
    """The backend called ``name`` for state on ``device``; ``"auto"`` picks as the module docstring says."""
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")
    if name == "auto":
        if device.type == "cuda" and _cupy() is not None:
            name = "cupy"
        elif device.type == "cpu":
            name = "numpy"
        else:
            name = "torch"
    if name == "numpy":
        if device.type != "cpu":
            raise ValueError(f"backend='numpy' works on CPU tensors only, but the model is on {device}; "
                             "use backend='auto', 'cupy' or 'torch'")
        return numpy_backend()
    if name == "torch":
        return torch_backend()
    if device.type != "cuda":
        raise ValueError(f"backend='cupy' needs the model on a CUDA device, but it is on {device}; "
                         "move the model with model.cuda() or use backend='numpy'")
    return cupy_backend()
