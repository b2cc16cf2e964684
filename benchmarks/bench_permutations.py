"""Permutation tests (option ``permutations``): ours against the naive loop through ``score``, per measure.

Run from the repository root: ``python -m pytest benchmarks/bench_permutations.py --benchmark-only``. One group
per metric at N = 2000, D = 512 (X, Y float64, Y a noisy map of X): ``ours`` is ``score(x, y, [metric],
options={"permutations": K})`` (one score plus the test, K seeded permutations); ``naive`` is ``score(x, y[p],
[metric])`` for ``K_NAIVE`` row permutations p. The naive loop at K = 1000 would take hours on a shared machine
for the measures that need a decomposition per permutation, so both sides run fewer permutations where said
(``K_OURS``, ``K_NAIVE`` below) and are compared per permutation: ``<metric>_naive_over_ours`` =
(naive seconds / K_NAIVE) / (ours seconds / K_OURS), ours including its one score (so conservative). Also stored
in ``extra_info``: ``score_seconds`` (one score without the test), the per-permutation seconds of both, and for
the measures that need an eigenproblem per permutation ``floor_seconds``: one ``a^T P b`` GEMM and the
eigenvalues of its D x D Gram matrix, the least any exact permutation of that measure costs.

Group ``mantel`` (N = 2000, K = 1000, Y independent of X): RSA with Pearson comparison (the Mantel test) against
scikit-bio's ``skbio.stats.distance.mantel`` on the same correlation-distance RDMs: the statistic must agree to
1e-10 and the p-values within Monte Carlo error; ``skbio_over_ours`` is their time ratio. Both sides start from
the activations: ours is one ``score`` call (RDMs, the score, the sampled and the analytic p-value), scikit-bio's
side builds the two square RDMs (``rdm_upper`` + ``squareform``) and calls ``mantel``.
"""

from __future__ import annotations

import math
import os
import time

import numpy as np
import pytest
import ratios
import torch

import similarity_plugins as sp

N, D = 2000, 512
K_FULL = int(os.environ.get("PERM_BENCH_K", "1000"))
#: permutations per side: (ours, naive); the decomposition-bound measures run ours on fewer (per-permutation ratio)
K = {"cka-linear": (K_FULL, 20), "cka-debiased": (K_FULL, 20), "cka-rbf": (200, 10), "rsa": (200, 10),
     "mutual-knn": (K_FULL, 10), "procrustes": (100, 10), "cca": (100, 5), "svcca": (100, 5), "pwcca": (100, 5),
     "linear-regression": (200, 10)}
FLOORS = {"procrustes", "cca", "svcca", "pwcca"}


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((N, D))
    y = np.tanh(x @ rng.standard_normal((D, D)) / math.sqrt(D)) + rng.standard_normal((N, D))
    return x, y


def _share(metric: str) -> None:
    ours, naive = ratios.RUNS.get(f"{metric}:ours"), ratios.RUNS.get(f"{metric}:naive")
    if ours is None or naive is None:
        return
    k_ours, k_naive = K[metric]
    per_ours, per_naive = ours.stats.stats.min / k_ours, naive.stats.stats.min / k_naive
    for run in (ours, naive):
        run.extra_info.update({f"{metric}_naive_over_ours": round(per_naive / per_ours, 2),
                               "ours_seconds_per_permutation": per_ours, "naive_seconds_per_permutation": per_naive})
    print(f"\n[bench_permutations] {metric}: naive/ours per permutation = {per_naive / per_ours:.1f}x "
          f"(ours {per_ours * 1e3:.1f} ms, naive {per_naive * 1e3:.1f} ms, one score "
          f"{ours.extra_info['score_seconds'] * 1e3:.0f} ms)")


def _floor(x: np.ndarray, y: np.ndarray) -> float:
    """Seconds of one exact permutation's least work: ``a^T P b`` and the eigenvalues of its D x D Gram."""
    a, b = torch.from_numpy(x - x.mean(0)), torch.from_numpy(y - y.mean(0))
    p = torch.randperm(N)
    start = time.perf_counter()
    m = a.T @ b[p]
    torch.linalg.eigvalsh(m.T @ m)
    return time.perf_counter() - start


