"""IRI generation: our batched optimiser vs the naive loop, in the same run.

Run: ``python -m pytest benchmarks/bench_iri.py --benchmark-only -s -k ours_vs_naive`` (about 5 minutes on
2 cores), and the slow quality study with ``-k quality`` (about 10 minutes).

Cases (``test_iri_ours_vs_naive``):
- ``resnet18``: torchvision ``resnet18(num_classes=10)`` on 3x32x32 inputs, briefly trained on scikit-learn
  digits (grey replicated to 3 channels, upsampled to 32x32; ``IRI_BENCH_TRAIN_EPOCHS``=2 epochs of Adam),
  cut at ``IRI_BENCH_LAYER`` (default ``layer3``: 256 x 2 x 2 = 1,024 values for 3,072 input pixels;
  ``layer4`` is 512 x 1 x 1);
- ``small_cnn``: the library's SmallCNN (4 conv blocks with BN and max-pool, width 32) trained 5 epochs on
  digits at 1x32x32, cut at ``block3`` (32 x 4 x 4 = 512 values), the issue's baseline setting.

- naive: one batch holding every seed, ``torch.optim.Adam`` on the whole batch (shared step count and
  bias correction), lr 0.05 with cosine decay, a fixed number of steps, no early stop, no best-iterate
  tracking, true ReLU gradients: the plain loop one writes first.
- ours: ``generate_iris`` with its defaults (per-sample Adam state, lr 0.2, per-sample cosine cycles of 300
  and 600 steps restarting from the best iterate, straight-through gradient at the last ReLU, per-sample
  early stop at ``tol=1e-2``, best iterate), ``batch_size`` = seeds.

Figures (in ``benchmark.extra_info`` and printed), medians over all seeds:
(a) ``speedup_to_level``: time naive needs to reach ``level`` / time ours needs, where ``level`` is naive's
    best median, or 1e-2 when naive's best is below 1e-2 (ours stops each sample at tol = 1e-2, so its
    median never goes below that); target >= 3. ``work_speedup_to_level`` is the same ratio in sample-steps
    (one sample's forward+backward), which a busy shared machine does not distort;
(b) ``ours_median`` <= 1e-2 within the budget, and ``naive_best_median`` for comparison;
(c) ``ours_overhead_share``: share of our wall time not spent in the front's forward+backward (or the
    targets' forward): the update step, bookkeeping and batching (target <= 10%).

The issue's full setting is 512 seeds; on a 2-core CPU that takes over an hour per case, so the default is
``IRI_BENCH_SEEDS=64`` (``IRI_BENCH_STEPS=1000``); set the variables to scale up.
"""

from __future__ import annotations

import math
import os
import time
from functools import lru_cache

import numpy as np
import pytest
import torch
from torch import nn

from similarity_plugins.core.networks import SplitNetwork, frozen
from similarity_plugins.iri import generate_iris
from similarity_plugins.iri.optimizer import initial_inputs, make_settings

SEEDS = int(os.environ.get("IRI_BENCH_SEEDS", "64"))
STEPS = int(os.environ.get("IRI_BENCH_STEPS", "1000"))
LAYER = os.environ.get("IRI_BENCH_LAYER", "layer3")
TRAIN_EPOCHS = int(os.environ.get("IRI_BENCH_TRAIN_EPOCHS", "2"))


@lru_cache(maxsize=1)
def _digits_rgb32() -> tuple[torch.Tensor, torch.Tensor]:
    from similarity_plugins.core.data import load_all
    from similarity_plugins.datasets import digits

    x, y = load_all(digits(None, size=32))
    return x.repeat(1, 3, 1, 1).contiguous(), y


@lru_cache(maxsize=1)
def resnet18_digits() -> nn.Module:
    """ResNet-18 (10 classes) trained for ``TRAIN_EPOCHS`` epoch(s) of Adam on 3-channel 32x32 digits."""
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    x, y = _digits_rgb32()
    if TRAIN_EPOCHS > 0:
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        g = torch.Generator().manual_seed(0)
        model.train()
        for _ in range(TRAIN_EPOCHS):
            for idx in torch.randperm(len(x), generator=g).split(64):
                opt.zero_grad()
                nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
                opt.step()
    return model.eval()


