"""The same permutations in, the same numbers out: p-value, tau and the calibrated score of a cell equal the
authors' ``calibrated_similarity.calibrate``, and a grid block's aggregates equal ``calibrate_layers`` (max and
mean), when both are given the same (K, N) array of permutations (theirs through ``perm_fn``), on CKA and mutual
k-NN, to the float32 rounding of their package."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

import similarity_plugins as sp
from similarity_plugins import functional as F

calibrated_similarity = pytest.importorskip("calibrated_similarity")

N, K = 40, 24
SIMS = {"cka-linear": lambda a, b: F.cka(a, b), "mutual-knn": lambda a, b: F.mutual_knn(a, b, topk=5)}
OPTIONS = {"cka-linear": {}, "mutual-knn": {"topk": 5}}


def _perm_fn(perms: np.ndarray):
    rows = iter(torch.from_numpy(perms))
    return lambda n, device: next(rows).to(device)


def _perms(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.stack([rng.permutation(N) for _ in range(K)])


def _close(ours: float, theirs: torch.Tensor, scale: float = 1.0) -> None:
    assert ours == pytest.approx(float(theirs), rel=2e-6, abs=2e-7 * scale)


@pytest.mark.parametrize("metric", list(SIMS))
@pytest.mark.parametrize("signal,alpha", [(0.0, 0.05), (0.6, 0.05), (0.6, 0.2), (3.0, 0.05)])
def test_a_cell_equals_calibrate(metric, signal, alpha):
    rng = np.random.default_rng(int(signal * 10) + 1)
    x = rng.standard_normal((N, 6))
    y = signal * np.tanh(x @ rng.standard_normal((6, 5))) + rng.standard_normal((N, 5))
    perms = _perms(2)
    row = sp.score(x, y, [metric], {"permutations": perms, "alpha": alpha, **OPTIONS[metric]})[0]
    assert row.error is None, row.error
    theirs = calibrated_similarity.calibrate(torch.from_numpy(x), torch.from_numpy(y), SIMS[metric], K=K, alpha=alpha,
                                             smax=1.0, perm_fn=_perm_fn(perms))
    scal, p, tau = theirs
    _close(row.details["p_value"], p)
    _close(row.details["tau"], tau)
    _close(row.details["calibrated"], scal, scale=1.0 / max(1e-3, 1.0 - float(tau)))
    assert row.details["permutations"] == K and row.details.get("permutations_given") is True
    if signal == 3.0:
        assert row.details["calibrated"] > 0.1 and row.details["p_value"] == 1 / (K + 1)


class _Layers(nn.Module):
    """Three layers of one seeded MLP over channel ``channel`` of a (N, 2, 6) input."""

    def __init__(self, seed: int, channel: int) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.channel = channel
        self.l1, self.l2, self.l3 = (nn.Linear(6, 6) for _ in range(3))
        with torch.no_grad():
            for layer in (self.l1, self.l2, self.l3):
                layer.weight.copy_(torch.randn(6, 6, generator=g))
                layer.bias.copy_(torch.randn(6, generator=g) * 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.l3(torch.tanh(self.l2(torch.tanh(self.l1(x[:, self.channel])))))


def _acts(model: _Layers, x: torch.Tensor) -> list[torch.Tensor]:
    with torch.no_grad():
        h1 = model.l1(x[:, model.channel])
        h2 = model.l2(torch.tanh(h1))
        return [h.double() for h in (h1, h2, model.l3(torch.tanh(h2)))]


@pytest.mark.parametrize("metric", ["cka-linear", pytest.param("mutual-knn", marks=pytest.mark.slow)])
def test_a_blocks_aggregates_equal_calibrate_layers(metric):
    """(mutual k-NN is slow here only for the peer's loop: 675 calls of the measure.)"""
    g = torch.Generator().manual_seed(3)
    base = torch.randn(N, 1, 6, generator=g)
    inputs = torch.cat([base, 0.8 * base + 0.6 * torch.randn(N, 1, 6, generator=g)], dim=1)  # related channels
    models = {"a": _Layers(0, 0), "b": _Layers(1, 1)}
    data = sp.Data(test=TensorDataset(inputs, torch.zeros(N, dtype=torch.long)))
    perms = _perms(4)
    grid = sp.compare_grid(models, ["l1", "l2", "l3"], data, metric, pairs="across",
                           options={"permutations": perms, **OPTIONS[metric]})
    xs, ys = _acts(models["a"], inputs), _acts(models["b"], inputs)
    for agg, alpha in (("max", 0.05), ("mean", 0.05), ("max", 0.25)):
        ours = grid.aggregate(metric, "a", "b", agg=agg, alpha=alpha)
        scal, p, tau = calibrated_similarity.calibrate_layers(xs, ys, SIMS[metric], agg=agg, K=K, alpha=alpha,
                                                              smax=1.0, perm_fn=_perm_fn(perms))
        assert set(ours) == {"score", "p_value", "tau", "calibrated"}
        _close(ours["p_value"], p)
        _close(ours["tau"], tau)
        _close(ours["calibrated"], scal, scale=1.0 / max(1e-3, 1.0 - float(tau)))
        assert 0.0 < ours["calibrated"] < 1.0  # related channels: a case that says something
    assert grid.aggregate(metric, "a", "b")["p_value"] == pytest.approx(grid.best_pair(metric, "a", "b")["p_value"])
