"""Where the work runs: the array backends of the elementwise updates (NumPy on the CPU, CuPy on the GPU
with fused kernels, PyTorch as the reference) and, opt-in, ``torch.compile`` of the front's evaluations.

The updates (``kernels.py``) are written once against a small array namespace ``xp`` that offers only
``sqrt`` and ``maximum``/``minimum`` (array or scalar second argument); in-place operators
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
from typing import Any, Callable, Iterator, Literal, get_args

import numpy as np
import torch

from ..utils.extras import require

BackendName = Literal["auto", "numpy", "torch", "cupy"]
BACKENDS: tuple[str, ...] = get_args(BackendName)


def _cupy() -> Any | None:
    try:
        import cupy  # type: ignore[import-not-found]
    except Exception:  # noqa: BLE001 - any import failure (missing CUDA libraries too) means "no cupy"
        return None
    return cupy


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


NUMPY_NS = types.SimpleNamespace(name="numpy", sqrt=np.sqrt, maximum=np.maximum, minimum=np.minimum)
TORCH_NS = types.SimpleNamespace(name="torch", sqrt=_torch_sqrt, maximum=_torch_max, minimum=_torch_min)


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
    if cp is None:  # not installed: MissingExtra naming the extra; installed but broken: the import's own error
        cp = require("cupy", "gpu", "backend='cupy'")
    hit = _CUPY_BACKENDS.get(id(cp))
    if hit is not None and hit[0] is cp:
        return hit[1]
    xp = types.SimpleNamespace(name="cupy", sqrt=cp.sqrt, maximum=cp.maximum, minimum=cp.minimum)

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


# -- ``compile=True``: the front's forward+backward through ``torch.compile``, one fresh compilation per run.
#
# Only the evaluations that need gradients run compiled; the seeds' targets (computed without gradients) and
# the working batch's sizing pass run the eager front, so the targets are exactly those of an eager run. The
# compiled front computes the same function up to float rounding, so IRIs from ``compile=True`` are not
# bit-identical to eager ones. Like ``backend`` and ``batch_size``, ``compile`` is a run option, not a
# setting: it is not part of the cache key, a set cached by an eager run is found by a compiled one, and a
# checkpoint resumes with either.
#
# TorchDynamo keeps compiled code per Python code object and, past ``recompile_limit`` (8) recompilations
# of one, runs that code eagerly with only a logged warning. Every run in a process calls the front through
# the same code (a closure over a new model), so the ninth run would quietly lose compilation. Each run
# therefore compiles its own copies of the calling code objects: the wrapper here and, when it is a plain
# Python function, ``front_fn`` itself, which Dynamo compiles as a frame of its own when the model has a
# graph break. Code deeper down is shared between runs: the model's own methods (per class), and, for a
# model that torch.fx cannot trace, the hook-based front of ``networks.split.SplitNetwork``; past 8 model
# classes with graph breaks in one process, Dynamo runs those frames eagerly again, with its logged warning.
#
# The batch size varies at the end of a run (continuous batching retires samples), so Dynamo compiles once
# for the first batch size, once more with a dynamic batch dimension at the next, and once for a batch of
# one (sizes 0 and 1 are always specialised). ``Run`` counts the graphs compiled during each evaluation
# (``stats["compiled_graphs"]``) and the time of the evaluations that compiled (``stats["compile_s"]``, also
# part of ``front_s``), the warm-up cost.

COMPILE_FIX = ("run without compile=True (the eager front gives the same IRIs up to float rounding), or give "
               "torch.compile what it needs: a C++ compiler on the CPU, Triton on CUDA")


def check_compile(value: object) -> bool:
    """``compile`` as a bool; raises ValueError naming the valid values otherwise."""
    if not isinstance(value, bool):
        raise ValueError(f"compile must be True or False (torch.compile the front's forward+backward; a warm-up of "
                         f"seconds to a minute per run), got {value!r}")
    return value


def _own_copy(fn: Callable) -> Callable:
    """``fn`` with a new code object (same globals, defaults, keyword-only defaults, closure, name and
    attributes) when it is a plain Python function; anything else as it is."""
    if not isinstance(fn, types.FunctionType):
        return fn
    copy = types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    copy.__kwdefaults__ = fn.__kwdefaults__
    copy.__qualname__ = fn.__qualname__
    copy.__dict__.update(fn.__dict__)
    return copy


def compile_front(front_fn: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[torch.Tensor], torch.Tensor]:
    """``front_fn`` (batch (B, ...) -> activations (B, ...)) compiled with ``torch.compile`` for this run.

    The returned callable runs the compiled front where gradients are enabled and ``front_fn`` itself
    where they are not (targets, shape probes)."""
    inner = _own_copy(front_fn)

    def call(x: torch.Tensor) -> torch.Tensor:
        return inner(x)

    compiled = torch.compile(_own_copy(call))   # new code objects: Dynamo's cache and limit are per run

    def front(x: torch.Tensor) -> torch.Tensor:
        return compiled(x) if torch.is_grad_enabled() else front_fn(x)

    return front


def compiled_graphs() -> int:
    """Graphs TorchDynamo has compiled in this process so far (a counter; differences count compilations,
    including those of other threads compiling at the same time)."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def compile_failure(exc: BaseException) -> RuntimeError | None:
    """For an error of TorchDynamo / Inductor raised by a compiled evaluation: a RuntimeError naming the
    cause and the fix; None for any other error (the model's own, out of memory, ...), which passes through."""
    if not isinstance(exc, torch._dynamo.exc.TorchDynamoException):
        return None
    cause = getattr(exc, "inner_exception", None) or exc
    text = str(cause).strip()
    first = text.splitlines()[0] if text else ""
    return RuntimeError(f"compile=True: torch.compile could not compile the front's forward+backward "
                        f"({type(cause).__name__}: {first[:300]}); {COMPILE_FIX}")
