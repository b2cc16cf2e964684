"""The representational measures (similarity_plugins.measures / functional) against references written here
from the papers' formulas in NumPy/SciPy float64, their declared invariances, and their bad inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.linalg
import scipy.spatial.distance as ssd
import scipy.stats
import torch

from similarity_plugins import functional as F
from similarity_plugins.measures import Measured

RTOL = 1e-9


def _data(n: int = 80, dx: int = 6, dy: int = 5, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Related X, Y with a decaying spectrum (so that a 99% variance cut drops directions)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, dx)) @ np.diag(np.geomspace(10.0, 0.02, dx)) @ _orthogonal(dx, rng)
    y = np.tanh(x @ rng.standard_normal((dx, dy)) / 4.0) + 0.3 * rng.standard_normal((n, dy)) + 2.0
    return x, y


def _orthogonal(d: int, rng: np.random.Generator) -> np.ndarray:
    q, r = np.linalg.qr(rng.standard_normal((d, d)))
    return q * np.sign(np.diag(r))


# --------------------------------------------------------------------------- references (textbook formulas)
def _c(a: np.ndarray) -> np.ndarray:
    return a - a.mean(axis=0)


def _inv_sqrt(s: np.ndarray) -> np.ndarray:
    w, v = np.linalg.eigh(s)
    return v @ np.diag(w**-0.5) @ v.T


def ref_cca(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Canonical correlations and the front's canonical weights by whitening the covariances (Hotelling)."""
    xc, yc = _c(x), _c(y)
    sxx, syy, sxy = xc.T @ xc, yc.T @ yc, xc.T @ yc
    a, rho, _ = np.linalg.svd(_inv_sqrt(sxx) @ sxy @ _inv_sqrt(syy))
    m = min(x.shape[1], y.shape[1])
    return rho[:m], _inv_sqrt(sxx) @ a[:, :m]


def ref_svcca(x: np.ndarray, y: np.ndarray, variance: float) -> float:
    def reduce(a):
        u, s, vt = np.linalg.svd(_c(a), full_matrices=False)
        share = np.cumsum(s**2) / np.sum(s**2)
        k = int(np.argmax(share >= variance - 1e-12)) + 1
        return _c(a) @ vt[:k].T
    return float(ref_cca(reduce(x), reduce(y))[0].mean())


def ref_pwcca(x: np.ndarray, y: np.ndarray) -> float:
    """Morcos et al. 2018: alpha_i = sum_j |<h_i, x_j>| over the front's centred neurons, h_i unit norm."""
    rho, w = ref_cca(x, y)
    h = _c(x) @ w
    h /= np.linalg.norm(h, axis=0)
    alpha = np.abs(h.T @ _c(x)).sum(axis=1)
    return float(np.sum(alpha / alpha.sum() * rho))


def ref_mutual_knn(x: np.ndarray, y: np.ndarray, k: int) -> float:
    """Huh et al. 2024's mutual_knn: normalised rows, self excluded, neighbour sets intersected."""
    def knn(a):
        a = a / np.linalg.norm(a, axis=1, keepdims=True)
        s = a @ a.T
        np.fill_diagonal(s, -1e8)
        return np.argsort(-s, axis=1, kind="stable")[:, :k]
    ka, kb = knn(x), knn(y)
    return float(np.mean([len(set(ka[i]) & set(kb[i])) / k for i in range(len(x))]))


# --------------------------------------------------------------------------- against the references
def test_procrustes_matches_orthogonal_procrustes_and_nuclear_norm():
    x, y = _data(dx=5, dy=5)
    xn, yn = _c(x) / np.linalg.norm(_c(x)), _c(y) / np.linalg.norm(_c(y))
    _, scale = scipy.linalg.orthogonal_procrustes(xn, yn)  # scale = sum of singular values of xn^T yn
    out = F.procrustes(x, y, details=True)
    assert out.score == pytest.approx(scale, rel=RTOL)
    assert out.details["angular_distance"] == pytest.approx(math.acos(scale), rel=RTOL)
    x, y = _data(dx=7, dy=3)
    expected = np.linalg.norm(_c(x).T @ _c(y), "nuc") / (np.linalg.norm(_c(x)) * np.linalg.norm(_c(y)))
    assert F.procrustes(x, y) == pytest.approx(expected, rel=RTOL)