def naive_loop(front, seeds: torch.Tensor, steps: int, lr: float = 0.05) -> list[tuple[float, float]]:
    """The plain loop: one batch, shared Adam state, cosine lr, fixed steps.

    Returns [(seconds, median error, sample-steps so far)] after every evaluation."""
    settings = make_settings(steps=steps, tol=1e-2, optimizer="adam", lr=lr, init="noise", seed=0)
    start = time.perf_counter()
    with torch.no_grad():
        target = front(seeds).flatten(1)
    tnorm = target.norm(dim=1)
    x = initial_inputs(seeds, range(len(seeds)), settings, None).requires_grad_(True)
    opt = torch.optim.Adam([x], lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
    curve = []
    for step in range(steps + 1):
        err = (front(x).flatten(1) - target).norm(dim=1) / tnorm
        curve.append((time.perf_counter() - start, float(err.detach().median()), (step + 1) * len(seeds)))
        if len(curve) > steps:
            break
        opt.zero_grad()
        err.sum().backward()
        opt.step()
        sched.step()
        with torch.no_grad():
            x.clamp_(0.0, 1.0)
    return curve


def ours(model: nn.Module, layer: str, seeds: torch.Tensor, steps: int):
    curve = []
    start = time.perf_counter()
    iris = generate_iris(model, layer, seeds, steps=steps, tol=1e-2, batch_size=len(seeds), progress=False,
                         callback=lambda info: curve.append((time.perf_counter() - start, info["median_error"],
                                                             info["sample_steps"])))
    return iris, curve


def time_to_reach(curve: list[tuple], level: float, column: int = 0) -> float:
    """First seconds (column 0) or sample-steps (column 2) at which the median error is <= level."""
    for row in curve:
        if row[1] <= level:
            return row[column]
    return math.inf


def _case(name: str) -> tuple[nn.Module, str, torch.Tensor]:
    if name == "resnet18":
        x, _ = _digits_rgb32()
        return resnet18_digits(), LAYER, x[:SEEDS].clone()
    from similarity_plugins.core.data import load_all
    from similarity_plugins.datasets import digits

    return small_cnn_digits(), "block3", load_all(digits("train"))[0][:SEEDS].contiguous()


@pytest.mark.benchmark(group="iri")
@pytest.mark.parametrize("case", ["resnet18", "small_cnn"])
def test_iri_ours_vs_naive(benchmark, case):
    model, layer, seeds = _case(case)
    split = SplitNetwork(model, layer)
    results = {}

    def run():
        with frozen(model):
            results["naive"] = naive_loop(split.front, seeds, STEPS)
        results["ours"] = ours(model, layer, seeds, STEPS)

    benchmark.pedantic(run, rounds=1, iterations=1)
    naive = results["naive"]
    iris, ours_curve = results["ours"]
    best_i = int(np.argmin([row[1] for row in naive]))
    naive_best_t, naive_best, _ = naive[best_i]
    # Ours stops each sample at tol = 1e-2, so its median cannot go below tol; when the naive loop's best is
    # below tol, (a) is measured at tol instead ("level").
    level = max(naive_best, 1e-2)
    naive_level_t, ours_level_t = time_to_reach(naive, level), time_to_reach(ours_curve, level)
    s, st = iris.summary, iris.stats
    overhead = (st["wall_s"] - st["front_s"] - st["target_s"]) / st["wall_s"]
    info = {
        "case": case, "layer": layer,
        "model": (f"resnet18 (digits, {TRAIN_EPOCHS} epoch(s)), 3x32x32" if case == "resnet18"
                  else "SmallCNN width 32 (digits, 5 epochs), 1x32x32"),
        "seeds": len(seeds), "steps": STEPS,
        "naive_best_median": naive_best, "naive_time_to_best_s": naive_best_t, "naive_total_s": naive[-1][0],
        "level": level, "naive_time_to_level_s": naive_level_t, "ours_time_to_level_s": ours_level_t,
        "speedup_to_level": naive_level_t / ours_level_t if ours_level_t > 0 else math.inf,
        "speedup_naive_best_time_vs_ours_to_level": naive_best_t / ours_level_t if ours_level_t > 0 else math.inf,
        # the same in work (sample-steps: forward+backward passes of one sample), immune to a busy machine
        "naive_work_to_level": time_to_reach(naive, level, 2), "ours_work_to_level": time_to_reach(ours_curve, level, 2),
        "work_speedup_to_level": time_to_reach(naive, level, 2) / time_to_reach(ours_curve, level, 2),
        "ours_median": s["median_error"], "ours_p95": s["p95_error"], "ours_converged": s["converged_fraction"],
        "ours_mean_seed_distance": s["mean_seed_distance"], "ours_total_s": st["wall_s"],
        "ours_time_to_1e-2_s": time_to_reach(ours_curve, 1e-2), "naive_time_to_1e-2_s": time_to_reach(naive, 1e-2),
        "ours_overhead_share": overhead, "ours_update_s": st["update_s"], "ours_front_s": st["front_s"],
        "ours_sample_steps": st["sample_steps"], "naive_sample_steps": len(seeds) * (STEPS + 1),
    }
    benchmark.extra_info.update(info)
    print("\nIRI benchmark:\n" + "\n".join(f"  {k}: {v:.4g}" if isinstance(v, float) else f"  {k}: {v}"
                                           for k, v in info.items()))
    assert s["median_error"] <= 1e-2 + 1e-12 and overhead < 0.25


# ------------------------------------------------------------------------------------ quality study

QUALITY_SEEDS = int(os.environ.get("IRI_QUALITY_SEEDS", "64"))
QUALITY_STEPS = int(os.environ.get("IRI_QUALITY_STEPS", "1000"))
QUALITY_VARIANTS = {
    "adam_lr0.05_plain": dict(lr=0.05, fake_relu=False, cycle_steps=0),   # the baseline
    "adam_lr0.05_fake_relu": dict(lr=0.05, cycle_steps=0),
    "adam_lr0.2_plain": dict(fake_relu=False, cycle_steps=0),
    "adam_lr0.2_one_cycle": dict(cycle_steps=0),                           # the default before cycles
    "normgrad_fake_relu": dict(optimizer="normgrad"),
    "default": dict(),                          # adam lr 0.2, fake ReLU, cosine cycles of 300 and 600 steps
    "cycles100": dict(cycle_steps=100),
}


@lru_cache(maxsize=1)
def small_cnn_digits() -> nn.Module:
    """The library's SmallCNN (4 conv blocks with BN and max-pool) trained for 5 epochs on digits at 32x32."""
    from similarity_plugins.apps.training import train_classifier
    from similarity_plugins.apps.zoo import SmallCNN
    from similarity_plugins.datasets import digits

    torch.manual_seed(0)
    model = SmallCNN(width=32)
    train_classifier(model, digits("train"), epochs=5, progress=False)
    return model.eval()


@pytest.mark.slow
@pytest.mark.benchmark(group="iri-quality")
@pytest.mark.parametrize("variant", list(QUALITY_VARIANTS))
def test_iri_quality_small_cnn(benchmark, variant):
    """Median / p95 relative error at SmallCNN ``block3`` (32 x 4 x 4 = 512 values) after the budget,
    with ``tol=1e-2`` early stopping, and the step at which the median over all seeds reached 1e-2."""
    from similarity_plugins.core.data import load_all
    from similarity_plugins.datasets import digits

    model = small_cnn_digits()
    seeds = load_all(digits("train"))[0][:QUALITY_SEEDS].contiguous()
    curve, out = [], {}

    def run():
        curve.clear()
        out["iris"] = generate_iris(model, "block3", seeds, steps=QUALITY_STEPS, progress=False,
                                    callback=lambda i: curve.append((i["step"], i["median_error"])),
                                    **QUALITY_VARIANTS[variant])

    benchmark.pedantic(run, rounds=1, iterations=1)
    s, st = out["iris"].summary, out["iris"].stats
    info = {"variant": variant, "seeds": QUALITY_SEEDS, "steps": QUALITY_STEPS, "median": s["median_error"],
            "p95": s["p95_error"], "converged": s["converged_fraction"], "mean_seed_distance": s["mean_seed_distance"],
            "step_median_1e-2": next((step for step, m in curve if m <= 1e-2), None),
            "sample_steps": st["sample_steps"], "wall_s": st["wall_s"]}
    benchmark.extra_info.update(info)
    print(f"\n{info}")
