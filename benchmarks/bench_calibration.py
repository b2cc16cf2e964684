"""Calibrated aggregates of a 6 x 6 layer grid (issue 59.6): ours against the authors' ``calibrate_layers``.

Run from the repository root: ``python -m pytest benchmarks/bench_calibration.py --benchmark-only -s``. Group
``calibrated-aggregates``: two 6-block MLPs (width ``CALIB_BENCH_D``, default 512; the second a perturbed copy of
the first, so the calibrated score is not 0) on N = 2000 inputs, linear CKA, K = 200 permutations, the same on
both sides:

- ``ours``: ``compare_grid(models, layers, data, "cka-linear", pairs="across", options={"permutations": 200},
  seed=SEED)`` (the forward passes, the 12 nodes' Gram matrices, the 36 cells of the block a x b and their
  nulls in one block pass; b x a is its mirror), then ``Grid.aggregate`` with ``agg="max"`` and ``agg="mean"``.
- ``calibrate_layers``: ``calibrated_similarity.calibrate_layers(xs, ys, sim, agg="max", K, perm_fn)``, ``perm_fn``
  handing it the permutations our grid drew from ``SEED`` (`similarity_plugins.stats.permutation.draws`), on the
  same activations (float32, as a model gives them; extracted before the timing), ``sim`` the feature-space linear CKA
  of the authors' own code (``aristotelian.metrics.cka.CKALinear._compute_raw``: ``||Yc^T Xc||^2 /
  (||Xc^T Xc|| ||Yc^T Yc||)``). One call (``"max"``; ``"mean"`` costs them another).

Both must give the same p-value, tau and calibrated score to float32 rounding (their package computes in
float32): asserted for ``"max"`` at the full K and for ``"mean"`` on the first ``K_CHECK`` permutations.
``theirs_over_ours`` in ``extra_info`` is the time ratio; with ``CALIB_BENCH_K_THEIRS`` below 200 their run is cut
to that many permutations and its time scaled per permutation (``(K + 1) / (K_theirs + 1)``: their cost is the
K + 1 passes over the 36 cells).
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import ratios
import torch
from torch import nn
from torch.utils.data import TensorDataset

import similarity_plugins as sp
from similarity_plugins.stats.permutation import draws

N, LAYERS, K = 2000, 6, 200
D = int(os.environ.get("CALIB_BENCH_D", "512"))
K_THEIRS = int(os.environ.get("CALIB_BENCH_K_THEIRS", str(K)))
K_CHECK = 20
SEED = 3
NAMES = [str(2 * i + 1) for i in range(LAYERS)]  # the Tanh after each Linear


def _mlp(seed: int, noise: float = 0.0, base: nn.Module | None = None) -> nn.Module:
    g = torch.Generator().manual_seed(seed)
    parts = []
    for i in range(LAYERS):
        linear = nn.Linear(D, D)
        with torch.no_grad():
            weight = torch.randn(D, D, generator=g) / D**0.5
            if base is not None:
                weight = base[2 * i].weight + noise * weight
            linear.weight.copy_(weight)
            linear.bias.zero_()
        parts += [linear, nn.Tanh()]
    return nn.Sequential(*parts)


@pytest.fixture(scope="module")
def setting() -> dict:
    a = _mlp(0)
    models = {"a": a, "b": _mlp(1, noise=1.5, base=a)}
    x = torch.randn(N, D, generator=torch.Generator().manual_seed(2))
    data = sp.Data(test=TensorDataset(x, torch.zeros(N, dtype=torch.long)))
    perms = next(draws(N, K, SEED, K)).numpy()  # the permutations compare_grid draws from SEED
    acts = {}
    with torch.no_grad():
        for name, model in models.items():
            h, out = x, []
            for i, module in enumerate(model):
                h = module(h)
                if str(i) in NAMES:
                    out.append(h.clone())
            acts[name] = out
    return {"models": models, "data": data, "perms": perms, "acts": acts}


def _theirs_sim(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The authors' linear CKA (feature space, as in their ``CKALinear._compute_raw``)."""
    xc, yc = x - x.mean(0, keepdim=True), y - y.mean(0, keepdim=True)
    return torch.norm(yc.T @ xc) ** 2 / (torch.norm(xc.T @ xc) * torch.norm(yc.T @ yc))


def _perm_fn(perms: np.ndarray):
    rows = iter(torch.from_numpy(perms))
    return lambda n, device: next(rows).to(device)


def _ours(setting: dict, permutations: int | np.ndarray = K) -> dict:
    grid = sp.compare_grid(setting["models"], NAMES, setting["data"], "cka-linear", pairs="across",
                           options={"permutations": permutations}, seed=SEED)
    return {agg: grid.aggregate("cka-linear", "a", "b", agg) for agg in ("max", "mean")}


def _same(ours: dict, theirs: tuple) -> None:
    scal, p, tau = (float(v) for v in theirs)
    assert ours["p_value"] == pytest.approx(p, rel=2e-6)
    assert ours["tau"] == pytest.approx(tau, rel=1e-5, abs=1e-6)
    assert ours["calibrated"] == pytest.approx(scal, rel=1e-4, abs=1e-5)


def _share() -> None:
    ratio = ratios.share_ratio("theirs_over_ours", "calibration:theirs", "calibration:ours")
    if ratio is not None:
        print(f"\n[bench_calibration] D = {D}: calibrate_layers / ours = {ratio:.1f}x "
              f"(ours {ratios.median_seconds('calibration:ours'):.1f} s, theirs "
              f"{ratios.median_seconds('calibration:theirs'):.1f} s for K = {K})")


def test_ours(benchmark, setting):
    benchmark.group = "calibrated-aggregates"
    found = benchmark.pedantic(_ours, (setting,), rounds=1, iterations=1)
    setting["ours"] = found
    benchmark.extra_info.update(width=D, n=N, permutations=K, **{f"{agg}_{key}": value for agg, res in found.items()
                                                                  for key, value in res.items()})
    assert found["max"]["calibrated"] > 0.0  # related models: a case where the numbers say something
    ratios.record("calibration:ours", benchmark)
    _share()


def test_calibrate_layers(benchmark, setting):
    cs = pytest.importorskip("calibrated_similarity")
    benchmark.group = "calibrated-aggregates"
    xs, ys = setting["acts"]["a"], setting["acts"]["b"]
    perms = setting["perms"][:K_THEIRS]
    theirs = benchmark.pedantic(cs.calibrate_layers, (xs, ys, _theirs_sim),
                                {"agg": "max", "K": K_THEIRS, "perm_fn": _perm_fn(perms)}, rounds=1, iterations=1)
    if K_THEIRS < K:  # scaled per permutation: their cost is K + 1 passes over the block
        for name in ("min", "max", "mean", "median"):
            setattr(benchmark.stats.stats, name, getattr(benchmark.stats.stats, name) * (K + 1) / (K_THEIRS + 1))
        benchmark.extra_info["scaled_from_permutations"] = K_THEIRS
    else:
        _same((setting.get("ours") or _ours(setting))["max"], theirs)
    short = setting["perms"][:K_CHECK]
    ours_short = _ours(setting, short)  # an array of permutations: the block a x b scores exactly these
    for agg in ("max", "mean"):
        _same(ours_short[agg], cs.calibrate_layers(xs, ys, _theirs_sim, agg=agg, K=K_CHECK, perm_fn=_perm_fn(short)))
    ratios.record("calibration:theirs", benchmark)
    _share()
