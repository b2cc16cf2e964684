"""``compile=True``: the front's forward+backward through ``torch.compile``, one fresh compilation per run.

Only the evaluations that need gradients run compiled; the seeds' targets (computed without gradients) and
the working batch's sizing pass run the eager front, so the targets are exactly those of an eager run. The
compiled front computes the same function up to float rounding (measured: 1e-6 relative on ResNet-18
``layer3``), so IRIs from ``compile=True`` are not bit-identical to eager ones; ``compile`` is part of the
settings, hence of the cache key, and a run resumes only with the setting it was started with.

TorchDynamo keeps its compiled code per Python code object and, after ``recompile_limit`` (8) guard
failures, silently runs that code eagerly. Every run in a process calls the front through the same code
(a closure over a new model), so the ninth run would quietly lose compilation; each run therefore compiles
its own copy of the calling code object, and nothing is shared between runs.

The batch size varies at the end of a run (continuous batching retires samples), so Dynamo compiles once
for the first batch size and once more, with a dynamic batch dimension, at the next one; the
``compile_s`` figure of a run's ``stats`` is the time of the evaluations at batch sizes not seen before, a
measure of the warm-up cost.
"""

from __future__ import annotations

import types
from typing import Callable

import torch

COMPILE_FIX = ("run without compile=True (the eager front gives the same IRIs up to float rounding), or give "
               "torch.compile what it needs: a C++ compiler on the CPU, Triton on CUDA")


def compile_front(front_fn: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[torch.Tensor], torch.Tensor]:
    """``front_fn`` (batch (B, ...) -> activations (B, ...)) compiled with ``torch.compile`` for this run.

    The returned callable runs the compiled front where gradients are enabled and ``front_fn`` itself
    where they are not (targets, shape probes)."""
    def call(x: torch.Tensor) -> torch.Tensor:
        return front_fn(x)

    own = types.FunctionType(call.__code__.replace(), call.__globals__, call.__name__, call.__defaults__,
                             call.__closure__)   # a new code object: Dynamo's cache and limit are per run
    compiled = torch.compile(own)

    def front(x: torch.Tensor) -> torch.Tensor:
        return compiled(x) if torch.is_grad_enabled() else front_fn(x)

    return front


def compile_error(exc: BaseException) -> RuntimeError:
    """The error raised when the first compiled evaluation at a batch size fails: names the cause and the fix."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return RuntimeError(f"compile=True: torch.compile could not compile the front's forward+backward "
                        f"({type(exc).__name__}: {first[:300]}); {COMPILE_FIX}")
