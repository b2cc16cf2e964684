"""``compile=True``: the front's forward+backward through ``torch.compile``, one fresh compilation per run.

Only the evaluations that need gradients run compiled; the seeds' targets (computed without gradients) and
the working batch's sizing pass run the eager front, so the targets are exactly those of an eager run. The
compiled front computes the same function up to float rounding, so IRIs from ``compile=True`` are not
bit-identical to eager ones. Like ``backend`` and ``batch_size``, ``compile`` is a run option, not a
setting: it is not part of the cache key, a set cached by an eager run is found by a compiled one, and a
checkpoint resumes with either.

TorchDynamo keeps compiled code per Python code object and, past ``recompile_limit`` (8) recompilations
of one, runs that code eagerly with only a logged warning. Every run in a process calls the front through
the same code (a closure over a new model), so the ninth run would quietly lose compilation. Each run
therefore compiles its own copies of the calling code objects: the wrapper here and, when it is a plain
Python function, ``front_fn`` itself, which Dynamo compiles as a frame of its own when the model has a
graph break. Code deeper down is shared between runs: the model's own methods (per class), and, for a
model that torch.fx cannot trace, the hook-based front of ``core.networks.SplitNetwork``; past 8 model
classes with graph breaks in one process, Dynamo runs those frames eagerly again, with its logged warning.

The batch size varies at the end of a run (continuous batching retires samples), so Dynamo compiles once
for the first batch size, once more with a dynamic batch dimension at the next, and once for a batch of
one (sizes 0 and 1 are always specialised). ``Run`` counts the graphs compiled during each evaluation
(``stats["compiled_graphs"]``) and the time of the evaluations that compiled (``stats["compile_s"]``, also
part of ``front_s``), the warm-up cost.
"""

from __future__ import annotations

import types
from typing import Callable

import torch

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
