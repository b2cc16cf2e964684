"""Identically represented inputs (IRIs): inputs that a front model maps to the same activation as a seed.

``generate_iris(model, layer, inputs, ...)`` is the model-level entry point (cut, cache, fake ReLU);
``optimize_iris(front_fn, seeds, ...)`` is the batched optimiser on any differentiable callable. Both
return an :class:`IRISet`. The update step runs on an array backend: NumPy (CPU), CuPy (GPU, one fused
kernel) or PyTorch (reference), sharing memory with torch through DLPack.

Defaults and why: the default optimiser is per-sample L-BFGS (``lbfgs.py``; sigmoid-parametrised
pixels, per-sample Armijo line search, Polyak first steps since the minimum is 0, per-sample Adam phases
for samples that stall). ``docs/iri_depth.md`` has the measurements against the plain Adam loop at deep
layers of ResNet-18 and VGG-16-BN (``scripts/iri_depth_study.py``, ``benchmarks/bench_iri.py``). Adam (lr
0.2, per-sample cosine cycles of 300 then 600 steps, straight-through gradient at the last ReLU) and
normalised gradient stay selectable with ``optimizer=``.
"""

from .backends import BACKENDS, available_backends
from .generate import generate_iris
from .optimizer import DEFAULT_LR, DEFAULT_OPTIMIZER, INITS, OPTIMIZERS, derangement, optimize_iris
from .result import IRISet

__all__ = [
    "BACKENDS",
    "DEFAULT_LR",
    "DEFAULT_OPTIMIZER",
    "INITS",
    "IRISet",
    "OPTIMIZERS",
    "available_backends",
    "derangement",
    "generate_iris",
    "optimize_iris",
]
