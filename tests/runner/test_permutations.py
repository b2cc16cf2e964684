"""Permutation tests of every activation measure (option ``permutations``): equal to the naive loop, valid under
the null, exact p = 1/(K+1) for a transformed copy, reproducible, refused when malformed, shown in the table."""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pytest
import torch

import similarity_plugins as sp
from similarity_plugins import functional as F
from similarity_plugins.cli import main
from similarity_plugins.networks.context import Context
from similarity_plugins.stats import permutation as perm

METRICS = ["cka-linear", "cka-debiased", "cka-rbf", "procrustes", "cca", "svcca", "pwcca", "rsa",
           "linear-regression", "mutual-knn", "cknna"]
KEYS = ("p_value", "null_mean", "null_std", "permutations")


def _pair(n: int, dx: int, dy: int, seed: int, signal: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, dx))
    y = signal * x[:, :dy] + rng.standard_normal((n, dy))
    return x, y


def _score(x, y, metric: str, k: int, seed: int = 0, **options):
    row = sp.score(x, y, metrics=[metric], options={"permutations": k, **options}, seed=seed)[0]
    assert row.error is None, row.error
    return row


def test_null_equals_the_naive_loop_through_score_for_every_measure():
    """The same K permutations applied to Y's rows and scored one by one give the same null, for every metric
    but linear-regression (which permutes training rows only: the next test)."""
    x, y = _pair(30, 6, 5, 0, signal=0.5)
    k = 5
    perms = next(perm.draws(30, k, 0, k))
    for metric in METRICS:
        if metric == "linear-regression":
            continue
        row = _score(x, y, metric, k)
        naive = np.array([sp.score(x, y[p.numpy()], metrics=[metric])[0].score for p in perms])
        assert row.details["null_mean"] == pytest.approx(naive.mean(), abs=1e-10), metric
        assert row.details["null_std"] == pytest.approx(naive.std(ddof=1), abs=1e-10), metric
        assert row.details["p_value"] == (1 + int((naive >= row.score - 1e-9).sum())) / (k + 1), metric
        assert row.details["permutations"] == k


def test_regression_null_refits_on_permuted_training_rows():
    """linear-regression permutes the end's training rows, refits, and scores the kept test pairs."""
    x, y = _pair(40, 5, 4, 1, signal=0.8)
    split = {"train": np.arange(28), "test": np.arange(28, 40)}
    row = sp.score(x, y, metrics=["linear-regression"], options={"permutations": 7}, split=split)[0]
    perms = next(perm.draws(28, 7, 0, 7))
    naive = [F.linear_regression(x[:28], y[:28][p.numpy()], X_test=x[28:], Y_test=y[28:]) for p in perms]
    assert row.details["null_mean"] == pytest.approx(np.mean(naive), abs=1e-10)
    assert row.details["null_std"] == pytest.approx(np.std(naive, ddof=1), abs=1e-10)
    assert "training rows" in row.details["permuted"]