def test_procrustes_with_more_features_than_samples():
    x, y = _data(n=20, dx=50, dy=40)
    expected = np.linalg.norm(_c(x).T @ _c(y), "nuc") / (np.linalg.norm(_c(x)) * np.linalg.norm(_c(y)))
    assert F.procrustes(x, y) == pytest.approx(expected, rel=RTOL)


def test_cca_matches_whitening_reference():
    x, y = _data()
    rho, _ = ref_cca(x, y)
    out = F.cca(x, y, details=True)
    assert out.score == pytest.approx(rho.mean(), rel=RTOL)
    np.testing.assert_allclose(out.details["correlations"], rho, rtol=1e-8)
    assert out.details["yanai_r2"] == pytest.approx(np.mean(rho**2), rel=RTOL)


@pytest.mark.parametrize("variance", [0.99, 0.9, 0.5])
def test_svcca_matches_svd_then_cca(variance):
    x, y = _data(dx=8, dy=7)
    assert F.svcca(x, y, variance=variance) == pytest.approx(ref_svcca(x, y, variance), rel=1e-8)


def test_svcca_dims_keeps_the_leading_directions():
    x, y = _data(dx=8, dy=7)
    out = F.svcca(x, y, dims=3, details=True)
    ux = _c(x) @ np.linalg.svd(_c(x), full_matrices=False)[2][:3].T
    uy = _c(y) @ np.linalg.svd(_c(y), full_matrices=False)[2][:3].T
    assert out.score == pytest.approx(ref_cca(ux, uy)[0].mean(), rel=1e-8)
    assert (out.details["front_dims_kept"], out.details["end_dims_kept"]) == (3, 3)
    assert F.svcca(x, y, dims=(8, 7)) == pytest.approx(F.cca(x, y), rel=1e-10)  # every direction: plain CCA
    assert "exceeds its rank" in F.svcca(x, y, dims=20, details=True).details["warnings"][0]


def test_svcca_with_more_features_than_samples():
    x, y = _data(n=40, dx=60, dy=50)
    reduced = [_c(a) @ np.linalg.svd(_c(a), full_matrices=False)[2][:5].T for a in (x, y)]
    assert F.svcca(x, y, dims=5) == pytest.approx(ref_cca(*reduced)[0].mean(), rel=1e-8)


def test_pwcca_matches_the_papers_weights_from_the_front():
    x, y = _data(dx=7, dy=4)
    out = F.pwcca(x, y, details=True)
    assert out.score == pytest.approx(ref_pwcca(x, y), rel=1e-8)
    assert out.details["weights_from"] == "front"
    assert sum(out.details["weights"]) == pytest.approx(1.0)
    assert F.pwcca(y, x) == pytest.approx(ref_pwcca(y, x), rel=1e-8)


@pytest.mark.parametrize("rdm", ["correlation", "euclidean", "cosine"])
@pytest.mark.parametrize("compare", ["spearman", "pearson", "kendall"])
def test_rsa_matches_pdist_and_scipy_stats(rdm, compare):
    x, y = _data(n=40)
    a, b = ssd.pdist(x, rdm), ssd.pdist(y, rdm)
    stat = {"spearman": scipy.stats.spearmanr, "pearson": scipy.stats.pearsonr, "kendall": scipy.stats.kendalltau}
    assert F.rsa(x, y, rdm, compare) == pytest.approx(stat[compare](a, b).statistic, rel=1e-8)


def test_rsa_spearman_averages_tied_ranks():
    rng = np.random.default_rng(3)
    x = rng.integers(0, 3, (30, 2)).astype(float)  # many equal distances
    y = rng.standard_normal((30, 4))
    expected = scipy.stats.spearmanr(ssd.pdist(x, "euclidean"), ssd.pdist(y, "euclidean")).statistic
    assert F.rsa(x, y, "euclidean") == pytest.approx(expected, rel=1e-9)
    expected = scipy.stats.kendalltau(ssd.pdist(x, "euclidean"), ssd.pdist(y, "euclidean")).statistic
    assert F.rsa(x, y, "euclidean", "kendall") == pytest.approx(expected, rel=1e-9)


