"""Stitch training: cached front activations and targets (ours) vs rerunning the networks every batch.

Setting: torchvision ResNet-18 (num_classes=10, random weights) as front and end, cut at ``layer1``
((64, 8, 8) activations), 2,048 inputs of 3x32x32, batch 128, one epoch (16 optimiser steps), the
same random stitch initialisation and shuffling for both loops.

- ``ours``: :func:`similarity_plugins.stitch.fit_stitch` with a :class:`TrainingCache` already holding
  the front's activations and B's targets (built once per training set and reused every epoch; its
  one-time cost is the ``cache`` benchmark, a single no-grad pass of each network);
- ``naive``: the straightforward loop that, every batch, reruns the front on the inputs and B's native
  path for the targets (SLM, DM, FuLA), then trains the stitch.

Timings use one intra-op thread (restored afterwards) so that both loops see the same, steadier CPU.

Run from the repository root: ``python -m pytest benchmarks/bench_stitch.py --benchmark-only`` (autosaved
to ``.benchmarks/``; add ``-s`` to print ratios). Each objective's two loops are two benchmarks in the group
``epoch-<objective>``; naive/ours (of medians) is stored as ``speedup_vs_naive`` in both ``extra_info``.
Also: least-squares init on 2,048 samples, with B's targets cached and including computing them
(``with_targets_over_cached`` in both ``extra_info``).
"""

from __future__ import annotations

import pytest
import ratios
import torch
import torchvision

from similarity_plugins.networks.split import SplitNetwork
from similarity_plugins.stitch import StitchLayer, StitchSettings, fit_stitch
from similarity_plugins.stitch.cache import TrainingCache
from similarity_plugins.stitch.init import least_squares_init, random_init
from similarity_plugins.stitch.layer import plan_stitch
from similarity_plugins.stitch.objectives import NEEDS, stitched_loss

N, BATCH, LAYER = 2048, 128, "layer1"
OBJECTIVES = ["hlm", "slm", "dm", "fula"]


@pytest.fixture(scope="module")
def setup(one_thread):
    torch.manual_seed(0)
    front_model = torchvision.models.resnet18(num_classes=10).eval()
    end_model = torchvision.models.resnet18(num_classes=10).eval()
    g = torch.Generator().manual_seed(0)
    x = torch.rand(N, 3, 32, 32, generator=g)
    y = torch.randint(0, 10, (N,), generator=g)
    front, end = SplitNetwork(front_model, LAYER), SplitNetwork(end_model, LAYER)
    torch.optim.Adam([torch.zeros(1, requires_grad=True)])  # pay torch's one-time optimizer import here
    return front, end, x, y


@pytest.fixture(scope="module")
def cache(setup):
    front, end, x, y = setup
    c = TrainingCache(front, end, x, y, batch_size=256)
    c.ensure(["front", "end_cut", "end_logits", "end_taps"])
    return c


def _settings() -> StitchSettings:
    return StitchSettings(epochs=1, batch_size=BATCH, init="random", seed=0)


def naive_epoch(objective: str, front: SplitNetwork, end: SplitNetwork, x: torch.Tensor, y: torch.Tensor,
                settings: StitchSettings) -> float:
    """The straightforward loop: front and targets recomputed from the inputs every batch. Returns the last loss."""
    stitch = StitchLayer(plan_stitch(tuple(front.front(x[:2]).shape[1:]), tuple(end.native(x[:2])[0].shape[1:])))
    random_init(stitch, torch.Generator().manual_seed(settings.seed))
    stitch.train()
    opt = torch.optim.Adam(stitch.parameters(), lr=settings.lr, weight_decay=settings.weight_decay)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(settings.seed + 1))
    loss = torch.zeros(())
    for start in range(0, len(x), settings.batch_size):
        idx = order[start:start + settings.batch_size].sort().values
        xb = x[idx]
        with torch.no_grad():
            a = front.front(xb)
            targets: dict = {"labels": y[idx]}
            if objective != "hlm":
                cut, logits, taps = end.native(xb)
                targets.update(end_cut=cut, end_logits=logits, end_taps=taps)
        loss = stitched_loss(objective, stitch(a), end, {k: targets[k] for k in NEEDS[objective]})
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return float(loss.detach())


def _record(benchmark, objective: str, kind: str) -> None:
    """Keep this run; once both loops of ``objective`` ran, store naive/ours (medians) in both ``extra_info``."""
    ratios.record(f"{kind}-{objective}", benchmark)
    speedup = ratios.share_ratio("speedup_vs_naive", f"naive-{objective}", f"ours-{objective}")
    if speedup is not None:
        print(f"\n[{objective}] one epoch (median): ours {ratios.median_seconds(f'ours-{objective}'):.3f}s, "
              f"naive {ratios.median_seconds(f'naive-{objective}'):.3f}s, speed-up x{speedup:.2f}")


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_epoch_ours(benchmark, setup, cache, objective):
    front, end, _, _ = setup
    benchmark.group = f"epoch-{objective}"
    fitted = benchmark.pedantic(lambda: fit_stitch(front, end, None, None, objective, _settings(), cache=cache),
                                rounds=3, iterations=1, warmup_rounds=0)
    assert fitted.steps == N // BATCH and cache.passes == {"front": 1, "end": 1}
    _record(benchmark, objective, "ours")


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_epoch_naive(benchmark, setup, objective):
    front, end, x, y = setup
    benchmark.group = f"epoch-{objective}"
    benchmark.pedantic(lambda: naive_epoch(objective, front, end, x, y, _settings()), rounds=3, iterations=1)
    _record(benchmark, objective, "naive")


def test_cache_build(benchmark, setup):
    """The one-time cost ours pays per training set: one front pass, one B pass (cut, logits, taps)."""
    front, end, x, y = setup
    benchmark.group = "one-time"

    def build():
        c = TrainingCache(front, end, x, y, batch_size=256)
        c.ensure(["front", "end_cut", "end_logits", "end_taps"])
        return c

    benchmark.pedantic(build, rounds=1, iterations=1)


def test_least_squares_init_cached_targets(benchmark, cache):
    """Least squares on 2,048 samples (131,072 rows of 64 -> 64) with A's and B's activations cached."""
    benchmark.group = "least-squares"
    stitch = StitchLayer(plan_stitch(cache.front_shape, cache.end_shape))
    info = benchmark.pedantic(lambda: least_squares_init(stitch, cache, 2048, torch.Generator().manual_seed(0)),
                              rounds=3, iterations=1)
    assert info["rows"] == 2048 * 64
    ratios.record("lstsq-cached", benchmark)


def test_least_squares_init_with_targets(benchmark, setup, cache):
    """The same, computing B's activations at the cut for the 2,048 samples (no cached targets)."""
    front, end, x, y = setup
    benchmark.group = "least-squares"
    fresh = TrainingCache(front, end, x, y, batch_size=256)
    fresh.stores["front"] = cache.stores["front"]  # A's activations are shared with training anyway
    stitch = StitchLayer(plan_stitch(cache.front_shape, cache.end_shape))
    benchmark.pedantic(lambda: least_squares_init(stitch, fresh, 2048, torch.Generator().manual_seed(0)),
                       rounds=1, iterations=1)
    ratios.record("lstsq-with-targets", benchmark)
    ratios.share_ratio("with_targets_over_cached", "lstsq-with-targets", "lstsq-cached")
