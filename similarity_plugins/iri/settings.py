"""The IRI optimiser's settings: defaults per optimiser, validation with errors that name the fix.

Every field of :class:`Settings` shapes the result, so the whole object is part of the cache key and is
saved with every IRI set.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ..utils.text import did_you_mean
from .schedule import SCHEDULES

OPTIMIZERS = ("lbfgs", "adam", "normgrad")
AUTO = "auto"   # generate_iris's default: L-BFGS or Adam, chosen from the front's structure (auto_optimizer)
INITS = ("noise", "shuffle")
# optimize_iris (a bare front function, no model to look at) defaults to Adam: lr 0.2 with per-sample cosine
# cycles of 300, 600, ... steps (warm restarts from the best iterate); normgrad: normalised-gradient steps of
# L2 length lr, halved over 4 stages; lbfgs: per-sample L-BFGS (lbfgs.py) with leaky ReLU gradients.
DEFAULT_OPTIMIZER = "adam"
DEFAULT_LR = {"lbfgs": 1.0, "adam": 0.2, "normgrad": 1.0}
DEFAULT_RELU_LEAK = {"lbfgs": 0.1, "adam": 0.0, "normgrad": 0.0}
# Conv+BatchNorm folding of the front (fold.py): on for L-BFGS; off for the first-order optimisers, whose IRIs
# thereby stay bit-identical to earlier releases (pass fold_bn=True to speed them up too)
DEFAULT_FOLD_BN = {"lbfgs": True, "adam": False, "normgrad": False}
# auto: L-BFGS when at least this many ReLU calls follow the front's last max-pool (deep cuts of ResNets) and
# the cut compresses the input at least AUTO_LBFGS_MIN_COMPRESSION-fold; Adam otherwise (cuts at or just after
# max-pools, as in VGG and small CNNs, and shallow cuts, whose IRIs keep many pixels at 0 or 1, where the logit
# parametrisation of L-BFGS crawls). Measured: docs/iri_depth.md.
AUTO_LBFGS_MIN_RELUS = 6
# Deep fronts without a max-pool near the cut whose representation has more than half as many values as the
# input (ResNet-18 / ResNet-34 layer2 at 32x32: 2,048 of 3,072) run Adam with heavy momentum and leaky ReLU
# gradients instead of L-BFGS: 186 / 228 steps to the median against L-BFGS's 258 / 317 (plain loop: 729 /
# 722), every sample converged. At layer3 (1,024 values) L-BFGS stays ahead in steps (155 / 60 against 165 /
# 85), at ResNet-18 layer4 far ahead (197 against 382-451).
AUTO_LBFGS_MIN_COMPRESSION = 2
# Adam at deep unpooled fronts (non-compressive cuts, or where L-BFGS's pairs would not fit in memory): Adam's
# lr (0.2) and cycles (300, 600, ...) with beta1 0.98, leaky ReLU gradients and BatchNorm folded. lr 0.15 /
# 0.3 and cycles of 400 took 184 / 197 / 210 steps at ResNet-18 layer2 and 368 / 230 / 234 at ResNet-34
# layer2 (lr 0.2, cycles 300: 186 and 228); beta1 0.9 (Adam's default) with lr 0.05: far behind L-BFGS.
# Each restart halves the lr (cycle_decay 0.5): a sample that missed its first cycle restarts from its best
# iterate, where the full lr only throws it back out. On digits nothing changes (every sample converges in
# its first cycle); on natural-image patches 15 of 16 samples converge at ResNet-18 layer2 instead of 13,
# 75% instead of 62% at ResNet-34 layer2 (docs/iri_depth.md, round 5).
AUTO_DEEP_ADAM = {"beta1": 0.98, "relu_leak": 0.1, "fold_bn": True, "cycle_decay": 0.5}
# ... at lr 0.1 where the cut does compress at least AUTO_LBFGS_MIN_COMPRESSION-fold (Adam there only when the
# pairs would not fit in memory, e.g. 224x224 images in large batches): lr 0.1 / 0.2 took 382 / 451 (94%
# converged) steps at ResNet-18 layer4, 165 / 165 at layer3, 81 / 85 at ResNet-34 layer3, 207 / 206 at layer4
# (measured before the restart decay joined AUTO_DEEP_ADAM; it changes only samples that miss their first cycle)
AUTO_DEEP_COMPRESSIVE_LR = 0.1
# auto never picks L-BFGS when its curvature pairs would take more memory than this (2 x history x pixels x
# working-batch slots floats: 4.6 GB for 128 slots of 3x224x224 at history 30); Adam needs a few floats per pixel
AUTO_LBFGS_MAX_BYTES = 4 * 2**30
# auto, deep fronts that end at or just after a max-pool (VGG): at least this many ReLU calls in all get Adam
# with BatchNorm folded and a schedule chosen by how much the cut compresses its input. Measured on VGG-16-BN
# (trained 2 and 3 epochs) and VGG-11-BN (docs/iri_depth.md). Where the representation has at most a quarter
# as many values as the input (their last pools: 512 of 3,072), Adam's error settles at a floor proportional to its
# lr (about 5 x lr at VGG-16-BN features.43), so a small lr with short per-sample cosine cycles (400, 800, ...
# steps) wins, and heavy momentum (beta1 0.98) damps the oscillation that sets the floor: lr 0.02 with beta1
# 0.98 (without the leak below) converges every sample, 270 / 287 / 210 steps to the median on these three
# donors (beta1 0.9 at lr 0.025: 325 / 339 / 281; lr 0.025 with beta1 0.98: 271 / 586 / 201, lr 0.015: 299 /
# 279 / -; Adam's defaults: median 0.025 after 1,000). Where it has more (VGG-16-BN features.33 / .42:
# 2,048), small lrs stall (0.067 at 0.02) and lr 0.05 with one cosine over the budget and leaky ReLU gradients (0.1) does best,
# though no schedule tried converges there (0.034 / 0.029; without the leak 0.044 / 0.037; with beta1 0.98
# 0.050; Adam's defaults 0.082)
AUTO_DEEP_POOLED_RELUS = 8
AUTO_COMPRESSION = 4   # "compressive cut": input values >= this many times the representation's values
AUTO_DEEP_POOLED_ADAM = {"lr": 0.05, "cycle_steps": 0, "fold_bn": True, "relu_leak": 0.1}
# ... and leaky ReLU gradients (0.1) there too: on natural-image patches (a VGG-16-BN trained 2 epochs) 75%
# of the samples converge at features.43 instead of 50% (602 steps to the median instead of 805); on digits it costs
# 3-7% more steps at three of four donors (270 -> 280, 287 -> 306, 210 -> 221; VGG-11: 210 -> 200)
# ... and a short memory of the squared gradients (beta2 0.95, round 8): on patches VGG-16-BN features.43 reaches
# the median at 582 steps with 94% of 16 samples converged (beta2 0.999: 602, 75%; at 32 seeds 529 against 618,
# both 97%), VGG-19-BN's last pool converges 50% instead of 38%; on the digits donors it is within 3% (280 -> 282,
# 306 -> 310, 200 -> 195, 221 -> 211). beta2 0.9-0.97 all help on patches; 0.95 converged the most
AUTO_COMPRESSIVE_POOLED_ADAM = {"lr": 0.02, "cycle_steps": 400, "fold_bn": True, "beta1": 0.98, "beta2": 0.95,
                                "relu_leak": 0.1}
# ... at lr 0.05 in fronts without BatchNorm (torchvision's vgg11 / vgg16, round 9), where lr 0.02 is too
# small: steps to the median 155 / 144 / 356 (converged 94% / 94% / 69%) at VGG-16 features.30, VGG-11
# features.20 (digits) and VGG-16 features.30 (patches) against 233 / 210 / 420 (94% / 94% / 69%) at 0.02
# (plain loop 202 / 299 / 558; lr 0.035: - / 163 / 362)
AUTO_UNNORMALIZED_POOLED_LR = 0.05
# ... and lr 0.1 at the wide pooled cuts (AUTO_WIDE_ADAM) and at the wide pools with fewer ReLU calls (Adam's
# defaults otherwise) of fronts without BatchNorm (round 11). Steps to the median, 16 seeds (before, at lr 0.2;
# the plain loop's best), every sample converged: vgg16 features.16 105 (452; 72) on digits, 595 (707; 614) on
# patches; vgg11 features.10 99 (157; 111), features.15 281 (524; 182). Faster variants converged fewer samples
# on patches (lr 0.05: 75%; Adam's cycles at lr 0.1: 90% of 48; lr_adapt 0.05: 75%; docs/iri_depth.md)
AUTO_UNNORMALIZED_WIDE_LR = 0.1
# auto, wide pooled cuts: fronts that end at a max-pool (no ReLU call after it) with AUTO_WIDE_MIN_RELUS to
# AUTO_DEEP_POOLED_RELUS - 1 ReLU calls whose cut does not compress the input AUTO_LBFGS_MIN_COMPRESSION-fold
# (VGG-11-BN's 4th pool and VGG-16-BN's 3rd at 32x32). The representation nearly pins the image down (an
# inversion: the median reaches 1e-2 within 1,000 steps nowhere, ours or the plain loop's), and the restart
# cycles built to finish converging samples fast only throw progress away. There, one cosine over the budget
# at Adam's lr (0.2, the plain loop's schedule), BatchNorm folded and leaky ReLU gradients at every ReLU call,
# the last one included (fake_relu "none", applied when the caller left fake_relu at "auto"); the caller's lr
# or schedule option means Adam's defaults. Final median over 16 seeds (Adam's defaults; the plain loop's
# best), on digits: VGG-11-BN features.21 0.0197 (0.0386; 0.0225), VGG-16-BN features.23 0.0635 (0.112;
# 0.085); on natural-image patches 0.0122, 38% of samples converged (0.0209; 0.0139, 19%) and 0.057 (0.109;
# 0.070). With the straight-through gradient at the last ReLU instead: 0.0211 / 0.0662 / 0.0141 / 0.060. On a
# donor not used to choose it, VGG-13-BN features.20 (3rd pool, 6 ReLU calls; 8 seeds): 0.029 (0.047;
# 0.023), still behind the plain loop; true gradients without the leak match it there (0.024) but end at
# 0.022 / 0.081 at features.21 / .23 (8 seeds; the rule: 0.016 / 0.062). Shallower wide cuts converge on
# patches with Adam's cycles and keep them: VGG-11-BN features.14 (4 ReLU calls) reaches the median at 754
# steps (one cosine: never, 0.0129), ResNet-18 layer1.1 (5) at 668 (one cosine: 779). Deeper pooled fronts
# (VGG-16-BN features.33, .39) keep AUTO_DEEP_POOLED_ADAM's lr 0.05: lr 0.2 ends there at 0.054, not 0.034.
# Round 6 kept it from deep unpooled (ResNet) cuts, though they can be as wide: at ResNet-50 layer2 (8,192
# values from 3,072 pixels) one cosine ended at 0.074 against AUTO_DEEP_ADAM's 0.162 and the plain loop's
# 0.111, but with the CIFAR stem ResNet-18 layer3 (16,384 values) converges under AUTO_DEEP_ADAM in 240 steps
# and under one cosine in 758 (plain loop: 643). Round 7 found what tells them apart, the stride (below).
# With AUTO_DEEP_POOLED_RELUS ReLU calls or more it takes a cut at a max-pool with more values than the input
# (round 11, measured on one donor, VGG-19-BN features.26: 4,096 values, 8 ReLU calls; 16 seeds, final median):
# 0.103 against AUTO_DEEP_POOLED_ADAM's 0.137 and the plain loop's 0.114 (lr 0.1); features.33 (2,048) keeps lr 0.05
AUTO_WIDE_ADAM = {"cycle_steps": 0, "fold_bn": True, "relu_leak": 0.1, "fake_relu": "none"}
AUTO_WIDE_MIN_RELUS = 6
# ... and at deep unpooled (ResNet) cuts with at least twice the input's values at a stride of 8 or more (the
# stride rounded to a power of two; bottleneck ResNets' layer2 at 28x28, 32x32 or 224x224: 512 channels at 1/8
# of the rows; a CIFAR-stem ResNet's layer4), where nothing converges either. Final median, 8 seeds
# (AUTO_DEEP_ADAM; the plain loop's best): ResNet-50 layer2 0.086 (0.162; 0.111) on digits, 0.113 (0.145; 0.130)
# on patches, layer2.1 0.046 (0.098; 0.054); CIFAR-stem ResNet-18 layer4 0.0122 (4 seeds; 0.0136; 0.0138). At
# stride 4, where some samples converge, AUTO_DEEP_ADAM stays: CIFAR-stem ResNet-18 layer3 (16,384 values)
# reaches the median in 240 steps against one cosine's 758; ResNet-50 layer1 (16,384) on patches ends at 0.0114
# with 38% converged against 0.0167 / 12% (on digits one cosine is ahead there: 0.0197 against 0.0240; plain
# 0.0188).
AUTO_WIDE_RESNET_EXPANSION = 2
AUTO_WIDE_RESNET_MIN_STRIDE = 8
# ... and AUTO_DEEP_ADAM from 4 ReLU calls after the last max-pool in fronts of fewer than AUTO_DEEP_POOLED_RELUS
# ReLU calls (ResNet-18 layer1: 4 after the stem's pool; a CIFAR-stem ResNet-18's layer1: 5, no pool). ResNet-18
# layer1, 8 seeds (Adam's defaults; the plain loop): 646 steps to the median, 75% converged (never, 38%; 946,
# 50%) on digits, 541 (668; 630) on patches; CIFAR-stem layer1 191 mean steps (216). Fronts of 8 or more ReLU
# calls with 4-5 after a pool (VGG-19 mid-block cuts) keep the pooled rules (docs/iri_depth.md, round 7).
AUTO_SHALLOW_RESNET_RELUS = 4
# auto, shallow expanding pooled cuts: fronts that end at a max-pool with fewer than AUTO_WIDE_MIN_RELUS ReLU
# calls whose cut has at least AUTO_EXPANSION times the input's values (VGG's 1st and 2nd pools at 5.3x and
# 2.7x, SmallCNN block1 / block2 at width 32: 8x and 2x). The front is nearly invertible there (IRIs end
# 0.002-0.03 RMS from their seeds), and Adam's first cycle of 300 steps only ends too late: cycles of 150
# (then 300, 600) with BatchNorm folded reach the median in 106-132 steps where the default took 206-257
# (digits, 8 seeds; the plain loop 143-774): VGG-16-BN features.6 119 (232; 452), features.13 132 (257;
# 774), VGG-11-BN features.7 122 (239; 515), features.3 106 (206; 143), SmallCNN block1 119 (231; 462),
# block2 128 (246; 573); on patches VGG-16-BN features.6 116 (226; 589), VGG-11-BN features.7 128 (247;
# 623) with the same converged fraction, features.13 276 (263; 812). Cycles of 100 / 120 were faster still
# at most of these cuts (72-111 steps) but converged fewer samples on patches (62-75% against 75-88%) and
# took 273 at VGG-16-BN features.13 on digits. Narrower cuts keep 300: at SmallCNN block3 (half the input's
# values) cycles of 150 took 410 steps against 260 (docs/iri_depth.md, round 7).
AUTO_EXPANSION = 2
AUTO_EXPANDING_ADAM = {"cycle_steps": 150, "fold_bn": True}
FIRST_ORDER_ONLY = ("schedule", "lr_floor", "stages", "beta1", "beta2", "eps", "restart_patience",
                    "restart_threshold", "restart_decay", "cycle_steps", "cycle_mult", "cycle_decay", "lr_adapt")
# the first-order options that shape the step-size schedule: a caller who sets one keeps Adam's defaults at
# deep max-pool cuts and drops AUTO_DEEP_ADAM's restart decay at deep ResNet cuts (auto_adam_defaults); the
# moments' options (beta1, beta2, eps) only replace their own value
SCHEDULE_OPTIONS = tuple(name for name in FIRST_ORDER_ONLY if name not in ("beta1", "beta2", "eps", "lr_adapt"))
LBFGS_ONLY = ("history", "armijo", "max_backtracks", "stall_patience", "phase_steps", "phase_lr", "warmup_steps")
DEFAULT_SCHEDULE = {"lbfgs": "constant", "adam": "cosine", "normgrad": "step"}
DEFAULT_CYCLE_STEPS = {"lbfgs": 0, "adam": 300, "normgrad": 0}


@dataclass(frozen=True)
class Settings:
    """Every setting that shapes the result (used for the cache key and saved with the set)."""

    steps: int = 1000
    tol: float = 1e-2
    optimizer: str = DEFAULT_OPTIMIZER
    lr: float = 0.2
    init: str = "noise"
    seed: int = 0
    schedule: str = "cosine"
    lr_floor: float = 0.0
    stages: int = 4
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    restart_patience: int = 0
    restart_threshold: float = 0.01
    restart_decay: float = 0.5
    cycle_steps: int = 0
    cycle_mult: float = 2.0
    cycle_decay: float = 1.0
    lr_adapt: float = 0.0
    history: int = 30   # curvature pairs per sample; 50 took 2-6% more time at every ResNet cut (docs/iri_depth.md)
    armijo: float = 1e-4
    max_backtracks: int = 8
    stall_patience: int = 0
    phase_steps: int = 100
    phase_lr: float = 0.2
    warmup_steps: int = 0
    fake_relu: str = "none"
    relu_leak: float = 0.0
    fold_bn: bool = False

    def as_dict(self) -> dict[str, Any]:
        """The settings as a plain dict (JSON-able; saved with every IRI set)."""
        return dict(self.__dict__)


ADVANCED = ("schedule", "lr_floor", "stages", "beta1", "beta2", "eps", "restart_patience", "restart_threshold",
            "restart_decay", "cycle_steps", "cycle_mult", "cycle_decay", "lr_adapt", "history", "armijo",
            "max_backtracks", "stall_patience", "phase_steps", "phase_lr", "warmup_steps", "relu_leak", "fold_bn")


def compresses(input_values: int, output_values: int, factor: float) -> bool:
    """True when a cut with ``output_values`` values per sample has at most 1 / ``factor`` as many as the
    front's input (``input_values`` per sample); False when either size is unknown (0)."""
    return 0 < output_values * factor <= input_values


