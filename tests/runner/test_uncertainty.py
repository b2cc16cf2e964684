"""Uncertainty on every score: bootstrap intervals over test samples, repeats over seeds, their output."""

from __future__ import annotations

import builtins
import json

import pytest
import torch

from similarity_plugins import Data, SimilarityResult, compare
from similarity_plugins.runner.repeats import check_repeats, exact_mean, mean_interval, run_repeated
from similarity_plugins.stitch.bootstrap import relative_accuracy_ci
from tests.helpers.models import assert_unchanged, snapshot

FAST = {"epochs": 3, "batch_size": 64, "max_train": 256}


def _correctness(n: int, p_stitched: float, p_end: float, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    end = torch.rand(n, generator=g) < p_end
    stitched = end & (torch.rand(n, generator=g) < p_stitched / p_end)
    return stitched, end


def test_bootstrap_interval_contains_score_and_shrinks_with_more_data():
    widths = []
    for n in (100, 1000, 10000):
        stitched, end = _correctness(n, 0.6, 0.9)
        low, high = relative_accuracy_ci(stitched, end)
        score = float(stitched.double().mean() / end.double().mean())
        assert low <= score <= high
        assert 0.0 <= low < high
        widths.append(high - low)
    assert widths[0] > 2 * widths[1] > 4 * widths[2]  # ~1/sqrt(n): x3.2 per tenfold
    assert relative_accuracy_ci(stitched, end) == (low, high)  # fixed seed: reproducible


def test_bootstrap_bad_input_and_degenerate_cases():
    with pytest.raises(ValueError, match="equal length"):
        relative_accuracy_ci(torch.ones(3), torch.ones(4))
    with pytest.raises(ValueError, match="level"):
        relative_accuracy_ci(torch.ones(3), torch.ones(3), level=1.5)
    assert relative_accuracy_ci(torch.ones(50, dtype=torch.bool), torch.ones(50, dtype=torch.bool)) == (1.0, 1.0)


def test_bootstrap_covers_the_true_ratio_about_95_percent():
    hits = 0
    for seed in range(100):
        stitched, end = _correctness(300, 0.5, 0.8, seed=seed)
        low, high = relative_accuracy_ci(stitched, end, resamples=400, seed=seed)
        hits += low <= 0.5 / 0.8 <= high
    assert 85 <= hits <= 100


def test_mean_interval_and_check_repeats():
    low, high = mean_interval([0.5, 0.6, 0.7])
    assert low < 0.6 < high and high - low == pytest.approx(2 * 4.302653 * 0.1 / 3 ** 0.5, rel=1e-5)
    assert mean_interval([0.4]) == (0.4, 0.4)
    drifting = 0.9405927870198221  # (v + v + v) / 3 != v in binary floating point
    assert (drifting + drifting + drifting) / 3 != drifting
    assert mean_interval([drifting] * 3) == (drifting, drifting) and exact_mean([drifting] * 3) == drifting
    assert check_repeats(3) == 3
    for bad, error in ((0, ValueError), (-2, ValueError), (1.5, TypeError), ("2", TypeError), (True, TypeError)):
        with pytest.raises(error, match="repeats"):
            check_repeats(bad)


def test_deterministic_repeats_run_once_and_report_the_value_exactly():
    drifting = 0.9405927870198221
    calls = []

    def run_once(seed):
        calls.append(seed)
        return SimilarityResult("m", drifting, {"accuracy": drifting, "test_ci95": [drifting, drifting]}, 0.1, None, "l")

    result = run_repeated(run_once, 5, 3, deterministic=True)
    assert calls == [5]
    assert result.score == drifting and result.details["scores"] == [drifting] * 3
    assert result.details["seed_ci95"] == [drifting, drifting] and result.details["accuracy"] == drifting
    assert result.details["seeds"] == [5, 6, 7] and result.details["deterministic"] is True


@pytest.fixture(scope="module")
def donors(digits32, small_cnn_donors):
    """The session's two trained SmallCNNs (tests/conftest.py) and the 32x32 digits they learnt."""
    return digits32, small_cnn_donors


def test_stitch_details_carry_the_test_interval_which_shrinks_with_more_test_data(donors):
    data, (a, b) = donors
    small = Data(train=data.train, test=torch.utils.data.Subset(data.test, range(90)))
    widths = []
    for d in (small, data):
        result = compare(a, b, "block2", d, "stitch-slm", options=FAST)["stitch-slm"]
        low, high = result.details["test_ci95"]
        assert low <= result.score <= high
        widths.append(high - low)
    assert widths[0] > 1.5 * widths[1]  # 90 vs 450 test samples: ~sqrt(5) = 2.2 times wider


def test_repeats_aggregate_and_reproduce(donors):
    data, (a, b) = donors
    before = snapshot(a), snapshot(b)
    options = {**FAST, "epochs": 2, "max_train": 128}  # seven stitch fits: small ones (scores 0.701, 0.709, 0.701)
    report = compare(a, b, "block2", data, ["cka-linear", "stitch-slm"], options=options, seed=3, repeats=3)
    again = compare(a, b, "block2", data, ["cka-linear", "stitch-slm"], options=options, seed=3, repeats=3)
    stitch = report["stitch-slm"]
    assert stitch.details["scores"] == again["stitch-slm"].details["scores"]
    assert stitch.details["seeds"] == [3, 4, 5] and len(stitch.details["scores"]) == 3
    assert stitch.score == pytest.approx(sum(stitch.details["scores"]) / 3)
    low, high = stitch.details["seed_ci95"]
    assert low <= stitch.score <= high
    assert len(set(stitch.details["scores"])) > 1  # other seeds: other stitches
    single = compare(a, b, "block2", data, "stitch-slm", options=options, seed=4)["stitch-slm"]
    assert single.score == stitch.details["scores"][1]  # the second repeat is the run with seed 4
    cka = report["cka-linear"]
    assert cka.details["deterministic"] is True and stitch.details["deterministic"] is False
    assert cka.details["scores"] == [cka.score] * 3 and cka.details["seed_ci95"] == [cka.score, cka.score]
    assert report.meta["repeats"] == 3
    assert_unchanged(a, before[0])
    assert_unchanged(b, before[1])

    text = str(report)
    assert f"{stitch.score:.4f} [{low:.2f}, {high:.2f}]" in text and "3 seeds" in text
    header, row = report.to_csv().splitlines()[:2]
    assert "seed_ci95_low" in header and "test_ci95_high" in header
    assert json.loads(report.to_json())["results"][1]["details"]["seed_ci95"] == pytest.approx([low, high])

    frame = report.to_pandas()
    assert list(frame.columns[:9]) == ["metric", "layer", "score", "seconds", "error", "test_ci95_low",
                                       "test_ci95_high", "seed_ci95_low", "seed_ci95_high"]
    assert len(frame) == 2 and frame.loc[1, "seed_ci95_low"] == pytest.approx(low)
    assert frame.loc[1, "repeats"] == 3 and "agreement" in frame.columns


def test_bad_repeats_refused_before_any_work(donors, monkeypatch):
    data, (a, b) = donors
    import similarity_plugins.runner.compare as compare_module

    monkeypatch.setattr(compare_module, "get_plugin_manager", lambda: pytest.fail("work started"))
    for bad in (0, 2.5, "3"):
        with pytest.raises((ValueError, TypeError), match="repeats"):
            compare(a, b, "block2", data, "stitch-slm", repeats=bad)


def test_to_pandas_without_pandas_says_how_to_install(donors, monkeypatch):
    data, (a, b) = donors
    report = compare(a, b, "block2", data, "cka-linear")
    real_import = builtins.__import__

    def no_pandas(name, *args, **kwargs):
        if name == "pandas" or name.startswith("pandas."):
            raise ImportError("No module named 'pandas'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pandas)
    with pytest.raises(ImportError, match="pip install pandas"):
        report.to_pandas()


def test_any_metric_s_test_interval_is_averaged_over_repeats_and_printed(fresh_manager):
    """``details["test_ci95"]`` is part of the result contract, not stitching's: a third-party metric that
    reports one gets it averaged over seeds (with the per-seed list) and shown in the table."""
    import similarity_plugins as sp
    from tests.helpers.models import tiny_cnn

    @sp.hookimpl
    def similarity(seed):
        return {"score": 0.5 + seed / 100, "details": {"test_ci95": [0.4 + seed / 100, 0.6 + seed / 100]}}

    sp.register_metric(similarity, "interval-metric")
    x = torch.rand(24, 1, 8, 8)
    data = Data(test=torch.utils.data.TensorDataset(x, torch.zeros(24, dtype=torch.long)))
    row = compare(tiny_cnn(), tiny_cnn(seed=1), "block1", data, "interval-metric", seed=1, repeats=3)["interval-metric"]
    assert row.details["test_ci95_per_seed"] == [[0.4 + s / 100, 0.6 + s / 100] for s in (1, 2, 3)]
    assert row.details["test_ci95"] == pytest.approx([0.42, 0.62], abs=1e-12)
    assert row.details["seed_ci95"][0] < row.score < row.details["seed_ci95"][1]
    one = compare(tiny_cnn(), tiny_cnn(seed=1), "block1", data, "interval-metric", seed=1)
    assert "[0.41, 0.61]" in str(one) and "bootstrap interval over test samples" in str(one)
