"""Array-level CKA (similarity_plugins.functional) against the reference of Kornblith et al. 2019."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from similarity_plugins.functional import (
    StreamingLinearCKA,
    center_gram,
    cka,
    cka_from_grams,
    gram_linear,
    gram_rbf,
)


# --------------------------------------------------------------------------- reference
# A straight transcription of the colab code of Kornblith et al. 2019
# (google-research/representation_similarity, "Demo.ipynb"), Gram-matrix form, NumPy float64.
def ref_gram_linear(x):
    return x.dot(x.T)


def ref_gram_rbf(x, threshold=1.0):
    dot_products = x.dot(x.T)
    sq_norms = np.diag(dot_products)
    sq_distances = -2 * dot_products + sq_norms[:, None] + sq_norms[None, :]
    sq_median_distance = np.median(sq_distances)
    return np.exp(-sq_distances / (2 * threshold**2 * sq_median_distance))


def ref_center_gram(gram, unbiased=False):
    if not np.allclose(gram, gram.T):
        raise ValueError("Input must be a symmetric matrix.")
    n = gram.shape[0]
    if not unbiased:  # H K H with H = I - 11'/n
        h = np.eye(n) - np.full((n, n), 1.0 / n)
        return h @ gram @ h
    # Song et al.'s unbiased centring: off-diagonal K - rows/(n-2) - columns/(n-2) + total/((n-1)(n-2)), zero diagonal
    k = gram - np.diag(np.diag(gram))
    rows, total = k.sum(1, keepdims=True), k.sum()
    centred = k - rows / (n - 2) - rows.T / (n - 2) + total / ((n - 1) * (n - 2))
    return centred - np.diag(np.diag(centred))


def ref_cka(gram_x, gram_y, debiased=False):
    gram_x = ref_center_gram(gram_x, unbiased=debiased)
    gram_y = ref_center_gram(gram_y, unbiased=debiased)
    scaled_hsic = gram_x.ravel().dot(gram_y.ravel())
    normalization_x = np.linalg.norm(gram_x)
    normalization_y = np.linalg.norm(gram_y)
    return scaled_hsic / (normalization_x * normalization_y)


def ref(x, y, kernel="linear", debiased=False, threshold=1.0):
    x = np.asarray(x, dtype=np.float64).reshape(len(x), -1)
    y = np.asarray(y, dtype=np.float64).reshape(len(y), -1)
    if kernel == "linear":
        return ref_cka(ref_gram_linear(x), ref_gram_linear(y), debiased)
    return ref_cka(ref_gram_rbf(x, threshold), ref_gram_rbf(y, threshold), debiased)


# --------------------------------------------------------------------------- data
def pair(n, d1, d2, seed=0, offset=0.0, dtype=np.float64):
    """Y depends on X (non-trivial CKA); columns get a non-zero mean to exercise centring."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d1))
    y = np.tanh(x @ rng.standard_normal((d1, d2))) + 0.5 * rng.standard_normal((n, d2))
    x = x + offset + rng.standard_normal(d1)
    y = y - offset + rng.standard_normal(d2)
    return x.astype(dtype), y.astype(dtype)


SHAPES = [(40, 5, 3), (200, 12, 20), (12, 30, 50), (25, 64, 8)]  # n > d and n < d


# --------------------------------------------------------------------------- equality with the reference
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("debiased", [False, True])
@pytest.mark.parametrize("method", ["auto", "feature", "gram"])
def test_linear_matches_reference(shape, debiased, method):
    x, y = pair(*shape, seed=sum(shape))
    expected = ref(x, y, "linear", debiased)
    got = cka(x, y, "linear", debiased, method=method)
    assert isinstance(got, float)
    assert got == pytest.approx(expected, rel=1e-10, abs=1e-12)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("debiased", [False, True])
@pytest.mark.parametrize("threshold", [0.5, 1.0, 2.0])
def test_rbf_matches_reference(shape, debiased, threshold):
    x, y = pair(*shape, seed=sum(shape) + 1)
    expected = ref(x, y, "rbf", debiased, threshold)
    got = cka(x, y, "rbf", debiased, threshold)
    assert got == pytest.approx(expected, rel=1e-10, abs=1e-12)


@pytest.mark.parametrize("offset", [0.0, 3.0, 9.5, 1e4])
@pytest.mark.parametrize("debiased", [False, True])
def test_linear_accurate_with_large_means(offset, debiased):
    """Large column means (centring by algebra, or explicitly past a ratio) stay exact."""
    x, y = pair(300, 16, 12, seed=31)
    x, y = x - x.mean(0), y - y.mean(0)
    expected = ref(x, y, "linear", debiased)  # on centred data the reference itself is accurate
    got = cka(x + offset, y - 2 * offset, "linear", debiased, method="feature")
    assert got == pytest.approx(expected, rel=1e-10)


