"""Named presets of the IRI optimiser and the structural rules by which ``optimizer="auto"`` picks one.

A preset is a complete set of tuning values (``PRESETS``). ``choose_preset`` reads the front's structure (ReLU
calls, max-pools, BatchNorm, the cut's size and stride, recorded by ``relu.trace_front``) and names the preset
to run; ``generate_iris`` records the name in ``IRISet.settings["preset"]``. Asking for a preset by name
(``tuning={"preset": NAME}``) runs exactly the values of this table, so asking for the one ``auto`` chose gives
the same IRIs. docs/iris.md has the measurement behind each preset and threshold.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Adam: lr 0.2, per-sample cosine cycles of 300, 600, ... steps restarting from the best iterate
_ADAM = {"optimizer": "adam", "lr": 0.2, "cycle_steps": 300, "cycle_mult": 2.0, "cycle_decay": 1.0, "beta1": 0.9,
         "beta2": 0.999, "eps": 1e-8, "relu_leak": 0.0, "fold_bn": False, "fake_relu": "auto", "history": 30,
         "armijo": 1e-4, "max_backtracks": 8}
# heavy momentum, leaky ReLU gradients, BatchNorm folded, each restart at half the step size
_RESNET = {**_ADAM, "beta1": 0.98, "relu_leak": 0.1, "fold_bn": True, "cycle_decay": 0.5}
# one cosine over the budget with leaky gradients at every ReLU call, the last one included
_WIDE = {**_ADAM, "cycle_steps": 0, "fold_bn": True, "relu_leak": 0.1, "fake_relu": "none"}
_VGG_LAST = {**_ADAM, "lr": 0.02, "cycle_steps": 400, "fold_bn": True, "beta1": 0.98, "beta2": 0.95, "relu_leak": 0.1}

#: The run's own defaults, besides a preset's tuning values: the one place they are decided. The ``iri_*`` options
#: of the metrics and the ``iris`` command read them here; `generate_iris`'s and `settings.Settings`'s signatures
#: show them as literals (what the reference prints), held equal to this table by tests/iri/test_defaults.py.
RUN_DEFAULTS: dict[str, Any] = {
    "steps": 1000, "tol": 1e-2, "optimizer": "auto", "init": "noise", "cycle_steps": None, "batch_size": 128,
    "backend": "auto", "compile": False, "precision": "auto",
}

PRESETS: dict[str, dict[str, Any]] = {
    "adam": dict(_ADAM),
    "lbfgs": {**_ADAM, "optimizer": "lbfgs", "lr": 1.0, "cycle_steps": 0, "relu_leak": 0.1, "fold_bn": True},
    "resnet": dict(_RESNET),
    "resnet-compressive": {**_RESNET, "lr": 0.1},
    "resnet-cosine": {**_RESNET, "cycle_steps": 0, "cycle_decay": 1.0},
    "wide": dict(_WIDE),
    "wide-nobn": {**_WIDE, "lr": 0.1},
    "vgg-last-pool": dict(_VGG_LAST),
    "vgg-last-pool-nobn": {**_VGG_LAST, "lr": 0.05},
    "vgg-deep-pool": {**_ADAM, "lr": 0.05, "cycle_steps": 0, "fold_bn": True, "relu_leak": 0.1},
    "pool-expanding": {**_ADAM, "cycle_steps": 150, "fold_bn": True},
    "pool-wide-nobn": {**_ADAM, "lr": 0.1},
    "smooth": {**_ADAM, "cycle_steps": 150, "fold_bn": True},
}

# the rule that selects each preset (docs/iris.md has the table with the measurement behind each)
RULES: dict[str, str] = {
    "lbfgs": ">= 6 ReLU calls after the last max-pool, cut <= 1/2 of the input's values, L-BFGS pairs fit in 4 GiB",
    "resnet-compressive": "as lbfgs, but the curvature pairs would not fit in memory (or optimizer='adam')",
    "resnet": ">= 6 ReLU calls after the last max-pool (or 4-5 in a front of < 8), cut keeps > 1/2 of the values",
    "resnet-cosine": "as resnet, at a stride of 16 or more (bottleneck ResNets' layer3/layer4 at 32x32)",
    "wide": "ResNet cut with >= 2x the input's values at stride >= 8; or a max-pool cut keeping > 1/2 of the "
            "values behind 6-7 ReLU calls, or > 1x behind 8 or more; BatchNorm in the front",
    "wide-nobn": "as wide at a max-pool, in a front without BatchNorm",
    "vgg-last-pool": ">= 8 ReLU calls, cut <= 1/4 of the input's values, BatchNorm in the front",
    "vgg-last-pool-nobn": "as vgg-last-pool, in a front without BatchNorm",
    "vgg-deep-pool": ">= 8 ReLU calls, cut between 1/4 and 1x the input's values",
    "pool-expanding": "a max-pool cut behind 1-5 ReLU calls with >= 2x the input's values",
    "pool-wide-nobn": "a max-pool cut behind 1-5 ReLU calls keeping > 1/2 of the values, no BatchNorm",
    "smooth": "no ReLU call, other activations (GELU, SiLU, ReLU6, ...)",
    "adam": "everything else (shallow and small CNN cuts, fronts without activations)",
}

LBFGS_MIN_RELUS = 6          # ReLU calls after the last max-pool that make a cut "deep"
SHALLOW_RESNET_RELUS = 4     # ... or this many in a front of fewer than DEEP_POOLED_RELUS ReLU calls
DEEP_POOLED_RELUS = 8        # ReLU calls that make a max-pool front "deep" (VGG's 4th and 5th pools)
WIDE_POOLED_RELUS = 6        # ReLU calls from which a wide pooled cut nearly pins the image down
LBFGS_MAX_BYTES = 4 * 2**30  # L-BFGS only when 2 x history x pixels x slots floats fit in this
COMPRESSION = 2              # "compressive": the input has at least this many times the cut's values
STRONG_COMPRESSION = 4       # VGG's last pools: the input has at least this many times the cut's values
EXPANSION = 2                # "expanding": the cut has at least this many times the input's values
WIDE_RESNET_MIN_STRIDE = 8
COSINE_RESNET_MIN_STRIDE = 16


@dataclass(frozen=True)
class Structure:
    """What ``choose_preset`` looks at: counts from one traced front pass and the sizes at both ends.

    ``input_values`` / ``output_values``: values per sample at the input and at the cut (0: unknown);
    ``stride``: how many times fewer rows the cut has (a power of two; 0: unknown); ``history_bytes``: memory
    L-BFGS's curvature pairs would take for the working batch (bytes).
    """

    relu_calls: int = 0
    relus_after_last_maxpool: int = 0
    other_activation_calls: int = 0
    input_values: int = 0
    output_values: int = 0
    stride: int = 0
    ends_at_maxpool: bool = False
    batchnorm: bool = True
    history_bytes: float = 0.0


def compresses(input_values: int, output_values: int, factor: float) -> bool:
    """True when the cut has at most 1 / ``factor`` of the input's values; False when a size is unknown (0)."""
    return 0 < output_values * factor <= input_values