def expands(input_values: int, output_values: int, factor: float) -> bool:
    """True when a cut with ``output_values`` values per sample has at least ``factor`` times as many as the
    front's input (``input_values`` per sample); False when either size is unknown (0)."""
    return input_values > 0 and output_values >= factor * input_values


def auto_optimizer(relus_after_last_maxpool: int, options: dict[str, Any], history_bytes: float = 0.0,
                   input_values: int = 0, output_values: int = 0) -> str:
    """The optimiser ``optimizer="auto"`` runs: "lbfgs" or "adam".

    ``relus_after_last_maxpool``: ReLU calls in the front after its last max-pool (all of them when it has
    none); ``options``: the advanced options the caller passed; ``history_bytes``: memory L-BFGS's curvature
    pairs would take (bytes); ``input_values`` / ``output_values``: values per sample at the front's input
    and at the cut (0: unknown). An option only one optimiser takes decides (e.g. ``cycle_steps`` -> Adam,
    ``history`` -> L-BFGS); otherwise L-BFGS when at least ``AUTO_LBFGS_MIN_RELUS`` ReLUs follow the last
    max-pool, the input has at least ``AUTO_LBFGS_MIN_COMPRESSION`` times as many values as the cut (or the
    sizes are unknown) and the pairs fit in ``AUTO_LBFGS_MAX_BYTES``; else Adam.
    """
    if any(name in options for name in FIRST_ORDER_ONLY):
        return "adam"
    if any(name in options for name in LBFGS_ONLY):
        return "lbfgs"
    deep = relus_after_last_maxpool >= AUTO_LBFGS_MIN_RELUS
    unknown = not (input_values and output_values)
    compressive = unknown or compresses(input_values, output_values, AUTO_LBFGS_MIN_COMPRESSION)
    return "lbfgs" if deep and compressive and history_bytes <= AUTO_LBFGS_MAX_BYTES else "adam"