def test_transformed_copy_gives_the_smallest_p_value_for_every_measure():
    """Y = X rotated, rescaled and shifted: no permutation scores as high, so p = 1 / (K + 1)."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((40, 8))
    q, _ = np.linalg.qr(rng.standard_normal((8, 8)))
    y = 2.5 * x @ q + 0.3
    for metric in METRICS:
        assert _score(x, y, metric, 199).details["p_value"] == pytest.approx(1 / 200, abs=1e-15), metric


def _null_p_values(metric: str, pairs: int, k: int) -> np.ndarray:
    out = []
    for i in range(pairs):
        x, y = _pair(40, 6, 5, 1000 + i)
        out.append(_score(x, y, metric, k, seed=i).details["p_value"])
    return np.array(out)


def _binomial_bounds(pairs: int, level: float = 0.999) -> tuple[int, int]:
    from scipy.stats import binom

    return int(binom.ppf((1 - level) / 2, pairs, 0.05)), int(binom.ppf((1 + level) / 2, pairs, 0.05))


@pytest.mark.slow
@pytest.mark.parametrize("metric", METRICS)
def test_the_test_is_valid_under_the_null(metric):
    """200 independent pairs (N = 40, K = 199): the count of p <= 0.05 lies in the binomial 99.9% interval."""
    low, high = _binomial_bounds(200)
    count = int((_null_p_values(metric, 200, 199) <= 0.05).sum())
    assert low <= count <= high, (metric, count, low, high)


def test_the_test_is_valid_under_the_null_fast():
    """A cheap version of the validity test through the functional API: 200 pairs, K = 19."""
    low, high = _binomial_bounds(200)
    for name, test in (("cka", lambda x, y, s: F.cka_permutation_test(x, y, permutations=19, seed=s, analytic=False)),
                       ("procrustes", lambda x, y, s: F.permutation_test("procrustes", x, y, permutations=19, seed=s))):
        p = np.array([test(*_pair(40, 6, 5, 2000 + i), i)["p_value"] for i in range(200)])
        assert low <= int((p <= 0.05).sum()) <= high, name


def test_p_value_depends_on_seed_only_not_on_other_metrics_or_threads():
    x, y = _pair(50, 6, 5, 3, signal=0.2)
    alone = sp.score(x, y, metrics=["rsa"], options={"permutations": 49}, seed=4)["rsa"].details
    both = sp.score(x, y, metrics=["procrustes", "rsa", "cka-linear"], options={"permutations": 49}, seed=4)
    assert both["rsa"].details["p_value"] == alone["p_value"]
    assert both["rsa"].details["null_mean"] == pytest.approx(alone["null_mean"], abs=1e-12)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        single = sp.score(x, y, metrics=["procrustes", "cka-linear"], options={"permutations": 49}, seed=4)
    finally:
        torch.set_num_threads(threads)
    for metric in ("procrustes", "cka-linear"):
        assert single[metric].details["p_value"] == both[metric].details["p_value"]
    other = sp.score(x, y, metrics=["rsa"], options={"permutations": 49}, seed=5)["rsa"].details
    assert other["null_mean"] != alone["null_mean"]  # another seed, other permutations


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_p_value_is_the_same_on_the_gpu():
    x, y = _pair(50, 6, 5, 3, signal=0.2)
    names = ["procrustes", "cca", "rsa", "mutual-knn", "linear-regression"]
    cpu = sp.score(torch.from_numpy(x), torch.from_numpy(y), metrics=names, options={"permutations": 49})
    gpu = sp.score(torch.from_numpy(x).cuda(), torch.from_numpy(y).cuda(), metrics=names, options={"permutations": 49})
    for name in names:
        assert gpu[name].details["p_value"] == cpu[name].details["p_value"], name


def test_no_keys_without_permutations_and_bad_values_are_refused_everywhere(tmp_path, capsys):
    x, y = _pair(30, 4, 4, 5)
    for row in sp.score(x, y, metrics=METRICS):
        assert row.error is None and not set(KEYS + ("p_value_analytic",)) & set(row.details), row.metric
    for bad in (-1, 2.5, "many", True):
        for row in sp.score(x, y, metrics=["cka-linear", "rsa"], options={"permutations": bad}):
            assert row.score is None and "permutations" in row.error, (bad, row.error)
    np.save(tmp_path / "a.npy", x)
    np.save(tmp_path / "b.npy", y)
    for bad in ("-1", "2.5", "many"):
        code = main(["score", str(tmp_path / "a.npy"), str(tmp_path / "b.npy"), "--metrics", "procrustes",
                     "--option", f"permutations={bad}"])
        captured = capsys.readouterr()
        assert code in (1, 2) and "permutations" in captured.err + captured.out


def test_compare_and_the_cli_carry_the_test(tmp_path, capsys):
    from torch.utils.data import TensorDataset

    from tests.helpers.models import tiny_cnn

    g = torch.Generator().manual_seed(0)
    data = sp.Data(train=TensorDataset(torch.rand(50, 1, 16, 16, generator=g), torch.zeros(50, dtype=torch.long)),
                   test=TensorDataset(torch.rand(40, 1, 16, 16, generator=g), torch.zeros(40, dtype=torch.long)))
    front, end = tiny_cnn(seed=0), tiny_cnn(seed=1)
    report = sp.compare(front, end, "pool", data, ["cka-linear", "rsa"], options={"permutations": 19})
    ctx = Context(data)
    x, y = ctx.activations(front, "pool", "test"), ctx.activations(end, "pool", "test")
    for name in ("cka-linear", "rsa"):
        alone = sp.score(x, y, [name], {"permutations": 19})[0].details
        for key in ("p_value", "tau", "calibrated"):  # compare calibrates exactly as score does
            assert report[name].details[key] == alone[key], (name, key)
    bad = sp.compare(front, end, "pool", data, ["procrustes"], options={"permutations": -1})
    assert "permutations" in bad["procrustes"].error
    np.save(tmp_path / "a.npy", x.numpy())
    np.save(tmp_path / "b.npy", y.numpy())
    assert main(["score", str(tmp_path / "a.npy"), str(tmp_path / "b.npy"), "--metrics", "cka-linear", "--option",
                 "permutations=19", "--out", str(tmp_path / "r.json")]) == 0
    out = capsys.readouterr().out
    assert " p " in out.splitlines()[0] + " " and "permutation p-value" in out
    import json

    row = json.loads((tmp_path / "r.json").read_text())["results"][0]
    assert row["details"]["p_value"] == report["cka-linear"].details["p_value"]


def test_table_has_a_p_column_only_when_a_row_has_a_p_value():
    x, y = _pair(30, 4, 4, 6, signal=1.0)
    with_p = str(sp.score(x, y, metrics=["cka-linear", "rsa"], options={"rsa": {"permutations": 9}}))
    assert with_p.splitlines()[0].split()[:4] == ["metric", "x->y", "p", "time"]
    assert "permutation p-value over 9 permutations" in with_p
    assert " p " not in str(sp.score(x, y, metrics=["cka-linear"])).splitlines()[0]


def test_exact_moments_equal_full_enumeration():
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((6, 6)), rng.standard_normal((6, 6))
    a, b = a + a.T, b + b.T
    t = np.array([np.sum(a * b[np.ix_(p, p)]) for p in itertools.permutations(range(6))])
    mean, var, skew = perm.permutation_moments(torch.from_numpy(a), torch.from_numpy(b))
    assert mean == pytest.approx(t.mean(), rel=1e-10)
    assert var == pytest.approx(t.var(), rel=1e-10)
    assert skew == pytest.approx(((t - t.mean()) ** 3).mean() / t.var() ** 1.5, rel=1e-8)


@pytest.mark.parametrize("metric,options", [("cka-linear", {}), ("cka-debiased", {}), ("cka-rbf", {}),
                                            ("rsa", {"compare": "pearson"}), ("rsa", {})])
def test_analytic_p_value_agrees_with_the_sampled_one(metric, options):
    """Pearson type III from the exact moments against K = 1999 permutations (Monte Carlo error about 0.01)."""
    x, y = _pair(40, 5, 5, 8, signal=0.25)
    details = _score(x, y, metric, 1999, **options).details
    p = details["p_value"]
    assert 0.002 < p < 0.99  # not at the floor, where agreement would say nothing
    se = math.sqrt(p * (1 - p) / 1999)
    assert details["p_value_analytic"] == pytest.approx(p, abs=4 * se + 0.02)


def test_cost_beyond_the_bound_warns_before_the_work_naming_it(monkeypatch):
    x, y = _pair(30, 4, 4, 9)
    monkeypatch.setattr(perm, "WORK_BOUND", 10.0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        row = sp.score(x, y, metrics=["procrustes"], options={"permutations": 5})[0]
    assert any(issubclass(w.category, perm.PermutationCostWarning) and "WORK_BOUND" in str(w.message) for w in caught)
    assert any("WORK_BOUND" in w for w in row.details["warnings"])
    assert row.details["permutations"] == 5


def test_functional_permutation_tests_match_the_metrics():
    x, y = _pair(30, 5, 4, 10, signal=0.4)
    assert F.cka_permutation_test(x, y, permutations=19, seed=3)["p_value"] == \
        _score(x, y, "cka-linear", 19, seed=3).details["p_value"]
    assert F.permutation_test("mutual_knn", x, y, permutations=19, seed=3, topk=5)["null_mean"] == \
        pytest.approx(_score(x, y, "mutual-knn", 19, seed=3, topk=5).details["null_mean"], abs=1e-12)
    with pytest.raises(ValueError, match="permutations"):
        F.permutation_test("rsa", x, y, permutations=0)


def test_rsa_matches_scikit_bio_mantel():
    skbio = pytest.importorskip("skbio.stats.distance")
    from scipy.spatial.distance import pdist, squareform

    x, y = _pair(30, 5, 5, 11, signal=0.3)
    dx, dy = squareform(pdist(x, "correlation")), squareform(pdist(y, "correlation"))
    stat, p_theirs, _ = skbio.mantel(dx, dy, method="pearson", permutations=1999, alternative="greater", seed=0)
    ours = _score(x, y, "rsa", 1999, compare="pearson")
    assert ours.score == pytest.approx(stat, abs=1e-10)
    se = math.sqrt(p_theirs * (1 - p_theirs) / 1999)
    assert ours.details["p_value"] == pytest.approx(p_theirs, abs=5 * se * math.sqrt(2) + 1e-3)
