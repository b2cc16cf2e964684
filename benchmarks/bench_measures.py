"""The representational measures' speed: ours vs the float64 floor of each one's own maths (and rsatoolbox for RSA).

Run from the repository root: ``python -m pytest benchmarks/bench_measures.py --benchmark-only`` (autosaved to
``.benchmarks/``); on a shared machine prefix ``OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1``:
single-threaded rounds are steady where multi-threaded ones swing with the other jobs (docs/metrics.md, "Speed").
One group per measure; ``ours`` is the public function on float32 (N, D) inputs (so it
includes the float64 copy, the checks and the centring); the floor is the bare float64 maths on inputs
already centred and in float64, timed twice: with NumPy (OpenBLAS here) and with torch (MKL here), since
either library can be the faster one for a given kernel. ``<measure>_ours_over_floor`` is ours over the faster
floor, both by their fastest round (the least disturbed by other processes on a shared machine), and
``<measure>_ours_over_floor_median`` the same by medians; both are stored in ``extra_info`` of all three and
printed at the end, as is ``rsa_rsatoolbox_over_ours`` (fastest rounds). Target: each within 3x of its floor.

Groups (N = 8000, D = 512 unless said; X, Y float32, Y a noisy non-linear map of X):
  * procrustes  floor: one GEMM ``Xc^T Yc`` and the singular values of that D x D matrix
  * cca, svcca, pwcca  floor: thin QR of Xc and of Yc, one GEMM ``Qx^T Qy``, its singular values
  * linear-regression  (train N, test N) floor: ``Xc^T [Xc | Yc]`` (one GEMM), a Cholesky solve, ``Xt W``
  * mutual-knn  floor: the two N x N similarity GEMMs ``Xn Xn^T``, ``Yn Yn^T``
  * rsa  (N = 2000) floor: the two N x N Gram GEMMs and a sort of each upper triangle (Spearman's ranks);
    rsatoolbox (when installed): ``calc_rdm(method="correlation")`` of both and ``compare(method="spearman")``
"""

from __future__ import annotations

import numpy as np
import pytest
import ratios
import scipy.linalg
import torch

from similarity_plugins import functional as F

N, D, N_RSA = 8000, 512, 2000
_ROUNDS = {"rounds": 4, "iterations": 1, "warmup_rounds": 1}
MEASURES = ["procrustes", "cca", "svcca", "pwcca", "linear-regression", "mutual-knn", "rsa"]
_VALUES: dict[str, float] = {}


@pytest.fixture(scope="module")
def data() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    w = rng.standard_normal((D, D), dtype=np.float32) / np.float32(np.sqrt(D))

    def pair(n):
        x = rng.standard_normal((n, D), dtype=np.float32)
        y = np.tanh(x @ w) + np.float32(0.5) * rng.standard_normal((n, D), dtype=np.float32)
        return x, y.astype(np.float32)

    (x, y), (xt, yt) = pair(N), pair(N)
    return {"x": x, "y": y, "x_test": xt, "y_test": yt}


@pytest.fixture(scope="module", autouse=True)
def _report_ratios(request):
    yield
    lines = []
    for name in MEASURES:
        for key in (f"{name}_ours_over_floor", f"{name}_ours_over_floor_median", "rsa_rsatoolbox_over_ours"):
            run = ratios.RUNS.get(f"{name}:ours")
            if run is not None and key in run.extra_info and key.startswith(name):
                lines.append(f"{key:42s} = {run.extra_info[key]:.2f}x")
    ratios.print_lines(request, "bench_measures", lines)


def _fastest(name: str) -> float:
    return float(ratios.RUNS[name].stats.stats.min)