def _check_basic(steps: Any, tol: Any, optimizer: Any, init: Any) -> None:
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps <= 0:
        raise ValueError(f"steps must be a positive integer (the per-sample step budget), got {steps!r}")
    if not isinstance(tol, (int, float)) or not math.isfinite(tol) or tol <= 0:
        raise ValueError(f"tol must be a positive number (relative representation error, e.g. 1e-2), got {tol!r}")
    if optimizer == AUTO:
        raise ValueError("optimizer='auto' chooses from the model's structure, so it works in generate_iris (and the "
                         f"iri metrics), not on a bare front function; choose one of {', '.join(OPTIMIZERS)}")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {optimizer!r}; choose one of {', '.join(OPTIMIZERS)} (or 'auto' in "
                         "generate_iris)")
    if init not in INITS:
        raise ValueError(f"unknown init {init!r}; choose 'noise' (0.5 + randn/20) or 'shuffle' (another seed)")


def auto_adam_defaults(relu_calls: int, options: dict[str, Any], lr: float | None, input_values: int = 0,
                       output_values: int = 0, relus_after_last_maxpool: int = 0, stride: int = 0,
                       ends_at_maxpool: bool = False, batchnorm: bool = True) -> dict[str, Any]:
    """Adam's defaults that ``optimizer="auto"`` changes for a deep front.

    ``relu_calls``: ReLU calls in the whole front; ``options``: the advanced options the caller passed;
    ``lr``: the caller's lr (None: default); ``input_values`` / ``output_values``: values per sample at the
    front's input and at the cut; ``relus_after_last_maxpool``: ReLU calls after the front's last max-pool;
    ``stride``: how many times fewer rows the cut has than the input (0: unknown); ``ends_at_maxpool``: the
    last module that ran before the cut is a max-pool; ``batchnorm``: the front runs a BatchNorm layer (True
    when unknown).
    - A deep front without a max-pool near the cut (at least ``AUTO_LBFGS_MIN_RELUS`` ReLU calls after the
      last one, or ``AUTO_SHALLOW_RESNET_RELUS`` in a front of fewer than ``AUTO_DEEP_POOLED_RELUS`` ReLU
      calls; ResNets where Adam runs): ``AUTO_WIDE_ADAM`` where the cut has at least
      ``AUTO_WIDE_RESNET_EXPANSION`` times the input's values at a stride of ``AUTO_WIDE_RESNET_MIN_STRIDE``
      or more and the caller set neither the lr nor a schedule option; else ``AUTO_DEEP_ADAM`` (without its
      restart decay when the caller set a schedule option of their own), plus lr ``AUTO_DEEP_COMPRESSIVE_LR``
      when the cut compresses the input at least ``AUTO_LBFGS_MIN_COMPRESSION``-fold and the caller set no lr.
    - A front ending at or after a max-pool (VGG, small CNNs): {} (Adam's defaults) when the caller set the
      lr or a schedule option (``SCHEDULE_OPTIONS``). Else, "at a pool" meaning that the front ends at a
      max-pool (``ends_at_maxpool``, no ReLU call after it) and "wide" that both sizes are known and the cut
      does not compress the input ``AUTO_LBFGS_MIN_COMPRESSION``-fold: with ``AUTO_DEEP_POOLED_RELUS`` ReLU
      calls or more, ``AUTO_WIDE_ADAM`` at a pool with more values than the input, else
      ``AUTO_COMPRESSIVE_POOLED_ADAM`` where the input has at least ``AUTO_COMPRESSION`` times the cut's
      values (at lr ``AUTO_UNNORMALIZED_POOLED_LR`` without BatchNorm), else ``AUTO_DEEP_POOLED_ADAM``; with
      fewer, ``AUTO_EXPANDING_ADAM`` at a pool with 1 to ``AUTO_WIDE_MIN_RELUS`` - 1 ReLU calls and at least
      ``AUTO_EXPANSION`` times the input's values, ``AUTO_WIDE_ADAM`` at a wide pool with
      ``AUTO_WIDE_MIN_RELUS`` or more, else {}. Without BatchNorm (``batchnorm`` False), ``AUTO_WIDE_ADAM``
      and the wide pools with fewer ReLU calls (otherwise {}) get lr ``AUTO_UNNORMALIZED_WIDE_LR``.
    Other options the caller passed (``fold_bn``, ``beta1``, ...) replace only their own value. The result
    may hold "lr" (not an advanced option) and "fake_relu" (``AUTO_WIDE_ADAM``: applies only where the caller
    left ``fake_relu="auto"``); callers pop both before merging the rest into the advanced options.
    """
    own_schedule = any(name in options for name in SCHEDULE_OPTIONS)
    shallow_resnet = AUTO_SHALLOW_RESNET_RELUS <= relus_after_last_maxpool and relu_calls < AUTO_DEEP_POOLED_RELUS
    if relus_after_last_maxpool >= AUTO_LBFGS_MIN_RELUS or shallow_resnet:
        wide = expands(input_values, output_values, AUTO_WIDE_RESNET_EXPANSION)
        if wide and stride >= AUTO_WIDE_RESNET_MIN_STRIDE and lr is None and not own_schedule:
            return dict(AUTO_WIDE_ADAM)
        compressive = compresses(input_values, output_values, AUTO_LBFGS_MIN_COMPRESSION)
        lr_default = {"lr": AUTO_DEEP_COMPRESSIVE_LR} if compressive and lr is None else {}
        ours = {k: v for k, v in AUTO_DEEP_ADAM.items() if not (own_schedule and k in SCHEDULE_OPTIONS)}
        return {**ours, **lr_default}
    if lr is not None or own_schedule:
        return {}
    known = input_values > 0 and output_values > 0
    wide = known and not compresses(input_values, output_values, AUTO_LBFGS_MIN_COMPRESSION)
    at_pool = ends_at_maxpool and relus_after_last_maxpool == 0   # not inside a ResNet block, nor a conv after a pool
    unnormalized = {} if batchnorm else {"lr": AUTO_UNNORMALIZED_WIDE_LR}
    if relu_calls >= AUTO_DEEP_POOLED_RELUS:
        if at_pool and known and output_values > input_values:   # VGG-19-BN features.26
            return dict(AUTO_WIDE_ADAM, **unnormalized)
        if not compresses(input_values, output_values, AUTO_COMPRESSION):
            return dict(AUTO_DEEP_POOLED_ADAM)
        return dict(AUTO_COMPRESSIVE_POOLED_ADAM, **({} if batchnorm else {"lr": AUTO_UNNORMALIZED_POOLED_LR}))
    shallow = 1 <= relu_calls < AUTO_WIDE_MIN_RELUS
    if at_pool and shallow and expands(input_values, output_values, AUTO_EXPANSION):
        return dict(AUTO_EXPANDING_ADAM)
    if relu_calls >= AUTO_WIDE_MIN_RELUS and wide and at_pool:
        return dict(AUTO_WIDE_ADAM, **unnormalized)
    return dict(unnormalized) if shallow and wide and at_pool else {}


