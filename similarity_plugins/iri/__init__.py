"""Identically represented inputs (IRIs): inputs that a front model maps to the same activation as a seed.

``generate_iris(model, layer, inputs, ...)`` is the model-level entry point (cut, cache, fake ReLU);
``optimize_iris(front_fn, seeds, ...)`` is the batched optimiser on any differentiable callable. Both
return an :class:`IRISet`. The update step runs on an array backend: NumPy (CPU), CuPy (GPU, one fused
kernel) or PyTorch (reference), sharing memory with torch through DLPack.

Defaults and why (measured on 2 CPU cores; ``benchmarks/bench_iri.py`` reproduces them): at SmallCNN
``block3`` (digits, 32 x 4 x 4 = 512 values), 64 noise seeds, 1,000 steps, median (95th pct) relative error:
Adam lr 0.05 cosine 0.083 (0.13); with the straight-through "fake ReLU" 0.023 (0.056); Adam lr 0.2 cosine
with fake ReLU < 1e-4 (0.002) when run to the end; normalised gradient 0.041 (0.053). Per-sample warm
restarts (cosine cycles of 300 then 600 steps, restarting from the best iterate; the default) reach a median
of 1e-2 in 261 steps per sample there, against 837 for one cosine over the budget (32 seeds); at ResNet-18
``layer4`` (32x32 inputs) in 700 against 721, where first cycles of 100 steps never reach 1e-2.
"""

from .backends import BACKENDS, available_backends
from .generate import generate_iris
from .optimizer import DEFAULT_LR, INITS, OPTIMIZERS, derangement, optimize_iris
from .result import IRISet

__all__ = [
    "BACKENDS",
    "DEFAULT_LR",
    "INITS",
    "IRISet",
    "OPTIMIZERS",
    "available_backends",
    "derangement",
    "generate_iris",
    "optimize_iris",
]
