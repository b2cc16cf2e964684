"""Calibrated scores (`similarity_plugins.stats.calibration`): tau, the calibrated value, and the keys every
permutation-tested row gains, for every measure."""

from __future__ import annotations

import math

import numpy as np
import pytest

import similarity_plugins as sp
from similarity_plugins.stats.calibration import calibrate, calibrated_score, critical_value

METRICS = ["cka-linear", "cka-debiased", "cka-rbf", "procrustes", "cca", "svcca", "pwcca", "rsa", "linear-regression",
           "mutual-knn", "cknna"]


def test_tau_is_the_order_statistic_of_the_observed_and_the_null_values():
    null = [0.1, 0.5, 0.3, 0.2, 0.4]  # with the observed 0.35: sorted 0.1 0.2 0.3 0.35 0.4 0.5
    assert critical_value(0.35, null, 0.05, "similarity") == 0.5  # ceil(0.95 * 6) = 6th smallest
    assert critical_value(0.35, null, 0.4, "similarity") == 0.35  # ceil(0.6 * 6) = 4th smallest: the observed
    assert critical_value(0.35, null, 0.4, "distance") == 0.3  # the 4th largest
    k = 199
    values = np.arange(k, dtype=float)
    assert critical_value(-1.0, values, 0.05, None) == values[math.ceil(0.95 * 200) - 2]  # observed is the smallest


def test_the_calibrated_score_is_zero_below_tau_and_scaled_by_the_bound():
    assert calibrated_score(0.3, 0.4, (0.0, 1.0), "similarity") == 0.0
    assert calibrated_score(0.7, 0.4, (0.0, 1.0), "similarity") == pytest.approx(0.5)
    assert calibrated_score(0.7, 0.4, None, "similarity") == pytest.approx(0.3)  # relu(s - tau) without a bound
    assert calibrated_score(0.7, 0.4, (-math.inf, math.inf), "similarity") == pytest.approx(0.3)
    assert calibrated_score(1.0, 1.0, (0.0, 1.0), "similarity") == 0.0
    assert calibrated_score(0.2, 0.6, (0.0, 2.0), "distance") == pytest.approx(2 / 3)  # (tau - s) / (tau - smin)
    assert calibrate(0.9, [0.1] * 19, 0.05, (0.0, 1.0), "similarity") == pytest.approx(
        {"alpha": 0.05, "tau": 0.1, "calibrated": 8 / 9})  # K = 19: the 19th smallest of 20
    assert calibrate(0.9, [0.1] * 9, 0.05, (0.0, 1.0), "similarity") == {
        "alpha": 0.05, "tau": 0.9, "calibrated": 0.0}  # K = 9: ceil(0.95 * 10) = 10, the largest (the observed)


def _pair(n: int, d: int, seed: int, signal: float) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d))
    return x, signal * x[:, ::-1] + rng.standard_normal((n, d))


@pytest.mark.parametrize("metric", METRICS)
def test_every_tested_row_has_tau_and_its_calibrated_score(metric):
    x, y = _pair(40, 6, 0, signal=2.0)
    row = sp.score(x, y, [metric], {"permutations": 19, "topk": 5} if "knn" in metric or metric == "cknna"
                   else {"permutations": 19})[0]
    assert row.error is None, row.error
    d = row.details
    assert d["alpha"] == 0.05 and set(d) >= {"p_value", "tau", "calibrated", "permutations"}
    info = sp.metric_info(metric)
    expected = calibrated_score(row.score, d["tau"], info.range, info.kind)
    assert d["calibrated"] == pytest.approx(expected, abs=1e-9), metric
    assert (d["calibrated"] > 0) == (row.score > d["tau"] + 1e-12), metric


def test_unrelated_wide_layers_score_high_raw_and_zero_calibrated():
    """The significance page's case: two unrelated wide ReLU layers on 100 inputs."""
    rng = np.random.default_rng(0)
    x, y = (np.maximum(rng.standard_normal((100, 2048)), 0) for _ in range(2))
    row = sp.score(x, y, ["cka-linear"], {"permutations": 99})[0]
    assert row.score > 0.9 and row.details["calibrated"] == 0.0


def test_alpha_is_checked_and_changes_tau():
    x, y = _pair(40, 6, 1, signal=0.3)
    low = sp.score(x, y, ["procrustes"], {"permutations": 39, "alpha": 0.5})[0].details
    high = sp.score(x, y, ["procrustes"], {"permutations": 39, "alpha": 0.025})[0].details
    assert low["alpha"] == 0.5 and low["tau"] <= high["tau"] and low["p_value"] == high["p_value"]
    for bad in (0, 1, 1.5, -0.1, "low", True, float("nan")):
        row = sp.score(x, y, ["procrustes"], {"permutations": 9, "alpha": bad})[0]
        assert row.score is None and "alpha" in row.error, (bad, row.error)


def test_linear_regressions_alpha_stays_its_ridge_strength():
    """``alpha`` of linear-regression is its ridge strength: its calibrated score uses the default level."""
    x, y = _pair(50, 4, 2, signal=1.0)
    strong = sp.score(x, y, ["linear-regression"], {"permutations": 9, "alpha": 10.0})[0]
    weak = sp.score(x, y, ["linear-regression"], {"permutations": 9, "alpha": 1e-6})[0]
    assert strong.score < weak.score and strong.details["alpha"] == weak.details["alpha"] == 0.05
    assert sp.metric_info("linear-regression").range == (-math.inf, 1.0)  # R^2 is at most 1: the calibration's smax