def test_gram_helpers_match_reference():
    x, y = pair(30, 7, 9, seed=3)
    np.testing.assert_allclose(gram_linear(x), ref_gram_linear(x), rtol=1e-13, atol=1e-12)
    np.testing.assert_allclose(gram_rbf(x, 0.7), ref_gram_rbf(x, 0.7), rtol=1e-12, atol=1e-14)
    k = ref_gram_rbf(x)
    for unbiased in (False, True):
        np.testing.assert_allclose(center_gram(k, unbiased), ref_center_gram(k, unbiased), atol=1e-14)
        kx, ky = ref_gram_linear(x), ref_gram_linear(y)
        assert cka_from_grams(kx, ky, unbiased) == pytest.approx(ref_cka(kx, ky, unbiased), rel=1e-12)
    assert gram_linear(x).dtype == np.float64


def test_values_are_not_trivial():
    """Guards the comparisons above: the reference values span a real range."""
    x, y = pair(40, 5, 3)
    vals = [ref(x, y, k, d) for k in ("linear", "rbf") for d in (False, True)]
    assert all(0.05 < v < 0.95 for v in vals)
    z = np.random.default_rng(9).standard_normal((40, 3))
    assert cka(x, z) < cka(x, y)


def test_against_ckatorch():
    ckatorch = pytest.importorskip("ckatorch")
    x, y = pair(41, 6, 4, seed=11)  # odd n: torch.median (lower median) == np.median
    tx, ty = torch.from_numpy(x), torch.from_numpy(y)
    for kernel in ("linear", "rbf"):
        for debiased in (False, True):
            theirs = float(ckatorch.cka_base(tx, ty, kernel=kernel, unbiased=debiased))
            assert cka(x, y, kernel, debiased) == pytest.approx(theirs, rel=1e-9)


# --------------------------------------------------------------------------- invariances
@pytest.mark.parametrize("debiased", [False, True])
def test_linear_invariances(debiased):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((60, 8)) + 2.0
    q, _ = np.linalg.qr(rng.standard_normal((8, 8)))
    assert cka(x, x, debiased=debiased) == pytest.approx(1.0, abs=1e-12)
    assert cka(x, x @ q, debiased=debiased) == pytest.approx(1.0, abs=1e-12)
    assert cka(x, 3.7 * x, debiased=debiased) == pytest.approx(1.0, abs=1e-12)
    assert cka(x, -0.01 * x @ q + 5.0, debiased=debiased) == pytest.approx(1.0, abs=1e-12)
    y = rng.standard_normal((60, 5))
    base = cka(x, y, debiased=debiased)
    assert cka(x @ q * 4.0, y, debiased=debiased) == pytest.approx(base, rel=1e-12)


def test_rbf_self_similarity_and_invariance():
    rng = np.random.default_rng(6)
    x = rng.standard_normal((50, 6))
    q, _ = np.linalg.qr(rng.standard_normal((6, 6)))
    assert cka(x, x, "rbf") == pytest.approx(1.0, abs=1e-12)
    y = rng.standard_normal((50, 3))
    assert cka(2.5 * x @ q, y, "rbf") == pytest.approx(cka(x, y, "rbf"), rel=1e-10)


def test_exact_under_rescaling_overflow_and_underflow():
    x, y = pair(50, 6, 4, seed=2)
    base = cka(x, y)
    assert cka(x * 1e-170, y) == pytest.approx(base, rel=1e-12)
    assert cka(x * 1e150, y * 1e-150) == pytest.approx(base, rel=1e-12)
    assert cka(x * 1e-170, y, debiased=True) == pytest.approx(cka(x, y, debiased=True), rel=1e-12)


# --------------------------------------------------------------------------- input types
def test_torch_and_numpy_agree():
    x, y = pair(64, 10, 7, seed=4, dtype=np.float32)
    tx = torch.from_numpy(x).requires_grad_(True)
    ty = torch.from_numpy(y)
    for kernel in ("linear", "rbf"):
        for debiased in (False, True):
            assert cka(tx, ty, kernel, debiased) == cka(x, y, kernel, debiased)
    assert tx.grad is None


