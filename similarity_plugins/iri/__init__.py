"""Identically represented inputs (IRIs): inputs that a front model maps to the same activation as a seed.

``generate_iris(model, layer, inputs, ...)`` is the model-level entry point (cut, cache, fake ReLU);
``optimize_iris(front_fn, seeds, ...)`` is the batched optimiser on any differentiable callable. Both
return an :class:`IRISet`. The update step runs on an array backend: NumPy (CPU), CuPy (GPU, one fused
kernel) or PyTorch (reference), sharing memory with torch through DLPack.

Defaults and why: ``generate_iris`` runs ``optimizer="auto"``: per-sample L-BFGS (``lbfgs.py``: on sigmoid-
parametrised pixels, the pairs of each sample's last 30 evaluations, per-sample Armijo line search, Polyak
first steps since the minimum is 0, leaky ReLU gradients, BatchNorm folded in a private copy of the front)
when at least 6 ReLU calls follow the front's last max-pool and the cut has at most half as many values as the
input, as at ResNet ``layer3`` / ``layer4`` (3.8-4.1x fewer steps and 3.2-3.7x less time than the plain loop
at ResNet-18 on digits, every sample converged; 4.3-4.4x on natural-image patches, where dark seeds leave 0-8%
unconverged); Adam with heavy momentum (beta1 0.98), leaky ReLU gradients, folded BatchNorm and the step size
halved at each restart at such deep fronts when the cut keeps more of the input (ResNet ``layer2``: 3.2-3.9x
on digits, 1.4-2.6x on patches); and Adam (lr 0.2, per-sample cosine cycles of 300 then 600 steps, straight-
through gradient at the last ReLU) elsewhere, where L-BFGS crawls (max-pool cuts, shallow cuts), with first
cycles of 150 and folded BatchNorm at shallow pooled cuts with twice the input's values or more; deep max-pool
fronts such as VGG's get their own Adam schedule, chosen by how much the cut compresses the input, and wide
pooled cuts that nearly pin the image down, and wide strided ResNet cuts such as ResNet-50 ``layer2`` (where
no optimiser's median reaches 1e-2 within 1,000 steps), one cosine over the budget with leaky gradients, the
plain loop's schedule (``auto.auto_adam_defaults``).
``optimize_iris`` on a bare function defaults to Adam.
``docs/iri_depth.md`` has the measurements (``scripts/iri_depth_study.py``, ``benchmarks/bench_iri.py``).
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
