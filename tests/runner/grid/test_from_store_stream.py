"""Grids from a store and score on store entries stream the measures that reduce to sums over samples."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import similarity_plugins as sp
from similarity_plugins import functional as F

STREAMED = ["cka-linear", "cka-debiased", "procrustes", "cca", "svcca", "pwcca"]


def _store(tmp_path, n: int = 160):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((n, 7)).astype(np.float32)
    y = (x[:, :5] @ rng.standard_normal((5, 5)) + 0.4 * rng.standard_normal((n, 5)) + 2.0).astype(np.float32)
    store = sp.Store.create(tmp_path)
    store.put("a", "l", (x[i:i + 50] for i in range(0, n, 50)))
    store.put("b", "l", (y[i:i + 64] for i in range(0, n, 64)))
    return store, x, y


def test_a_grid_from_the_store_streams_and_equals_the_measures_in_memory(tmp_path):
    store, x, y = _store(tmp_path)
    grid = sp.compare_grid(metrics=STREAMED, pairs="across", store=tmp_path)
    for r in grid.report.results:
        if r.details["front_model"] != "a":
            continue
        assert r.details["streamed"] is True and r.details["n"] == 160, r.metric
        want = sp.score(x, y, r.metric).results[0].score
        assert r.score == pytest.approx(want, abs=1e-10), r.metric
    report = sp.score(store.load("a", "l"), store.load("b", "l"), [*STREAMED, "linear-regression", "rsa"])
    for r in report.results:
        want = sp.score(x, y, r.metric).results[0].score
        assert r.score == pytest.approx(want, abs=1e-10), r.metric
        assert r.details.get("streamed") is (None if r.metric == "rsa" else True), r.metric
    limited = sp.compare_grid(metrics=["cka-linear"], pairs=[(("a", "l"), ("b", "l"))], store=tmp_path,
                              options={"max_samples": 100})
    assert limited.report.results[0].score == pytest.approx(F.cka(x[:100], y[:100]), abs=1e-10)


def test_permutation_tests_and_n_x_n_measures_read_the_rows_whole(tmp_path):
    store, x, y = _store(tmp_path, n=60)
    grid = sp.compare_grid(metrics=["cka-linear"], pairs=[(("a", "l"), ("b", "l"))], store=tmp_path,
                           options={"permutations": 9})
    row = grid.report.results[0]
    assert "streamed" not in row.details and 0 < row.details["p_value"] <= 1
    assert row.score == pytest.approx(F.cka(x, y), abs=1e-12)
    for metric, want in (("rsa", F.rsa), ("mutual-knn", F.mutual_knn), ("cknna", F.cknna)):
        with pytest.warns(sp.MemoryBudgetWarning, match=f"{metric} on n = 60 samples needs about"):
            grid = sp.compare_grid(metrics=[metric], pairs=[(("a", "l"), ("b", "l"))], store=tmp_path,
                                   cache_bytes=10_000)
        assert grid.report.results[0].score == pytest.approx(float(want(x, y)), abs=1e-12), metric


GRID_OUT_OF_CORE = textwrap.dedent("""
    import sys
    import numpy as np
    import similarity_plugins as sp

    def status(field: str) -> int:
        with open("/proc/self/status") as fh:
            return next(int(line.split()[1]) * 1024 for line in fh if line.startswith(field))

    with open("/proc/self/clear_refs", "w") as fh:  # this process's own peak from now (VmHWM)
        fh.write("5")
    start = status("VmRSS:")
    grid = sp.compare_grid(metrics=["cka-linear"], pairs=[(("a", "l"), ("b", "l"))], store=sys.argv[1])
    growth = status("VmHWM:") - start
    store = sp.Store(sys.argv[1])
    x, y = store.load("a", "l"), store.load("b", "l")
    n, d = x.shape
    sxx, syy, sxy, sx, sy = np.zeros((d, d)), np.zeros((d, d)), np.zeros((d, d)), np.zeros(d), np.zeros(d)
    for (_, xb), (_, yb) in zip(x.chunks(), y.chunks()):  # the float64 reference, chunk by chunk
        xb, yb = np.asarray(xb, np.float64), np.asarray(yb, np.float64)
        sx += xb.sum(0); sy += yb.sum(0); sxx += xb.T @ xb; syy += yb.T @ yb; sxy += xb.T @ yb
    cxx, cyy, cxy = sxx - np.outer(sx, sx) / n, syy - np.outer(sy, sy) / n, sxy - np.outer(sx, sy) / n
    ref = (cxy**2).sum() / np.sqrt((cxx**2).sum() * (cyy**2).sum())
    print(grid.report.results[0].score, ref, growth, grid.report.results[0].details["streamed"])
""")


def _chunks(seed: int, n: int = 200_000, d: int = 512, block: int = 10_000):
    rng, shared = np.random.default_rng(seed), np.random.default_rng(99)
    for _ in range(0, n, block):
        yield shared.standard_normal((block, d), dtype=np.float32) + rng.standard_normal((block, d), dtype=np.float32)


@pytest.mark.slow  # 2 x 200,000 x 512 float32 entries (800 MB on disk): about a minute
def test_a_grid_from_the_store_holds_bounded_memory(tmp_path):
    store = sp.Store.create(tmp_path)
    store.put("a", "l", _chunks(1))
    store.put("b", "l", _chunks(2))
    done = subprocess.run([sys.executable, "-c", GRID_OUT_OF_CORE, str(tmp_path)], capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    value, ref, growth, streamed = done.stdout.split()
    assert streamed == "True" and float(value) == pytest.approx(float(ref), abs=1e-8)
    print(f"grid from the store, linear CKA of 200,000 x 512: peak RSS grew by {int(growth) / 2**20:.0f} MiB")
    assert int(growth) < 450 * 2**20, f"peak RSS grew by {int(growth) / 2**20:.0f} MiB"