def test_higher_rank_is_flattened():
    rng = np.random.default_rng(8)
    x4 = rng.standard_normal((30, 3, 2, 2))
    y3 = rng.standard_normal((30, 4, 5))
    expected = ref(x4.reshape(30, -1), y3.reshape(30, -1))
    assert cka(x4, y3) == pytest.approx(expected, rel=1e-10)
    assert cka(torch.from_numpy(x4), torch.from_numpy(y3)) == pytest.approx(expected, rel=1e-10)
    v = rng.standard_normal(30)  # 1-D: one feature
    assert cka(v, y3) == pytest.approx(ref(v[:, None], y3.reshape(30, -1)), rel=1e-10)


def test_float32_is_computed_in_float64():
    x, y = pair(300, 40, 30, seed=12, offset=10.0, dtype=np.float32)
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    for debiased in (False, True):
        for method in ("feature", "gram"):
            a = cka(x, y, debiased=debiased, method=method)
            b = cka(x64, y64, debiased=debiased, method=method)
            assert a == pytest.approx(b, rel=1e-12, abs=1e-12)
    h = torch.from_numpy(x).to(torch.bfloat16)
    assert cka(h, y) == pytest.approx(cka(h.to(torch.float64).numpy(), y64), rel=1e-12)


@pytest.mark.gpu
def test_cuda_tensor_input():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    x, y = pair(64, 10, 7, seed=4, dtype=np.float32)
    gx, gy = torch.from_numpy(x).cuda(), torch.from_numpy(y).cuda()
    assert cka(gx, gy) == cka(x, y)
    s = StreamingLinearCKA()
    s.update(gx, gy)
    assert s.compute() == pytest.approx(cka(x, y), rel=1e-10)


# --------------------------------------------------------------------------- streaming
def _stream(x, y, sizes, debiased, to_torch=False, **kw):
    s = StreamingLinearCKA(debiased=debiased, **kw)
    i = 0
    k = 0
    while i < len(x):
        b = sizes[k % len(sizes)]
        xb, yb = x[i : i + b], y[i : i + b]
        if to_torch:
            xb, yb = torch.from_numpy(xb), torch.from_numpy(yb)
        s.update(xb, yb)
        i += b
        k += 1
    return s


@pytest.mark.parametrize("debiased", [False, True])
@pytest.mark.parametrize("offset", [0.0, 1e3])
def test_streaming_equals_full_moments(debiased, offset):
    x, y = pair(503, 9, 14, seed=21, offset=offset)
    s = _stream(x, y, [37, 1, 100, 5, 64], debiased)
    assert s.mode == "moments"
    assert s.n == 503
    full = cka(x, y, debiased=debiased)
    assert s.compute() == pytest.approx(full, rel=1e-10, abs=1e-12)
    assert s.compute() == pytest.approx(ref(x, y, "linear", debiased), rel=1e-10)
    # state is O(d^2), independent of n
    d1, d2 = 9, 14
    assert s.state_nbytes == 8 * ((d1 + d2) ** 2 + 4 * (d1 + d2) + 5)


@pytest.mark.parametrize("debiased", [False, True])
def test_streaming_with_drifting_batches(debiased):
    """The shift is the first batch's mean; a drifting stream must not lose precision."""
    x, y = pair(600, 8, 6, seed=26)
    drift = np.linspace(0.0, 200.0, 600)[:, None]
    x, y = x + drift, y - 3 * drift
    s = _stream(x, y, [50, 150], debiased)
    xc, yc = x - x.mean(0), y - y.mean(0)
    assert s.compute() == pytest.approx(ref(xc, yc, "linear", debiased), rel=1e-10)


@pytest.mark.parametrize("debiased", [False, True])
def test_streaming_buffered_path(debiased):
    x, y = pair(60, 300, 200, seed=22)  # moments would need ~2.5 MB; 60 samples need ~0.3 MB
    s = _stream(x, y, [7, 13, 1, 20], debiased, to_torch=True)
    assert s.mode == "buffer"
    assert s.compute() == pytest.approx(ref(x, y, "linear", debiased), rel=1e-10)


@pytest.mark.parametrize("debiased", [False, True])
def test_streaming_switches_from_buffer_to_moments(debiased):
    x, y = pair(400, 20, 10, seed=23, offset=3.0, dtype=np.float32)
    s = StreamingLinearCKA(debiased=debiased)
    s.update(x[:5], y[:5])
    assert s.mode == "buffer"
    s.update(x[5:11], y[5:11])
    s.update(x[11:], y[11:])
    assert s.mode == "moments"
    assert s.compute() == pytest.approx(cka(x, y, debiased=debiased), rel=1e-10)


