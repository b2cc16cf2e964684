"""CKNNA (metric ``cknna``): platonic-rep's definition without the 1e-6 of its denominator, against a dense float64
reference written here, with a default topk that works, on arrays, grids and permutation tests."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import similarity_plugins as sp
from similarity_plugins import functional as F


def _hsic_unbiased(k: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """platonic-rep's ``hsic_unbiased`` (Song et al. 2012, their Equation 5), in float64."""
    n = k.shape[0]
    kt, mt = k.clone().fill_diagonal_(0), m.clone().fill_diagonal_(0)
    value = (kt * mt.T).sum() + kt.sum() * mt.sum() / ((n - 1) * (n - 2)) - 2 * (kt @ mt).sum() / (n - 2)
    return value / (n * (n - 3))


def reference(x: np.ndarray, y: np.ndarray, topk: int, eps: float = 0.0) -> float:
    """platonic-rep's ``AlignmentMetrics.cknna(feats_A, feats_B, topk)`` (unbiased, not distance-agnostic) in float64,
    with ``eps`` in place of its ``1e-6``."""
    a, b = torch.from_numpy(x).double(), torch.from_numpy(y).double()
    n = a.shape[0]
    k, m = a @ a.T, b @ b.T

    def similarity(k, m):
        kh, mh = k.clone().fill_diagonal_(float("-inf")), m.clone().fill_diagonal_(float("-inf"))
        mask_k = torch.zeros(n, n, dtype=torch.float64).scatter_(1, torch.topk(kh, topk, dim=1).indices, 1)
        mask_m = torch.zeros(n, n, dtype=torch.float64).scatter_(1, torch.topk(mh, topk, dim=1).indices, 1)
        mask = mask_k * mask_m
        return _hsic_unbiased(mask * k, mask * m)

    return float(similarity(k, m) / (torch.sqrt(similarity(k, k) * similarity(m, m)) + eps))


def _pair(n: int, d: int, seed: int, signal: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d))
    y = signal * np.tanh(x @ rng.standard_normal((d, d))) + rng.standard_normal((n, d))
    return x, y


@pytest.mark.parametrize("n,d,topk", [(40, 6, 2), (60, 12, 10), (50, 3, 49), (80, 20, 25)])
def test_equals_the_float64_reference(n, d, topk):
    x, y = _pair(n, d, n + topk)
    assert F.cknna(x, y, topk=topk) == pytest.approx(reference(x, y, topk), abs=1e-12)
    assert F.cknna(y, x, topk=topk) == pytest.approx(reference(y, x, topk), abs=1e-12)


def test_the_scale_of_the_features_does_not_change_it_unlike_with_the_1e_6():
    x, y = _pair(60, 8, 1)
    ours = F.cknna(x, y)
    for sx, sy in ((1e-3, 1.0), (1.0, 1e4), (1e-2, 1e-2)):
        assert F.cknna(sx * x, sy * y) == pytest.approx(ours, rel=1e-12)
    assert abs(reference(1e-3 * x, y, 10, eps=1e-6) - ours) > 1e-3  # the peer's constant changes the value


def test_the_default_topk_works_and_topk_n_minus_1_is_the_debiased_cka_of_the_inner_products():
    x, y = _pair(30, 5, 2)
    assert F.cknna(x, y, details=True).details["topk"] == 10
    assert F.cknna(x, y, topk=29) == pytest.approx(F.cka(x, y, debiased=True), abs=1e-12)


def test_it_is_not_symmetric_and_the_metric_says_so():
    x, y = _pair(50, 6, 3, signal=0.7)
    assert abs(F.cknna(x, y) - F.cknna(y, x)) > 1e-6
    info = sp.metric_info("cknna")
    assert (info.kind, info.range, info.symmetric, info.activations_only) == ("similarity", None, False, True)


@pytest.mark.parametrize("topk,n,match", [(1, 20, "topk must be an integer >= 2"), (20, 20, "topk=20 needs at least 21"),
                                          (2.5, 20, "topk must be an integer"), (2, 3, "at least 4 samples")])
def test_bad_topk_and_too_few_samples_are_refused(topk, n, match):
    x, y = _pair(n, 4, 4)
    with pytest.raises(ValueError, match=match):
        F.cknna(x, y, topk=topk)


def test_the_metric_on_arrays_in_a_grid_and_with_permutations():
    x, y = _pair(48, 6, 5)
    row = sp.score(x, y, ["cknna"], {"topk": 6, "permutations": 9})[0]
    assert row.error is None and row.score == pytest.approx(F.cknna(x, y, topk=6), abs=1e-12)
    assert row.details["topk"] == 6 and {"p_value", "tau", "calibrated"} <= set(row.details)
    from similarity_plugins.measures.nodes import NODE_FORMS

    form = NODE_FORMS["cknna"]
    kw = {"topk": 6}
    assert form.combine(form.build(x, "front", kw), form.build(y, "end", kw), kw).score == pytest.approx(row.score,
                                                                                                        abs=1e-12)