def test_rsa_matches_rsatoolbox():
    rsatoolbox = pytest.importorskip("rsatoolbox")
    x, y = _data(n=40)
    rx = rsatoolbox.rdm.calc_rdm(rsatoolbox.data.Dataset(x), method="correlation")
    ry = rsatoolbox.rdm.calc_rdm(rsatoolbox.data.Dataset(y), method="correlation")
    for ours, theirs in (("spearman", "spearman"), ("pearson", "corr"), ("kendall", "kendall")):
        assert F.rsa(x, y, "correlation", ours) == pytest.approx(rsatoolbox.rdm.compare(rx, ry, theirs).item(), rel=1e-8)
    # rsatoolbox's "euclidean" RDM is the squared distance / channels: the rank comparisons agree with ours
    ex = rsatoolbox.rdm.calc_rdm(rsatoolbox.data.Dataset(x), method="euclidean")
    ey = rsatoolbox.rdm.calc_rdm(rsatoolbox.data.Dataset(y), method="euclidean")
    assert F.rsa(x, y, "euclidean") == pytest.approx(rsatoolbox.rdm.compare(ex, ey, "spearman").item(), rel=1e-8)


@pytest.mark.parametrize("n_train,dx", [(60, 6), (30, 50)])  # feature-space and sample-space solves
def test_linear_regression_matches_sklearn_ridge(n_train, dx):
    from sklearn.linear_model import Ridge
    from sklearn.metrics import r2_score

    x, y = _data(n=n_train + 25, dx=dx, dy=4, seed=1)
    xtr, ytr, xte, yte = x[:n_train], y[:n_train], x[n_train:], y[n_train:]
    alpha = 0.05
    lam = alpha * np.sum(_c(xtr) ** 2) / dx  # alpha x mean eigenvalue of the front's (train) scatter
    expected = r2_score(yte, Ridge(alpha=lam).fit(xtr, ytr).predict(xte), multioutput="variance_weighted")
    out = F.linear_regression(xtr, ytr, alpha, X_test=xte, Y_test=yte, details=True)
    assert out.score == pytest.approx(expected, rel=1e-8)
    assert out.details["ridge_lambda"] == pytest.approx(lam, rel=1e-12)
    rows = {"train": np.arange(n_train), "test": np.arange(n_train, len(x))}
    assert F.linear_regression(x, y, alpha, split=rows) == pytest.approx(expected, rel=1e-8)
    # a grid's node form: the front's factorisation, fitted to any end, is the same map
    from similarity_plugins.measures.regression import linear_regression_from_front, ridge_front

    front = ridge_front(xtr, alpha)
    assert linear_regression_from_front(front, ytr, xte, yte) == pytest.approx(expected, rel=1e-10)
    with pytest.raises(ValueError, match="train rows"):
        linear_regression_from_front(front, ytr[:-1], xte, yte)
    with pytest.raises(ValueError, match="alpha must be a positive"):
        ridge_front(xtr, -1.0)


def test_linear_regression_default_split_is_seeded():
    x, y = _data(n=50)
    a = F.linear_regression(x, y, details=True)
    assert a.details["split"] == "random 40/10 rows (seed 0)"
    assert F.linear_regression(x, y) == a.score
    assert F.linear_regression(x, y, seed=1) != a.score


@pytest.mark.parametrize("k", [1, 5, 10])
def test_mutual_knn_matches_huh_et_al(k):
    x, y = _data(n=60)
    assert F.mutual_knn(x, y, topk=k) == pytest.approx(ref_mutual_knn(x, y, k), abs=1e-12)


def test_mutual_knn_shares_tied_places_equally():
    """Sample 0's neighbours 1 and 2 tie in X (one direction): each counts 1/2; sample 3 ties with all three in X
    (1/3 each) and with 0 and 2 in Y (1/2 each). By hand: (1/2 + 0 + 1 + 1/3) / 4 = 11/24."""
    x = np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 2.0], [-1.0, -1.0]])
    y = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [-1.0, -1.0]])
    out = F.mutual_knn(x, y, topk=1, details=True)
    assert out.details["tied_rows"] == 3
    assert out.score == pytest.approx(11 / 24, abs=1e-15)