def test_streaming_budget():
    d = 150
    moments = 8 * ((2 * d) ** 2 + 4 * 2 * d + 5)  # what the moments would take (729,640 bytes)
    x, y = pair(200, d, d, seed=24)  # the samples take 8 * 200 * 300 = 480,000 bytes < moments
    s = _stream(x, y, [50], True, max_state_bytes=500_000)
    assert s.mode == "buffer" and s.state_nbytes == 480_000
    assert s.compute() == pytest.approx(cka(x, y, debiased=True), rel=1e-10)
    with pytest.raises(ValueError, match="does not fit in max_state_bytes"):
        _stream(x, y, [50], True, max_state_bytes=300_000)
    x2, y2 = pair(400, d, d, seed=24)  # the buffer outgrows the moments, which do not fit either
    with pytest.raises(ValueError, match="does not fit in max_state_bytes"):
        _stream(x2, y2, [50], True, max_state_bytes=moments - 1)
    s = _stream(x2, y2, [50], True, max_state_bytes=moments)
    assert s.mode == "moments" and s.state_nbytes == moments
    assert s.compute() == pytest.approx(cka(x2, y2, debiased=True), rel=1e-10)


def test_streaming_reset_and_n():
    x, y = pair(100, 4, 4, seed=25)
    s = _stream(x, y, [30], False)
    assert s.n == 100
    s.reset()
    assert s.n == 0 and s.mode == "buffer"
    s.update(x[:50], y[:50])
    s.update(x[50:], y[50:])
    assert s.compute() == pytest.approx(cka(x, y), rel=1e-10)


# --------------------------------------------------------------------------- bad input
def test_error_mismatched_samples():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="X has 100 samples but Y has 99"):
        cka(rng.standard_normal((100, 3)), rng.standard_normal((99, 3)))
    with pytest.raises(ValueError, match="X_batch has 10 samples but Y_batch has 9"):
        StreamingLinearCKA().update(rng.standard_normal((10, 3)), rng.standard_normal((9, 3)))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("kernel", ["linear", "rbf"])
def test_error_nonfinite_names_argument(bad, kernel):
    x, y = pair(20, 3, 3)
    word = "NaN" if np.isnan(bad) else "Inf"
    xb = x.copy()
    xb[4, 1] = bad
    with pytest.raises(ValueError, match=f"X contains {word}"):
        cka(xb, y, kernel)
    yb = y.copy()
    yb[0, 0] = bad
    with pytest.raises(ValueError, match=f"Y contains {word}"):
        cka(x, torch.from_numpy(yb), kernel)
    s = StreamingLinearCKA()
    with pytest.raises(ValueError, match=f"Y_batch contains {word}"):
        s.update(x, yb)
    s.update(x, y)
    s.update(x, y)
    s.update(x, y)
    assert s.mode == "moments"
    with pytest.raises(ValueError, match=f"X_batch contains {word}"):
        s.update(xb, y)


def test_error_empty():
    with pytest.raises(ValueError, match="X is empty"):
        cka(np.zeros((0, 3)), np.zeros((0, 3)))
    with pytest.raises(ValueError, match="Y is empty"):
        cka(np.ones((5, 3)), np.zeros((5, 0)))
    with pytest.raises(ValueError, match="X is empty"):
        cka(torch.zeros(0, 3, 4), torch.zeros(0, 2))
    with pytest.raises(ValueError, match="X_batch is empty"):
        StreamingLinearCKA().update(np.zeros((0, 3)), np.zeros((0, 3)))
    with pytest.raises(ValueError, match="no samples"):
        StreamingLinearCKA().compute()


def test_error_debiased_needs_four_samples():
    x, y = pair(3, 4, 4)
    assert 0.0 <= cka(x, y) <= 1.0 + 1e-12  # biased works with 3 samples
    with pytest.raises(ValueError, match="at least 4 samples"):
        cka(x, y, debiased=True)
    s = StreamingLinearCKA(debiased=True)
    s.update(x, y)
    with pytest.raises(ValueError, match="at least 4 samples"):
        s.compute()


@pytest.mark.parametrize("kernel,method", [("linear", "feature"), ("linear", "gram"), ("rbf", "auto")])
@pytest.mark.parametrize("debiased", [False, True])
def test_error_constant_representation(kernel, method, debiased):
    x, y = pair(30, 4, 4)
    const = np.full((30, 4), 0.1)  # 0.1 is inexact in binary: its mean has rounding error
    with pytest.raises(ValueError, match="X is constant"):
        cka(const, y, kernel, debiased, method=method)
    with pytest.raises(ValueError, match="Y is constant"):
        cka(x, np.zeros((30, 2)), kernel, debiased, method=method)
    s = _stream(const, y, [7], debiased)
    with pytest.raises(ValueError, match="X is constant"):
        s.compute()