def _record(measure: str, role: str, benchmark) -> None:
    """Keep the run; once ours and a floor exist, store ours / the faster floor (fastest rounds and medians)."""
    ratios.record(f"{measure}:{role}", benchmark)
    floors = [f"{measure}:floor-{lib}" for lib in ("numpy", "torch") if f"{measure}:floor-{lib}" in ratios.RUNS]
    if f"{measure}:ours" in ratios.RUNS and floors:
        best = min(floors, key=_fastest)
        info = {f"{measure}_ours_over_floor": round(_fastest(f"{measure}:ours") / _fastest(best), 3),
                f"{measure}_ours_over_floor_median": round(ratios.median_seconds(f"{measure}:ours")
                                                           / min(ratios.median_seconds(f) for f in floors), 3),
                "floor": best.split(":")[1]}
        for name in (f"{measure}:ours", *floors):
            ratios.RUNS[name].extra_info.update(info)
    if measure == "rsa" and "rsa:rsatoolbox" in ratios.RUNS and "rsa:ours" in ratios.RUNS:
        for name in ("rsa:rsatoolbox", "rsa:ours"):
            ratios.RUNS[name].extra_info["rsa_rsatoolbox_over_ours"] = round(_fastest("rsa:rsatoolbox")
                                                                             / _fastest("rsa:ours"), 3)


def _centred64(a: np.ndarray) -> np.ndarray:
    a = a.astype(np.float64)
    return a - a.mean(axis=0)


# --------------------------------------------------------------------------- floors (bare float64 maths)
# Each takes float64 arrays (NumPy) or tensors (torch) and uses that library's kernels.
def _lib(a):
    return torch if isinstance(a, torch.Tensor) else np


def _svdvals(m):
    return torch.linalg.svdvals(m) if isinstance(m, torch.Tensor) else np.linalg.svd(m, compute_uv=False)


def floor_procrustes(xc, yc):
    return float(_svdvals(xc.T @ yc).sum())


def floor_cca(xc, yc):
    qx, qy = _lib(xc).linalg.qr(xc)[0], _lib(xc).linalg.qr(yc)[0]
    return float(_svdvals(qx.T @ qy).mean())


def floor_regression(xc, yc, xt):
    lib, d = _lib(xc), xc.shape[1]
    g = xc.T @ lib.hstack([xc, yc])
    if lib is torch:
        return xt @ torch.cholesky_solve(g[:, d:], torch.linalg.cholesky(g[:, :d] + torch.eye(d, dtype=g.dtype)))
    return xt @ scipy.linalg.cho_solve(scipy.linalg.cho_factor(g[:, :d] + np.eye(d)), g[:, d:])


def floor_knn(xn, yn):
    return (xn @ xn.T)[0, 0] + (yn @ yn.T)[0, 0]


def floor_rsa(x, y):
    n = x.shape[0]
    if isinstance(x, torch.Tensor):
        mask = torch.ones(n, n, dtype=torch.bool).triu_(1)
        return torch.sort((x @ x.T)[mask])[0][0] + torch.sort((y @ y.T)[mask])[0][0]
    iu = np.triu_indices(n, 1)
    return np.sort((x @ x.T)[iu])[0] + np.sort((y @ y.T)[iu])[0]


FLOOR_LIBS = ["numpy", "torch"]


def _as_lib(lib: str, *arrays):
    return arrays if lib == "numpy" else tuple(torch.from_numpy(a) for a in arrays)


def _floor(benchmark, measure: str, lib: str, fn, *arrays) -> None:
    benchmark.pedantic(fn, args=_as_lib(lib, *arrays), **_ROUNDS)
    _record(measure, f"floor-{lib}", benchmark)


# --------------------------------------------------------------------------- paired cases
def _ours(benchmark, measure, fn, *args, **kwargs):
    value = benchmark.pedantic(fn, args=args, kwargs=kwargs, **_ROUNDS)
    _record(measure, "ours", benchmark)
    _VALUES[measure] = value
    return value


@pytest.mark.benchmark(group="procrustes-8000x512")
def test_procrustes_ours(benchmark, data):
    assert 0.0 < _ours(benchmark, "procrustes", F.procrustes, data["x"], data["y"]) < 1.0