@pytest.mark.parametrize("metric", list(K))
def test_ours(benchmark, data, metric):
    x, y = data
    benchmark.group = f"permutations-{metric}"
    start = time.perf_counter()
    sp.score(x, y, [metric])
    benchmark.extra_info["score_seconds"] = time.perf_counter() - start
    benchmark.extra_info["permutations"] = K[metric][0]
    if metric in FLOORS:
        benchmark.extra_info["floor_seconds"] = min(_floor(x, y) for _ in range(3))
    report = benchmark.pedantic(sp.score, (x, y, [metric]), {"options": {"permutations": K[metric][0]}},
                                rounds=1, iterations=1)
    assert report[0].error is None and report[0].details["permutations"] == K[metric][0]
    ratios.record(f"{metric}:ours", benchmark)
    _share(metric)


@pytest.mark.parametrize("metric", list(K))
def test_naive(benchmark, data, metric):
    x, y = data
    benchmark.group = f"permutations-{metric}"
    benchmark.extra_info["permutations"] = K[metric][1]
    gen = torch.Generator().manual_seed(1)
    perms = [torch.randperm(N, generator=gen).numpy() for _ in range(K[metric][1])]

    def loop() -> list[float]:
        return [sp.score(x, y[p], [metric])[0].score for p in perms]

    benchmark.pedantic(loop, rounds=1, iterations=1)
    ratios.record(f"{metric}:naive", benchmark)
    _share(metric)


MANTEL_K = 1000


@pytest.fixture(scope="module")
def unrelated(data) -> tuple[np.ndarray, np.ndarray]:
    """X and an independent Y: a p-value away from its floor, so that agreement means something."""
    return data[0], np.random.default_rng(5).standard_normal((N, D))


def _rdms(pair) -> tuple[np.ndarray, np.ndarray]:
    from scipy.spatial.distance import squareform

    from similarity_plugins.measures.rsa import rdm_upper

    x, y = (torch.from_numpy(a) for a in pair)
    return squareform(rdm_upper(x, "correlation").numpy()), squareform(rdm_upper(y, "correlation").numpy())


def test_mantel_ours(benchmark, unrelated):
    x, y = unrelated
    benchmark.group = "mantel"
    report = benchmark.pedantic(sp.score, (x, y, ["rsa"]),
                                {"options": {"permutations": MANTEL_K, "compare": "pearson"}}, rounds=1, iterations=1)
    benchmark.extra_info.update(statistic=report[0].score, p_value=report[0].details["p_value"],
                                p_value_analytic=report[0].details["p_value_analytic"])
    ratios.record("mantel:ours", benchmark)
    _mantel_share()


def test_mantel_skbio(benchmark, unrelated):
    skbio = pytest.importorskip("skbio.stats.distance")
    benchmark.group = "mantel"

    def from_activations():
        dx, dy = _rdms(unrelated)
        return skbio.mantel(dx, dy, method="pearson", permutations=MANTEL_K, alternative="greater", seed=0)

    stat, p, _ = benchmark.pedantic(from_activations, rounds=1, iterations=1)
    benchmark.extra_info.update(statistic=float(stat), p_value=float(p))
    ratios.record("mantel:skbio", benchmark)
    _mantel_share()


def _mantel_share() -> None:
    ours, theirs = ratios.RUNS.get("mantel:ours"), ratios.RUNS.get("mantel:skbio")
    if ours is None or theirs is None:
        return
    assert abs(ours.extra_info["statistic"] - theirs.extra_info["statistic"]) <= 1e-10
    p1, p2 = ours.extra_info["p_value"], theirs.extra_info["p_value"]
    se = math.sqrt(max(p1 * (1 - p1), p2 * (1 - p2), 1.0 / MANTEL_K) / MANTEL_K)
    assert abs(p1 - p2) <= 5 * math.sqrt(2) * se
    ratios.share_ratio("skbio_over_ours", "mantel:skbio", "mantel:ours")
    print(f"\n[bench_permutations] mantel: skbio/ours = {theirs.extra_info['skbio_over_ours']:.1f}x, statistic "
          f"{ours.extra_info['statistic']:.6f} both, p ours {p1:.4f} skbio {p2:.4f} analytic "
          f"{ours.extra_info['p_value_analytic']:.4g}")
