"""What the activation-only metrics declare holds (kind, range, symmetry, every invariance of the vocabulary,
declared or not), bad inputs get clear errors, and through ``compare`` one metric's error loses nothing."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils.data import TensorDataset

import similarity_plugins as sp
from similarity_plugins import functional as F
from similarity_plugins.host.manager import get_plugin_manager
from similarity_plugins.host.registry import select_metrics
from similarity_plugins.networks.context import Context
from similarity_plugins.plugins import cka as cka_plugins
from similarity_plugins.plugins import representational as rep
from tests.helpers.models import tiny_cnn

NEW = ["procrustes", "cca", "svcca", "pwcca", "rsa", "linear-regression", "mutual-knn", "cknna"]
ACTIVATION_METRICS = ["cka-linear", "cka-debiased", "cka-rbf", *NEW]
VOCABULARY = ["translation", "isotropic-scaling", "orthogonal", "permutation", "invertible-linear", "monotonic"]

FUNCTIONS = {
    "cka-linear": lambda x, y: F.cka(x, y),
    "cka-debiased": lambda x, y: F.cka(x, y, debiased=True),
    "cka-rbf": lambda x, y: F.cka(x, y, kernel="rbf"),
    "procrustes": F.procrustes, "cca": F.cca, "svcca": F.svcca, "pwcca": F.pwcca, "rsa": F.rsa,
    "linear-regression": F.linear_regression, "mutual-knn": lambda x, y: F.mutual_knn(x, y, topk=5),
    "cknna": lambda x, y: F.cknna(x, y, topk=5),
}


PLUGINS = {"cka-linear": cka_plugins.LinearCKA, "cka-debiased": cka_plugins.DebiasedCKA, "cka-rbf": cka_plugins.RBFCKA,
           "procrustes": rep.Procrustes, "cca": rep.CCA, "svcca": rep.SVCCA, "pwcca": rep.PWCCA, "rsa": rep.RSA,
           "linear-regression": rep.LinearRegression, "mutual-knn": rep.MutualKNN, "cknna": rep.CKNNA}


def _plugin(name: str):
    return PLUGINS[name]


def _data(n: int = 80, dx: int = 6, dy: int = 5, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Related X, Y with decaying spectra (a 99% variance cut drops directions) and non-zero means."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, dx)) @ np.diag(np.geomspace(8.0, 0.05, dx)) + 1.0
    y = np.tanh(x @ rng.standard_normal((dx, dy)) / 4.0) @ np.diag(np.geomspace(3.0, 0.1, dy)) \
        + 0.3 * rng.standard_normal((n, dy)) + 2.0
    return x, y


def _transform(word: str, a: np.ndarray, seed: int = 7) -> np.ndarray:
    """``a`` (n, d) under one transformation of the vocabulary (docs/metrics.md)."""
    rng = np.random.default_rng(seed)
    d = a.shape[1]
    if word == "translation":
        return a + 3.0 * rng.standard_normal(d)
    if word == "isotropic-scaling":
        return 3.7 * a
    if word == "orthogonal":
        q, _ = np.linalg.qr(rng.standard_normal((d, d)))
        return a @ q
    if word == "permutation":
        return a[:, rng.permutation(d)]
    if word == "invertible-linear":
        return a @ (np.eye(d) + rng.standard_normal((d, d)))
    assert word == "monotonic"
    return a**3 + a  # strictly increasing, element-wise


@pytest.mark.parametrize("name", ACTIVATION_METRICS)
def test_every_activation_metric_declares_what_its_score_means(name):
    plugin = _plugin(name)
    assert plugin.kind in ("similarity", "distance")
    assert plugin.range is None or (len(plugin.range) == 2 and plugin.range[0] < plugin.range[1])
    assert isinstance(plugin.symmetric, bool) and plugin.activations_only is True and plugin.deterministic is True
    assert set(plugin.invariances) <= set(VOCABULARY), plugin.invariances
    score = FUNCTIONS[name](*_data())
    if plugin.range is not None:
        assert plugin.range[0] <= score <= plugin.range[1]


@pytest.mark.parametrize("name", ACTIVATION_METRICS)
def test_declared_symmetry_holds_and_undeclared_does_not(name):
    x, y = _data(dx=5, dy=5)
    fn, plugin = FUNCTIONS[name], _plugin(name)
    if plugin.symmetric:
        assert fn(x, y) == pytest.approx(fn(y, x), rel=1e-9)
    else:
        assert abs(fn(x, y) - fn(y, x)) > 1e-6


@pytest.mark.parametrize("name", ACTIVATION_METRICS)
@pytest.mark.parametrize("word", VOCABULARY)
def test_declared_invariances_hold_and_undeclared_ones_do_not(name, word):
    """A declared invariance holds on both sides; an undeclared one visibly changes the score on some side."""
    x, y = _data()
    fn = FUNCTIONS[name]
    base = fn(x, y)
    moved = [fn(_transform(word, x), y), fn(x, _transform(word, y))]
    if word in _plugin(name).invariances:
        assert moved == pytest.approx([base, base], rel=1e-8, abs=1e-10)
    else:
        assert max(abs(m - base) for m in moved) > 1e-6, f"{name} looks invariant to {word} but does not declare it"


# --------------------------------------------------------------------------- bad input
BAD_NAME = {"procrustes": "Procrustes", "cca": "CCA", "svcca": "SVCCA", "pwcca": "PWCCA", "rsa": "RSA",
            "linear-regression": "linear-regression", "mutual-knn": "mutual-kNN", "cknna": "CKNNA"}
MEASURES = {name: FUNCTIONS[name] for name in NEW}


@pytest.mark.parametrize("name", NEW)
@pytest.mark.parametrize("value,word", [(np.nan, "NaN"), (np.inf, "Inf")])
def test_non_finite_rows_are_refused_naming_the_argument(name, value, word):
    x, y = _data()
    bad = x.copy()
    bad[3] = value
    with pytest.raises(ValueError, match=f"X contains {word}"):
        MEASURES[name](bad, y)
    with pytest.raises(ValueError, match=f"Y contains {word}"):
        MEASURES[name](x, torch.tensor(np.where(np.arange(len(y))[:, None] == 5, value, y)))


@pytest.mark.parametrize("name", NEW)
def test_mismatched_rows_empty_and_constant_inputs_are_refused(name):
    x, y = _data()
    with pytest.raises(ValueError, match="X has 80 samples but Y has 79"):
        MEASURES[name](x, y[:-1])
    with pytest.raises(ValueError, match="X is empty"):
        MEASURES[name](np.zeros((0, 3)), np.zeros((0, 3)))
    with pytest.raises(ValueError, match="constant across samples"):
        MEASURES[name](np.ones_like(x) * 2.5, y)
    with pytest.raises(ValueError, match="needs at least|samples"):
        MEASURES[name](x[:1], y[:1])
    with pytest.raises(ValueError, match="complex"):
        MEASURES[name](x.astype(complex), y)


def test_cca_family_refuses_degenerate_sample_counts_naming_the_fix():
    x, y = _data(n=12, dx=6, dy=5)  # n - 1 = 11 <= 6 + 5
    with pytest.raises(ValueError, match=r"CCA is degenerate.*n - 1 = 11 <= 6 \+ 5.*svcca.*dims"):
        F.cca(x, y)
    with pytest.raises(ValueError, match="PWCCA is degenerate.*more samples"):
        F.pwcca(x, y)
    with pytest.raises(ValueError, match="SVCCA is degenerate.*fewer directions"):
        F.svcca(x, y, variance=1.0)
    assert 0.0 <= F.svcca(x, y, dims=3) <= 1.0  # the named fix works


@pytest.mark.parametrize("call,match", [
    (lambda x, y: F.rsa(x, y, rdm="corelation"), "rdm must be one of.*did you mean 'correlation'"),
    (lambda x, y: F.rsa(x, y, compare="spearmann"), "compare must be one of.*did you mean 'spearman'"),
    (lambda x, y: F.svcca(x, y, variance=1.5), r"variance must be in \(0, 1\]"),
    (lambda x, y: F.svcca(x, y, dims=0), "dims must be an integer >= 1"),
    (lambda x, y: F.svcca(x, y, dims=(2, 3, 4)), "dims must be an integer or a pair"),
    (lambda x, y: F.mutual_knn(x, y, topk=2.5), "topk must be an integer"),
    (lambda x, y: F.mutual_knn(x, y, topk=80), "topk=80 needs at least 82 samples"),
    (lambda x, y: F.linear_regression(x, y, alpha=0), "alpha must be a positive finite number"),
    (lambda x, y: F.linear_regression(x, y, split={"train": [0, 1]}), "split must be"),
    (lambda x, y: F.rsa(x, y, max_bytes=1000), "RSA on n=80 samples needs about.*max_samples"),
    (lambda x, y: F.rsa(np.vstack([x[:-1], np.zeros(6)]), y, rdm="cosine"), "row 79.*cosine distance is undefined"),
    (lambda x, y: F.mutual_knn(np.vstack([x[:-1], np.zeros(6)]), y), "all zero"),
])
def test_bad_options_and_undefined_cases_get_clear_errors(call, match):
    x, y = _data()
    with pytest.raises(ValueError, match=match):
        call(x, y)


# --------------------------------------------------------------------------- through compare
def _images(n: int, seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.rand(n, 1, 16, 16, generator=g), torch.randint(0, 10, (n,), generator=g))


def test_new_measures_are_registered_and_in_the_default_selection():
    assert set(NEW) <= set(select_metrics(None))
    pm = get_plugin_manager()
    for name in ACTIVATION_METRICS:
        assert type(pm.get_plugin(name)) is PLUGINS[name]


def test_compare_gives_error_rows_and_loses_nothing():
    """Bad option value (rsa), N too small (mutual-knn topk, degenerate cca) and a dead layer: error rows;
    every other metric and layer still gets its score."""
    front, end = tiny_cnn(seed=0), tiny_cnn(seed=1)
    with torch.no_grad():  # a dead end block3 (constant activations); block2 stays alive
        end.block3[1].weight.zero_()
        end.block3[1].bias.zero_()
    data = sp.Data(train=_images(120, 0), test=_images(100, 1))
    options = {"rsa": {"rdm": "bogus"}, "mutual-knn": {"topk": 150}, "svcca": {"dims": 5}}
    report = sp.compare(front, end, ["block2", "block3"], data, NEW + ["cka-linear"], options=options)
    errors = {(r.metric, r.layer): r.error for r in report.results if r.error}
    assert "rdm must be one of" in errors[("rsa", "block2")]
    assert "topk=150 needs at least 152 samples" in errors[("mutual-knn", "block2")]
    assert "degenerate" in errors[("cca", "block2")] and "degenerate" in errors[("pwcca", "block2")]
    for metric in ["procrustes", "svcca", "linear-regression", "cka-linear"]:
        assert "constant across samples" in errors[(metric, "block3")]
        assert report[metric, "block2"].error is None and report[metric, "block2"].score is not None
    assert report["procrustes", "block2"].details["angular_distance"] > 0
    assert report["svcca", "block2"].details["front_dims_kept"] == 5


def test_compare_scores_equal_the_functional_ones_on_the_same_activations():
    front, end = tiny_cnn(seed=0), tiny_cnn(seed=1)
    data = sp.Data(train=_images(90, 0), test=_images(70, 1))
    report = sp.compare(front, end, "pool", data, NEW, options={"max_samples": 60})  # 16 features
    ctx = Context(data)
    x = ctx.activations(front, "pool", "test")[:60]
    y = ctx.activations(end, "pool", "test")[:60]
    for name in ["procrustes", "cca", "svcca", "pwcca", "rsa", "mutual-knn"]:
        assert report[name, "pool"].score == pytest.approx(getattr(F, name.replace("-", "_"))(x, y), rel=1e-12)
        assert report[name, "pool"].details["n"] == 60
    xtr, ytr = ctx.activations(front, "pool", "train"), ctx.activations(end, "pool", "train")
    expected = F.linear_regression(xtr, ytr, X_test=x, Y_test=y)
    assert report["linear-regression", "pool"].score == pytest.approx(expected, rel=1e-12)
    assert report["linear-regression", "pool"].details["n_train"] == 90
