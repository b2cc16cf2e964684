"""Identically represented inputs (IRIs): inputs that a front model maps to the same activation as a seed.

``generate_iris(model, layer, inputs, ...)`` is the model-level entry point (cut, presets, cache, surrogate ReLU
gradients); ``optimize_iris(front_fn, seeds, settings, options)`` is the batched optimiser on any differentiable callable
(``Settings``: what to run; ``RunOptions``: how).
Both return an [`IRISet`][IRISet]. ``generate_iris`` runs ``optimizer="auto"``: a named preset of tuning values
(``presets.PRESETS``) chosen from the front's structure by ``presets.choose_preset`` (per-sample L-BFGS at deep
ResNet cuts that compress the input, Adam with a schedule for the structure elsewhere); the preset that ran is
``iris.settings["preset"]``. docs/iris.md has the presets, the measurements behind them and the tuning keys.

Modules: ``generate`` (the model-level entry), ``presets`` (the presets and the rules), ``settings`` (options,
validation), ``relu`` (tracing the front, surrogate ReLU gradients), ``front`` (the private, folded copy of the
front), ``optimize`` (``optimize_iris``), ``run`` (the loop), ``state`` (slots, starts, schedule, checkpoints), ``adam`` and
``lbfgs`` (the steppers), ``kernels`` and ``backends`` (elementwise updates on NumPy / CuPy / torch,
``torch.compile``), ``result`` (``IRISet``), ``store`` (disk cache, files), ``sharded`` (torchrun),
``service`` (the ``iri-*`` metrics).
"""

from .backends import BACKENDS, available_backends
from .generate import generate_iris
from .optimize import optimize_iris
from .presets import PRESETS
from .result import IRISet
from .settings import DEFAULT_OPTIMIZER, INITS, OPTIMIZERS, TUNING, RunOptions, Settings

__all__ = [
    "BACKENDS",
    "DEFAULT_OPTIMIZER",
    "INITS",
    "IRISet",
    "OPTIMIZERS",
    "PRESETS",
    "RunOptions",
    "Settings",
    "TUNING",
    "available_backends",
    "generate_iris",
    "optimize_iris",
]
