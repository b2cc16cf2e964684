"""Restricted permutations (options ``groups`` and ``permute``) and permutations given as an array: they stay in
their design, are uniform over it, give uniform p-values under the null where free permutations give false
positives, and bad values are refused naming the option."""

from __future__ import annotations

import collections

import numpy as np
import pytest
import torch
from scipy.stats import kstest

import similarity_plugins as sp
from similarity_plugins import functional as F
from similarity_plugins.stats.designs import plan_permutations


def _labels(groups: int, size: int, seed: int = 0) -> np.ndarray:
    """``groups`` labels repeated ``size`` times, shuffled (groups need not be contiguous)."""
    return np.random.default_rng(seed).permutation(np.repeat(np.arange(groups) * 7 + 3, size))


def test_within_keeps_each_row_in_its_group_and_groups_move_whole():
    labels = _labels(5, 4)
    within = next(plan_permutations(200, 20, 0, labels, "within").batches(200)).numpy()
    assert (labels[within] == labels[None]).all()
    assert len({tuple(p) for p in within}) > 150  # really permuted
    whole = next(plan_permutations(2000, 20, 0, labels, "groups").batches(2000)).numpy()
    for p in whole[:100]:
        for g in np.unique(labels):
            rows = np.flatnonzero(labels == g)
            assert len(set(labels[p[rows]])) == 1  # a group lands on one group
            assert (np.diff(p[rows]) > 0).all()  # in index order: the t-th row on the t-th row
    assert len({tuple(p) for p in whole}) == 120  # each of the 5! group permutations appears among 2000 draws


def test_draws_are_uniform_over_the_design_and_independent_of_the_batch():
    plan = plan_permutations(1200, 4, 1, ["a", "a", "b", "b"], "within")
    counts = collections.Counter(tuple(p) for p in torch.cat(list(plan.batches(333))).tolist())
    assert len(counts) == 4 and all(240 < c < 360 for c in counts.values())  # 300 +- 4 standard deviations
    assert torch.equal(torch.cat(list(plan.batches(7))), torch.cat(list(plan.batches(1200))))
    assert plan.distinct() == 4 and plan_permutations(9, 6, 0, [0, 0, 1, 1, 2, 2], "groups").distinct() == 6


def _grouped(seed: int, groups: int = 10, size: int = 4, d: int = 5) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Groups that share structure in both representations and nothing else: each group's rows sit around a
    centre of their own in X and around an unrelated centre in Y; the rows' own noise is independent."""
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(groups), size)
    x = 2.0 * rng.standard_normal((groups, d))[labels] + rng.standard_normal((groups * size, d))
    y = 2.0 * rng.standard_normal((groups, d))[labels] + rng.standard_normal((groups * size, d))
    return x, y, labels


def _p_values(count: int, k: int, **design) -> np.ndarray:
    out = []
    for i in range(count):
        x, y, labels = _grouped(100 + i)
        groups = labels if design else None
        test = F.cka_permutation_test(x, y, permutations=k, seed=i, analytic=False, groups=groups, **design)
        # the permutation p-value made continuous (uniform on [0, 1] under the null): p - U / (K + 1)
        out.append(test["p_value"] - np.random.default_rng(i).uniform() / (k + 1))
    return np.array(out)


def _check_designs(count: int, k: int) -> None:
    for permute in ("groups", "within"):
        p = _p_values(count, k, permute=permute)
        assert kstest(p, "uniform").pvalue > 1e-3, permute
    free = _p_values(count, k)
    assert np.mean(free <= 0.05) > 0.5  # the shared group structure alone looks significant


def test_restricted_designs_give_uniform_p_values_where_free_permutations_do_not():
    _check_designs(count=60, k=19)


@pytest.mark.slow
def test_restricted_designs_give_uniform_p_values_where_free_permutations_do_not_at_scale():
    _check_designs(count=400, k=99)


def test_available_where_permutations_are_and_recorded_in_the_row():
    x, y, labels = _grouped(0)
    for metric in ("cka-linear", "rsa", "mutual-knn", "procrustes"):
        row = sp.score(x, y, [metric], {"permutations": 19, "groups": labels, "permute": "groups", "topk": 5}
                       if metric == "mutual-knn" else {"permutations": 19, "groups": labels, "permute": "groups"})[0]
        assert row.error is None, (metric, row.error)
        assert (row.details["permute"], row.details["groups"]) == ("groups", 10), metric
        assert "p_value_analytic" not in row.details  # the analytic law is that of all n! permutations


@pytest.mark.parametrize("options,words", [
    ({"groups": [0, 0, 1]}, "one label per permuted row"),
    ({"groups": [0] * 30 + [1] * 10, "permute": "groups"}, "of one size"),
    ({"groups": list(range(40))}, "every group has one row"),
    ({"groups": [0] * 40, "permute": "shuffle"}, "permute must be one of within, groups"),
    ({"permutations": np.zeros((3, 40), dtype=int)}, "row 0 of the array"),
    ({"permutations": np.tile(np.arange(39), (3, 1))}, "rows of 39 indices"),
    ({"permutations": np.tile(np.arange(40.0), (3, 1))}, "or a (K, N) integer array of permutations, got an array"),
    ({"permutations": np.tile(np.arange(40), (3, 1)), "groups": [0, 1] * 20}, "leave groups out"),
])
def test_bad_designs_are_refused_naming_the_option(options, words):
    x, y, _ = _grouped(1)
    row = sp.score(x, y, ["cka-linear"], {"permutations": 9, **options})[0]
    assert row.score is None and words in row.error, row.error


def test_max_samples_cuts_the_labels_with_the_rows():
    x, y, labels = _grouped(2)
    cut = sp.score(x, y, ["procrustes"], {"permutations": 9, "groups": labels, "max_samples": 20})[0]
    same = sp.score(x[:20], y[:20], ["procrustes"], {"permutations": 9, "groups": labels[:20]})[0]
    assert cut.error is None and cut.details["p_value"] == same.details["p_value"]
    assert cut.details["null_mean"] == pytest.approx(same.details["null_mean"], abs=1e-14)