def make_settings(*, steps: int, tol: float, optimizer: str = DEFAULT_OPTIMIZER, lr: float | None, init: str,
                  seed: int, fake_relu: bool | str = False, **advanced: Any) -> Settings:
    """Validate the public options and fill per-optimiser defaults; raises ValueError naming the fix.

    ``steps``: per-sample budget of forward+backward evaluations; ``tol``: target relative error;
    ``lr``: None for the optimiser's default (``DEFAULT_LR``); ``advanced``: names from ``ADVANCED``.
    """
    _check_basic(steps, tol, optimizer, init)
    unknown = sorted(set(advanced) - set(ADVANCED))
    if unknown:
        raise TypeError(f"unknown option(s) {', '.join(unknown)}{did_you_mean(unknown[0], ADVANCED)}; advanced "
                        f"options are: {', '.join(ADVANCED)}")
    lr = DEFAULT_LR[optimizer] if lr is None else lr
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not math.isfinite(lr) or lr <= 0:
        raise ValueError(f"lr must be a positive number, got {lr!r}")
    advanced.setdefault("schedule", DEFAULT_SCHEDULE[optimizer])
    advanced.setdefault("cycle_steps", DEFAULT_CYCLE_STEPS[optimizer])
    advanced.setdefault("relu_leak", DEFAULT_RELU_LEAK[optimizer])
    advanced.setdefault("fold_bn", DEFAULT_FOLD_BN[optimizer])
    if advanced["schedule"] not in SCHEDULES:
        raise ValueError(f"unknown schedule {advanced['schedule']!r}; choose one of {', '.join(SCHEDULES)}")
    modes = {True: "last", False: "none", None: "none", "last": "last", "all": "all", "none": "none",
             AUTO: "last"}
    if not isinstance(fake_relu, (bool, str, type(None))) or fake_relu not in modes:
        raise ValueError(f"fake_relu must be True/'last' (straight-through gradient at the last ReLU before the "
                         f"cut), 'all' (every ReLU), False/'none' or 'auto' (generate_iris's default: 'last', "
                         f"except where optimizer='auto' chooses otherwise); got {fake_relu!r}")
    _check_advanced(advanced)
    return Settings(steps=int(steps), tol=float(tol), optimizer=optimizer, lr=float(lr), init=init,
                    seed=int(seed), fake_relu=modes[fake_relu], **advanced)