@pytest.mark.parametrize("lib", FLOOR_LIBS)
@pytest.mark.benchmark(group="procrustes-8000x512")
def test_procrustes_floor(benchmark, data, lib):
    _floor(benchmark, "procrustes", lib, floor_procrustes, _centred64(data["x"]), _centred64(data["y"]))


@pytest.mark.parametrize("measure", ["cca", "svcca", "pwcca"])
def test_cca_family_ours(benchmark, data, measure):
    benchmark.group = f"{measure}-8000x512"
    assert 0.0 < _ours(benchmark, measure, getattr(F, measure), data["x"], data["y"]) < 1.0


@pytest.mark.parametrize("lib", FLOOR_LIBS)
@pytest.mark.parametrize("measure", ["cca", "svcca", "pwcca"])
def test_cca_family_floor(benchmark, data, measure, lib):
    benchmark.group = f"{measure}-8000x512"
    _floor(benchmark, measure, lib, floor_cca, _centred64(data["x"]), _centred64(data["y"]))


@pytest.mark.benchmark(group="linear-regression-8000x512")
def test_linear_regression_ours(benchmark, data):
    value = _ours(benchmark, "linear-regression", F.linear_regression, data["x"], data["y"],
                  X_test=data["x_test"], Y_test=data["y_test"])
    assert 0.0 < value < 1.0


@pytest.mark.parametrize("lib", FLOOR_LIBS)
@pytest.mark.benchmark(group="linear-regression-8000x512")
def test_linear_regression_floor(benchmark, data, lib):
    args = (_centred64(data["x"]), _centred64(data["y"]), _centred64(data["x_test"]))
    _floor(benchmark, "linear-regression", lib, floor_regression, *args)


@pytest.mark.benchmark(group="mutual-knn-8000x512")
def test_mutual_knn_ours(benchmark, data):
    assert 0.0 < _ours(benchmark, "mutual-knn", F.mutual_knn, data["x"], data["y"]) < 1.0


@pytest.mark.parametrize("lib", FLOOR_LIBS)
@pytest.mark.benchmark(group="mutual-knn-8000x512")
def test_mutual_knn_floor(benchmark, data, lib):
    xn, yn = (a.astype(np.float64) / np.linalg.norm(a, axis=1, keepdims=True) for a in (data["x"], data["y"]))
    _floor(benchmark, "mutual-knn", lib, floor_knn, xn, yn)


@pytest.mark.benchmark(group="rsa-2000x512")
def test_rsa_ours(benchmark, data):
    _ours(benchmark, "rsa", F.rsa, data["x"][:N_RSA], data["y"][:N_RSA])


@pytest.mark.parametrize("lib", FLOOR_LIBS)
@pytest.mark.benchmark(group="rsa-2000x512")
def test_rsa_floor(benchmark, data, lib):
    _floor(benchmark, "rsa", lib, floor_rsa, _centred64(data["x"][:N_RSA]), _centred64(data["y"][:N_RSA]))


@pytest.mark.benchmark(group="rsa-2000x512")
def test_rsa_rsatoolbox(benchmark, data):
    rsatoolbox = pytest.importorskip("rsatoolbox")

    def run(x, y):
        rx = rsatoolbox.rdm.calc_rdm(rsatoolbox.data.Dataset(x), method="correlation")
        ry = rsatoolbox.rdm.calc_rdm(rsatoolbox.data.Dataset(y), method="correlation")
        return rsatoolbox.rdm.compare(rx, ry, method="spearman").item()

    x64, y64 = data["x"][:N_RSA].astype(np.float64), data["y"][:N_RSA].astype(np.float64)
    value = benchmark.pedantic(run, args=(x64, y64), rounds=2, iterations=1, warmup_rounds=0)
    _record("rsa", "rsatoolbox", benchmark)
    if "rsa" in _VALUES:
        assert value == pytest.approx(_VALUES["rsa"], rel=1e-6)
