"""Identically represented inputs (IRIs): inputs that a front model maps to the same activation as a seed.

``generate_iris(model, layer, inputs, ...)`` is the model-level entry point (cut, cache, fake ReLU);
``optimize_iris(front_fn, seeds, ...)`` is the batched optimiser on any differentiable callable. Both
return an :class:`IRISet`. The update step runs on an array backend: NumPy (CPU), CuPy (GPU, one fused
kernel) or PyTorch (reference), sharing memory with torch through DLPack.
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
