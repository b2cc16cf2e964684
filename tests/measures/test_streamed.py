"""Measures streamed block by block equal the in-memory measures; memory stays bounded."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from similarity_plugins import functional as F
from similarity_plugins.store.store import Store
from tests.helpers.big_store import PEAK_GROWTH


def _pair(n: int = 300, dx: int = 20, dy: int = 12, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, dx)).astype(np.float32)
    y = (x[:, :dy] @ rng.standard_normal((dy, dy)) + 0.5 * rng.standard_normal((n, dy)) + 3.0).astype(np.float32)
    return x, y


@pytest.mark.parametrize("measure, reference", [
    ("cka-linear", lambda x, y: F.cka(x, y, "linear")),
    ("cka-debiased", lambda x, y: F.cka(x, y, "linear", debiased=True)),
    ("procrustes", F.procrustes),
    ("cca", F.cca),
])
def test_streamed_equals_in_memory(tmp_path, measure, reference):
    x, y = _pair()
    want = float(reference(x, y))
    # blocks of 37 rows: the sums in another order than the whole-array path; float64 rounding only
    assert F.streamed(x, y, measure, rows=37) == pytest.approx(want, abs=1e-10)
    store = Store.create(tmp_path)
    store.put("a", "l", (x[i:i + 64] for i in range(0, 300, 64)))
    store.put("b", "l", (y[i:i + 100] for i in range(0, 300, 100)))  # other chunk boundaries than a
    assert F.streamed(store.load("a", "l"), store.load("b", "l"), measure, rows=50) == pytest.approx(want, abs=1e-10)


@pytest.mark.parametrize("measure", ["rsa", "mutual-knn", "cknna", "cka-rbf"])
def test_nxn_measures_warn_over_the_budget_and_still_run(measure):
    x, y = _pair(n=60)
    assert F.nxn_bytes(60, measure) == (3 if measure == "cka-rbf" else 2) * 8 * 60**2
    with pytest.warns(F.MemoryBudgetWarning, match="over the memory budget"):
        value = F.streamed(x, y, measure, memory_budget=1000)
    want = {"rsa": F.rsa, "mutual-knn": F.mutual_knn, "cknna": F.cknna, "cka-rbf": lambda a, b: F.cka(a, b, "rbf")}
    assert value == pytest.approx(float(want[measure](x, y)), abs=1e-12)


def test_streamed_refuses_what_it_cannot_do():
    x, y = _pair()
    with pytest.raises(ValueError, match="unknown measure"):
        F.streamed(x, y, "ckaa")
    with pytest.raises(ValueError, match="same samples"):
        F.streamed(x, y[:10])
    with pytest.raises(ValueError, match="rows must be"):
        F.streamed(x, y, rows=0)


OUT_OF_CORE = PEAK_GROWTH + textwrap.dedent("""
    import sys
    from similarity_plugins.store.store import Store
    from similarity_plugins import functional as F

    store = Store(sys.argv[1])
    x, y = store.load("a", "l"), store.load("b", "l")
    growth = peak_growth()
    value = F.streamed(x, y, "cka-linear", rows=8192)
    print(value, growth())
""")


@pytest.mark.slow
def test_out_of_core_linear_cka_in_bounded_memory(big_store):
    folder, ref = big_store  # 2 x 200,000 x 512 float32: 800 MB on disk, written chunk by chunk
    done = subprocess.run([sys.executable, "-c", OUT_OF_CORE, str(folder)], capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    value, growth = done.stdout.split()
    assert float(value) == pytest.approx(ref, abs=1e-9)  # float64 sums in another order
    print(f"streamed linear CKA: peak RSS grew by {int(growth) / 2**20:.0f} MiB")
    assert int(growth) < 450 * 2**20, f"peak RSS grew by {int(growth) / 2**20:.0f} MiB"


def test_streamed_regression_equals_score_across_blocks_and_from_the_store(tmp_path):
    import similarity_plugins as sp

    x, y = _pair(n=301)
    want = sp.score(x, y, "linear-regression").results[0].score  # score's seeded 80/20 split of the rows
    for rows in (37, 301, 1000):  # blocks that split the seeded train/test rows anywhere, one block, past the end
        assert F.streamed(x, y, "linear-regression", rows=rows) == pytest.approx(want, abs=1e-10)
    store = Store.create(tmp_path)
    store.put("a", "l", (x[i:i + 64] for i in range(0, 301, 64)))
    store.put("b", "l", (y[i:i + 100] for i in range(0, 301, 100)))
    assert F.streamed(store.load("a", "l"), store.load("b", "l"), "linear-regression", rows=50) == pytest.approx(
        want, abs=1e-10)
    wide = np.random.default_rng(1).standard_normal((20, 30))
    with pytest.raises(ValueError, match="dx <= n_train"):
        F.streamed(wide, wide[:, :5], "linear-regression")


def test_streamed_permutation_tests_are_refused_naming_why():
    x, y = _pair(n=50)
    with pytest.raises(ValueError, match="full pass over both arrays per permutation"):
        F.streamed(x, y, "cka-linear", permutations=99)


def _refused(fn) -> str:
    try:
        fn()
    except ValueError as exc:
        return str(exc)
    return "accepted"


@pytest.mark.parametrize("case", ["two samples", "three samples", "constant x", "constant y", "nan in x", "inf in y"])
@pytest.mark.parametrize("measure, in_memory", [
    ("cka-linear", lambda x, y: F.cka(x, y, "linear")),
    ("cka-debiased", lambda x, y: F.cka(x, y, "linear", debiased=True)),
    ("procrustes", F.procrustes), ("cca", F.cca), ("svcca", F.svcca), ("pwcca", F.pwcca),
])
def test_streamed_refuses_what_the_in_memory_measure_refuses_with_its_message(measure, in_memory, case):
    rng = np.random.default_rng(0)
    n = {"two samples": 2, "three samples": 3}.get(case, 20)
    x, y = rng.standard_normal((n, 4)), rng.standard_normal((n, 3))
    if case == "constant x":
        x[:] = 1.5
    if case == "constant y":
        y[:] = -2.0
    if case == "nan in x":
        x[7, 1] = np.nan
    if case == "inf in y":
        y[3, 2] = np.inf
    want = _refused(lambda: in_memory(x, y))
    assert _refused(lambda: F.streamed(x, y, measure, rows=6)) == want


def test_streamed_takes_tensors_that_require_grad_and_stays_with_score_on_refusals():
    import similarity_plugins as sp

    torch = pytest.importorskip("torch")
    x = torch.randn(40, 5, requires_grad=True)
    y = x.detach() @ torch.randn(5, 3) + 0.1 * torch.randn(40, 3)
    for measure in ("cka-linear", "procrustes", "cca", "rsa", "linear-regression"):
        want = sp.score(x.detach(), y, measure).results[0].score
        assert F.streamed(x, y, measure, rows=7) == pytest.approx(want, abs=1e-9), measure
    assert x.grad is None
    tiny = np.random.default_rng(1).standard_normal((2, 3))
    assert "at least 2 samples but got n=1" in _refused(lambda: F.streamed(tiny, tiny, "linear-regression"))
    assert "at least 2 samples but got n=1" in sp.score(tiny, tiny, "linear-regression").results[0].error
