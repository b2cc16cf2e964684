"""``optimizer="auto"``: the optimiser and Adam's defaults, chosen from the front's structure.

``generate_iris`` looks at the front (ReLU calls, max-pools, BatchNorm, the cut's size and stride) and asks
:func:`auto_optimizer` which optimiser to run and :func:`auto_adam_defaults` which of Adam's defaults to change.
Each rule's constant sits with the measurements that chose it (steps to the median of 16 seeds unless said,
budget 1,000, tol 1e-2; the plain loop's figure in parentheses where given). The studies behind them:
docs/iri_depth.md.
"""

from __future__ import annotations

from typing import Any

from .settings import FIRST_ORDER_ONLY, LBFGS_ONLY, SCHEDULE_OPTIONS

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
# ... and one cosine over the budget instead of AUTO_DEEP_ADAM's cycles where the cut keeps more than half the
# input's values at a stride of AUTO_DEEP_RESNET_COSINE_STRIDE or more (round 12: bottleneck ResNets' layer3
# and layer4 at 32x32, 4,096 / 2,048 values at 1/16 / 1/32 of the rows), where no sample converges, ours or the
# plain loop's, and the restarts only throw progress away. Final median, 16 seeds, digits (AUTO_DEEP_ADAM's
# cycles; the plain loop's best): ResNet-50 layer3 0.0455 (0.0565; 0.0573), layer3.2 0.0668 (0.0839; 0.0779),
# layer4 0.0671 (0.0763; 0.0851), ResNet-101 layer3 0.0190 (0.0220; 0.0217), Wide-ResNet-50-2 layer3 0.0138
# (0.0177; 0.0171); on natural-image patches ResNet-50 layer3 0.0521 (0.0638; 0.0599), layer4 0.0267 (0.0306;
# 0.0312). ResNet-18 / -34 layer2 (2,048 values at 1/8, converging in AUTO_DEEP_ADAM's first cycle)
# keep the cycles. AUTO_WIDE_ADAM (beta1 0.9, leaky gradients at every ReLU call) ended behind this rule at
# ResNet-101 / Wide-ResNet-50-2 layer3 (0.0275 / 0.0158 against 0.0190 / 0.0138)
AUTO_DEEP_RESNET_COSINE_STRIDE = 16
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
      when the cut compresses the input at least ``AUTO_LBFGS_MIN_COMPRESSION``-fold and the caller set no lr,
      with one cosine over the budget (``cycle_steps`` 0) instead of its cycles when both sizes are known, the
      cut does not compress the input and the stride is ``AUTO_DEEP_RESNET_COSINE_STRIDE`` or more (unless
      the caller set a schedule option).
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
    known = input_values > 0 and output_values > 0
    compressive = compresses(input_values, output_values, AUTO_LBFGS_MIN_COMPRESSION)
    wide = known and not compressive   # the cut keeps more than half the input's values
    shallow_resnet = AUTO_SHALLOW_RESNET_RELUS <= relus_after_last_maxpool and relu_calls < AUTO_DEEP_POOLED_RELUS
    if relus_after_last_maxpool >= AUTO_LBFGS_MIN_RELUS or shallow_resnet:
        expanding = expands(input_values, output_values, AUTO_WIDE_RESNET_EXPANSION)
        if expanding and stride >= AUTO_WIDE_RESNET_MIN_STRIDE and lr is None and not own_schedule:
            return dict(AUTO_WIDE_ADAM)
        cosine = wide and stride >= AUTO_DEEP_RESNET_COSINE_STRIDE and not own_schedule
        ours = {k: v for k, v in AUTO_DEEP_ADAM.items() if not ((own_schedule or cosine) and k in SCHEDULE_OPTIONS)}
        if cosine:
            ours["cycle_steps"] = 0
        lr_default = {"lr": AUTO_DEEP_COMPRESSIVE_LR} if compressive and lr is None else {}
        return {**ours, **lr_default}
    if lr is not None or own_schedule:
        return {}
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