def expands(input_values: int, output_values: int, factor: float) -> bool:
    """True when the cut has at least ``factor`` times the input's values; False when a size is unknown (0)."""
    return input_values > 0 and output_values >= factor * input_values


def choose_preset(s: Structure, optimizer: str = "auto") -> str:
    """The preset to run at a front of structure ``s``: ``auto``'s pick for ``optimizer="auto"``, the L-BFGS
    preset for "lbfgs", and for "adam" the Adam preset for this structure (``resnet-compressive`` where
    ``auto`` would run L-BFGS)."""
    if optimizer == "lbfgs":
        return "lbfgs"
    known = s.input_values > 0 and s.output_values > 0
    compressive = compresses(s.input_values, s.output_values, COMPRESSION)
    deep = s.relus_after_last_maxpool >= LBFGS_MIN_RELUS
    if deep and (compressive or not known):
        if optimizer == "auto" and s.history_bytes <= LBFGS_MAX_BYTES:
            return "lbfgs"
        return "resnet-compressive" if compressive else "resnet"
    shallow_resnet = s.relus_after_last_maxpool >= SHALLOW_RESNET_RELUS and s.relu_calls < DEEP_POOLED_RELUS
    wide = known and not compressive   # the cut keeps more than half the input's values
    if deep or shallow_resnet:
        if expands(s.input_values, s.output_values, EXPANSION) and s.stride >= WIDE_RESNET_MIN_STRIDE:
            return "wide"
        if wide and s.stride >= COSINE_RESNET_MIN_STRIDE:
            return "resnet-cosine"
        return "resnet-compressive" if compressive else "resnet"
    return _pooled_preset(s, known, wide)


def _pooled_preset(s: Structure, known: bool, wide: bool) -> str:
    """The preset of a front ending at or after a max-pool (VGG, small CNNs) or without ReLU calls."""
    at_pool = s.ends_at_maxpool and s.relus_after_last_maxpool == 0   # not a conv or ResNet block after a pool
    nobn = "" if s.batchnorm else "-nobn"
    if s.relu_calls >= DEEP_POOLED_RELUS:
        if at_pool and known and s.output_values > s.input_values:
            return "wide" + nobn
        if not compresses(s.input_values, s.output_values, STRONG_COMPRESSION):
            return "vgg-deep-pool"
        return "vgg-last-pool" + nobn
    shallow = 1 <= s.relu_calls < WIDE_POOLED_RELUS
    if at_pool and shallow and expands(s.input_values, s.output_values, EXPANSION):
        return "pool-expanding"
    if s.relu_calls >= WIDE_POOLED_RELUS and wide and at_pool:
        return "wide" + nobn
    if shallow and wide and at_pool and not s.batchnorm:
        return "pool-wide-nobn"
    if s.relu_calls == 0 and s.other_activation_calls > 0:
        return "smooth"
    return "adam"