def test_nearly_constant_is_not_constant():
    x, y = pair(30, 4, 4)
    near = 0.1 + 1e-9 * x
    assert cka(near, y) == pytest.approx(cka(x, y), rel=1e-6)


def test_error_debiased_degenerate():
    # one outlier row: the off-diagonal Gram is additive, so the U-centred Gram matrix vanishes
    x = np.array([[3.0]] + [[1.0]] * 9)
    y = np.random.default_rng(0).standard_normal((10, 2))
    assert cka(x, y) > 0  # fine with the biased estimator
    for method in ("feature", "gram"):
        with pytest.raises(ValueError, match="degenerate"):
            cka(x, y, debiased=True, method=method)


def test_error_rbf_too_large_for_memory():
    x, y = pair(200, 3, 3)
    with pytest.raises(ValueError, match="StreamingLinearCKA") as err:
        cka(x, y, "rbf", max_gram_bytes=3 * 8 * 200 * 200 - 1)
    assert "cka-linear" in str(err.value) or "kernel='linear'" in str(err.value)
    assert cka(x, y, "rbf", max_gram_bytes=3 * 8 * 200 * 200) == pytest.approx(ref(x, y, "rbf"), rel=1e-10)
    # linear CKA falls back to feature space when the Gram matrices do not fit
    assert cka(x, y, max_gram_bytes=20_000) == pytest.approx(ref(x, y), rel=1e-10)
    with pytest.raises(ValueError, match="reduce the feature dimension"):
        cka(x, y, max_gram_bytes=1000)


def test_error_bad_arguments():
    x, y = pair(20, 3, 3)
    with pytest.raises(ValueError, match="kernel must be"):
        cka(x, y, "poly")
    with pytest.raises(ValueError, match="threshold"):
        cka(x, y, "rbf", threshold=0.0)
    with pytest.raises(ValueError, match="method="):
        cka(x, y, "rbf", method="feature")
    with pytest.raises(ValueError, match="complex"):
        cka(x + 1j, y)
    with pytest.raises(ValueError, match="not symmetric"):
        cka_from_grams(np.arange(16.0).reshape(4, 4), np.eye(4))
    with pytest.raises(ValueError, match="median squared pairwise distance"):
        gram_rbf(np.array([[1.0], [1.0], [1.0], [2.0]]))
    s = StreamingLinearCKA()
    s.update(x, y)
    with pytest.raises(ValueError, match="features but earlier batches"):
        s.update(x[:, :2], y)


# --------------------------------------------------------------------------- per-node Gram matrices (grids)
@pytest.mark.parametrize("shape", SHAPES + [(4, 2, 3), (300, 600, 5)])
@pytest.mark.parametrize("kernel", ["linear", "rbf"])
def test_node_grams_give_both_estimators_from_one_matrix(shape, kernel):
    from similarity_plugins.cka.nodes import cka_from_node_grams, node_gram

    x, y = pair(*shape, seed=sum(shape), offset=3.0)
    a, b = node_gram(x, kernel), node_gram(y, kernel)
    for debiased in (False, True):
        expected = ref(x, y, kernel, debiased)
        assert cka_from_node_grams(a, b, debiased) == pytest.approx(expected, rel=1e-10, abs=1e-12)
        assert cka_from_node_grams(b, a, debiased) == pytest.approx(cka_from_node_grams(a, b, debiased), rel=1e-13)
    n = shape[0]
    assert a.nbytes == 8 * n * n + 4 * 8 * n  # one n x n matrix serves both estimators


def test_node_grams_refuse_a_degenerate_debiased_node_like_cka():
    from similarity_plugins.cka.nodes import cka_from_node_grams, node_gram

    x = np.array([[3.0]] + [[1.0]] * 9)
    y = np.random.default_rng(0).standard_normal((10, 2))
    a, b = node_gram(x), node_gram(y)
    assert cka_from_node_grams(a, b) == pytest.approx(cka(x, y), rel=1e-12)
    with pytest.raises(ValueError, match="degenerate"):
        cka_from_node_grams(a, b, debiased=True)
    with pytest.raises(ValueError, match="at least 4 samples"):
        cka_from_node_grams(node_gram(x[:3]), node_gram(y[:3]), debiased=True)
