"""Ties in the neighbour-based measures (mutual k-NN, CKNNA): the value is the expectation under random
tie-breaking and does not depend on the order of the samples (duplicated samples, rows along one direction,
one-dimensional layers); a constant layer is refused as by every measure."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import similarity_plugins as sp
from similarity_plugins import functional as F

MEASURES = {"mutual-knn": F.mutual_knn, "cknna": F.cknna}


def _duplicated(seed: int, distinct: int = 12, copies: int = 3, d: int = 5) -> tuple[np.ndarray, np.ndarray]:
    """``distinct`` samples each repeated ``copies`` times in X (so their neighbours tie), Y a noisy map of X."""
    rng = np.random.default_rng(seed)
    base = rng.standard_normal((distinct, d))
    x = np.repeat(base, copies, axis=0)
    y = np.tanh(x @ rng.standard_normal((d, d))) + 0.3 * rng.standard_normal(x.shape)
    return x, y


def _orders(n: int, count: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.permutation(n) for _ in range(count)]


@pytest.mark.parametrize("name", list(MEASURES))
def test_duplicated_samples_give_one_value_in_every_order(name):
    measure = MEASURES[name]
    x, y = _duplicated(0)
    first = measure(x, y, topk=4, details=True)
    assert first.details["tied_rows"] > 0
    for p in _orders(len(x), 6):
        assert measure(x[p], y[p], topk=4) == pytest.approx(first.score, abs=1e-12), name


def test_rows_along_one_direction_tie_everywhere_and_score_the_chance_level():
    """Every cosine similarity of positive multiples of one vector is 1: each sample's neighbours are any k of
    the n - 1 others, so mutual k-NN with any Y is exactly k / (n - 1), in every order."""
    rng = np.random.default_rng(1)
    n, k = 30, 5
    x = rng.uniform(0.5, 3.0, (n, 1)) * rng.standard_normal(7)[None]
    y = rng.standard_normal((n, 4))
    for p in [np.arange(n), *_orders(n, 4)]:
        out = F.mutual_knn(x[p], y[p], topk=k, details=True)
        assert out.score == pytest.approx(k / (n - 1), abs=1e-12)
        assert out.details["tied_rows"] >= n


@pytest.mark.parametrize("name", list(MEASURES))
def test_one_dimensional_layers_are_order_free(name):
    """A 1-D layer has cosine similarities of +-1 only, and inner products with many repeats of small integers."""
    rng = np.random.default_rng(2)
    x = rng.integers(-3, 4, (40, 1)).astype(float)
    x[x == 0] = 1.0
    y = x + rng.integers(-1, 2, (40, 1))
    y[y == 0] = 2.0
    values = {round(MEASURES[name](x[p], y[p], topk=3), 12) for p in [np.arange(40), *_orders(40, 5, seed=3)]}
    assert len(values) == 1, values


def _tie_free(sims: np.ndarray, k: int) -> list[tuple[set, float]]:
    """Every neighbour set random tie-breaking can give a row of similarities, each with its probability."""
    order = np.sort(sims)[::-1]
    kth = order[k - 1]
    above = set(np.flatnonzero(sims > kth).tolist())
    tied = np.flatnonzero(sims == kth).tolist()
    picks = list(itertools.combinations(tied, k - len(above)))
    return [(above | set(pick), 1.0 / len(picks)) for pick in picks]


def test_the_value_is_the_exact_expectation_of_random_tie_breaking():
    """Enumerate every tie-breaking of every row of both sides (independently): the mean overlap equals ours."""
    x = np.array([[1, 0], [0, 1], [0, 2], [-1, -1], [2, 0], [1, 1]], dtype=float)
    y = np.array([[1, 0], [1, 0], [0, 1], [-1, -1], [0, 3], [1, 1]], dtype=float)
    k, n = 2, len(x)

    def rows(z):
        u = z / np.linalg.norm(z, axis=1, keepdims=True)
        s = u @ u.T
        np.fill_diagonal(s, -np.inf)
        return [_tie_free(np.round(s[i], 12), k) for i in range(n)]

    expected = np.mean([sum(p * q * len(a & b) / k for a, p in rx for b, q in ry)
                        for rx, ry in zip(rows(x), rows(y))])
    out = F.mutual_knn(x, y, topk=k, details=True)
    assert out.details["tied_rows"] > 0
    assert out.score == pytest.approx(expected, abs=1e-12)


def test_the_permutation_null_with_ties_equals_the_naive_loop():
    """Each null value is the measure of the permuted pairing itself, ties included."""
    from similarity_plugins.stats.permutation import draws

    x, y = _duplicated(4)
    perms = next(draws(len(x), 7, 0, 7))
    for name, measure in MEASURES.items():
        row = sp.score(x, y, [name], {"permutations": 7, "topk": 4})[0]
        assert row.error is None, row.error
        naive = np.array([measure(x, y[p.numpy()], topk=4) for p in perms])
        assert row.details["null_mean"] == pytest.approx(naive.mean(), abs=1e-12), name
        assert row.details["null_std"] == pytest.approx(naive.std(ddof=1), abs=1e-12), name


@pytest.mark.parametrize("name", list(MEASURES))
def test_a_constant_layer_is_refused_in_every_order(name):
    x = np.ones((20, 3))
    y = np.random.default_rng(5).standard_normal((20, 3))
    with pytest.raises(ValueError, match="constant"):
        MEASURES[name](x, y, topk=3)