# name -> (kind, test, what the value must be); checked before a run starts, so a typo fails at once
_ADVANCED_RULES: dict[str, tuple[type, Callable[[float], bool], str]] = {
    "lr_floor": (float, lambda v: 0.0 <= v <= 1.0, "a multiplier in [0, 1]"),
    "stages": (int, lambda v: v >= 1, "an integer >= 1"),
    "beta1": (float, lambda v: 0.0 <= v < 1.0, "in [0, 1)"),
    "beta2": (float, lambda v: 0.0 <= v < 1.0, "in [0, 1)"),
    "eps": (float, lambda v: v > 0.0, "> 0"),
    "restart_patience": (int, lambda v: v >= 0, "an integer >= 0 (0 turns restarts off)"),
    "restart_threshold": (float, lambda v: 0.0 <= v < 1.0, "a relative improvement in [0, 1)"),
    "restart_decay": (float, lambda v: v > 0.0, "a step-size factor > 0"),
    "cycle_steps": (int, lambda v: v >= 0, "an integer >= 0 (0: one cycle over the budget)"),
    "cycle_mult": (float, lambda v: v >= 1.0, "a growth factor >= 1"),
    "cycle_decay": (float, lambda v: v > 0.0, "a step-size factor > 0"),
    "lr_adapt": (float, lambda v: 0.0 <= v < 1.0, "in [0, 1) (per-sample step-size adaptation rate; 0 = off)"),
    "history": (int, lambda v: 1 <= v <= 100, "an integer in [1, 100] (L-BFGS keeps the curvature pairs of a "
                                                  "sample's last history evaluations)"),
    "armijo": (float, lambda v: 0.0 < v < 0.5, "in (0, 0.5) (sufficient-decrease constant of the line search)"),
    "max_backtracks": (int, lambda v: v >= 1, "an integer >= 1 (rejected trials before the history is reset)"),
    "stall_patience": (int, lambda v: v >= 0, "an integer >= 0 (L-BFGS evaluations without 1% progress before "
                                              "an Adam phase; 0 = never)"),
    "phase_steps": (int, lambda v: v >= 1, "an integer >= 1 (length of an Adam phase)"),
    "phase_lr": (float, lambda v: v > 0.0, "> 0 (Adam's step size in an Adam phase)"),
    "warmup_steps": (int, lambda v: v >= 0, "an integer >= 0 (Adam steps before L-BFGS starts)"),
    "relu_leak": (float, lambda v: 0.0 <= v < 1.0, "in [0, 1) (gradient slope of the front's ReLUs below zero; "
                                                   "0 = true gradients)"),
}


_BOOL_OPTIONS = {
    "fold_bn": "fold BatchNorm into the convolutions of a private copy of the front (and cut their taps that only read padding)",
}


def _check_advanced(advanced: dict[str, Any]) -> None:
    """Raise ValueError naming the option, its value and the valid range for a bad advanced option."""
    for name, what in _BOOL_OPTIONS.items():
        if name in advanced and not isinstance(advanced[name], (bool, np.bool_)):
            raise ValueError(f"{name} must be True or False ({what}), got {advanced[name]!r}")
        if name in advanced:
            advanced[name] = bool(advanced[name])
    for name, (kind, ok, want) in _ADVANCED_RULES.items():
        if name not in advanced:
            continue
        value = advanced[name]
        valid_type = (isinstance(value, (int, np.integer)) if kind is int
                      else isinstance(value, (int, float, np.number)))
        if isinstance(value, bool) or not valid_type or not math.isfinite(float(value)) or not ok(value):
            raise ValueError(f"{name} must be {want}, got {value!r}")
        advanced[name] = kind(value)
