"""Grids from a store and score on store entries stream the measures that reduce to sums over samples."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import similarity_plugins as sp
from similarity_plugins import functional as F
from tests.helpers.big_store import PEAK_GROWTH

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


GRID_OUT_OF_CORE = PEAK_GROWTH + textwrap.dedent("""
    import sys
    import similarity_plugins as sp

    growth = peak_growth()
    grid = sp.compare_grid(metrics=["cka-linear"], pairs=[(("a", "l"), ("b", "l"))], store=sys.argv[1])
    print(grid.report.results[0].score, growth(), grid.report.results[0].details["streamed"])
""")


@pytest.mark.slow  # reads 2 x 200,000 x 512 float32 entries (800 MB on disk, the session's big_store)
def test_a_grid_from_the_store_holds_bounded_memory(big_store):
    folder, ref = big_store
    done = subprocess.run([sys.executable, "-c", GRID_OUT_OF_CORE, str(folder)], capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    value, growth, streamed = done.stdout.split()
    assert streamed == "True" and float(value) == pytest.approx(ref, abs=1e-8)
    print(f"grid from the store, linear CKA of 200,000 x 512: peak RSS grew by {int(growth) / 2**20:.0f} MiB")
    assert int(growth) < 450 * 2**20, f"peak RSS grew by {int(growth) / 2**20:.0f} MiB"