# --------------------------------------------------------------------------- conventions of the functional form
def test_functions_return_floats_and_measured_with_details():
    x, y = _data()
    for fn in (F.procrustes, F.cca, F.svcca, F.pwcca, F.rsa, F.linear_regression, F.mutual_knn):
        plain = fn(x, y)
        rich = fn(x, y, details=True)
        assert type(plain) is float and isinstance(rich, Measured)
        assert rich.score == plain and float(rich) == plain and isinstance(rich.details, dict)


def test_torch_float32_tensors_give_the_numpy_float64_result_and_are_not_changed():
    x, y = _data()
    tx, ty = torch.tensor(x, dtype=torch.float32), torch.tensor(y, dtype=torch.float32)
    before = tx.clone(), ty.clone()
    x32, y32 = tx.numpy().astype(np.float64), ty.numpy().astype(np.float64)
    for fn in (F.procrustes, F.cca, F.svcca, F.pwcca, F.rsa, F.linear_regression, F.mutual_knn):
        assert fn(tx, ty) == pytest.approx(fn(x32, y32), rel=1e-12, abs=1e-12)
    assert torch.equal(tx, before[0]) and torch.equal(ty, before[1])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_tensors_are_measured_on_the_gpu_with_the_cpu_result():
    x, y = _data(n=300, dx=20, dy=16)
    tx, ty = torch.tensor(x, device="cuda"), torch.tensor(y, device="cuda")
    for fn in (F.procrustes, F.cca, F.svcca, F.pwcca, F.rsa, F.linear_regression, F.mutual_knn):
        assert fn(tx, ty) == pytest.approx(fn(x, y), rel=1e-9, abs=1e-12)


def test_higher_rank_inputs_are_flattened_after_the_sample_axis():
    x, y = _data(n=60, dx=6, dy=4)
    assert F.procrustes(x.reshape(60, 2, 3), y.reshape(60, 2, 2)) == pytest.approx(F.procrustes(x, y), rel=1e-12)


# --------------------------------------------------------------------------- per-node parts (grids)
@pytest.mark.parametrize("measure", ["procrustes", "cca", "svcca", "pwcca", "rsa", "mutual_knn"])
def test_node_forms_equal_the_measure(measure):
    from similarity_plugins import measures
    from similarity_plugins.measures.nodes import NODE_FORMS

    rng = np.random.default_rng(3)
    x = rng.standard_normal((60, 7))
    y = np.tanh(x @ rng.standard_normal((7, 30))) + 0.1 * rng.standard_normal((60, 30))
    kw = {"svcca": {"variance": 0.9, "dims": None}, "rsa": {"rdm": "correlation", "compare": "spearman"},
          "mutual_knn": {"topk": 5}}.get(measure, {})
    form = NODE_FORMS[measure]
    got = form.combine(form.build(torch.from_numpy(x), "front", kw), form.build(torch.from_numpy(y), "end", kw), kw)
    want = getattr(measures, measure)(x, y, **kw, details=True)
    assert got.score == pytest.approx(want.score, abs=1e-12)
    assert got.details.keys() == want.details.keys()


@pytest.mark.parametrize("measure", ["procrustes", "cca", "svcca", "pwcca", "rsa", "mutual_knn"])
def test_node_forms_refuse_parts_of_different_inputs(measure):
    from similarity_plugins.measures.nodes import NODE_FORMS

    rng = np.random.default_rng(4)
    kw = {"svcca": {"variance": 0.9, "dims": None}, "rsa": {"rdm": "correlation", "compare": "spearman"},
          "mutual_knn": {"topk": 5}}.get(measure, {})
    form = NODE_FORMS[measure]
    a, b = form.build(rng.standard_normal((60, 7)), "front", kw), form.build(rng.standard_normal((50, 9)), "end", kw)
    with pytest.raises(ValueError, match="samples|same n inputs|differ in size"):
        form.combine(a, b, kw)
