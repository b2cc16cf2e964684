"""Layer x layer CKA grids: ours (``compare_grid``) vs torch-cka (``torch_cka.CKA(...).compare(loader)``) vs the floor.

Run from the repository root: ``python -m pytest benchmarks/bench_grid.py --benchmark-only`` (autosaved to
``.benchmarks/``). ``BENCH_GRID_N=1000,2000`` sets the sample counts (default ``1000``); ``-m "not slow"``
skips the six-model zoo. Two threads (torch and NumPy's BLAS on a 2-core machine).

Group ``grid-resnet-N{N}``: torchvision resnet18 (front, rows) against resnet34 (end, columns), random weights
(``weights=None``), inputs ``rand(N, 3, 32, 32)``, every block output (``layer1.0`` ... ``layer4.1`` of resnet18,
``layer1.0`` ... ``layer4.2`` of resnet34): 8 x 16 cells.
  * ours-both       ``compare_grid`` with ``cka-linear`` and ``cka-debiased`` (both matrices)
  * ours-debiased   ``compare_grid`` with ``cka-debiased`` only (the estimate torch-cka computes given one batch)
  * floor           one forward pass of each model capturing every layer (batches of 256, as the grid), a float64
                    centred Gram matrix per layer (one plain ``xc @ xc.T``), both centrings, and the 2 x 128 products
  * torch-cka-1     ``torch_cka.CKA(...).compare(loader)`` with one batch of all N samples (unbiased HSIC, float32)
  * torch-cka-100   the same with its default-sized batches of 100 (an average of minibatch estimates)
``extra_info`` holds the ratios (of medians), the largest differences between the matrices (torch-cka's minibatch
and float32 errors against our float64 estimate, ours against the float64 references written here from
Kornblith et al.'s and Song et al.'s formulas) and, for ``ours-both``, the peak resident memory of a separate
process running the same grid, beside the formula of docs/grids.md.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import ratios
import torch
from torch.utils.data import DataLoader, TensorDataset

import similarity_plugins as sp

SIZES = [int(s) for s in os.environ.get("BENCH_GRID_N", "1000").split(",") if s]
L18 = [f"layer{s}.{b}" for s, n in zip((1, 2, 3, 4), (2, 2, 2, 2)) for b in range(n)]
L34 = [f"layer{s}.{b}" for s, n in zip((1, 2, 3, 4), (3, 4, 6, 3)) for b in range(n)]
_VALUES: dict[str, dict] = {}
_EXACT: dict[int, np.ndarray] = {}  # our cka-debiased matrix per N, for the peers' errors

RATIOS = {  # extra_info key -> (numerator, denominator), of median times within one N
    "ours_both_over_floor": ("ours-both", "floor"),
    "torch_cka_1_over_ours_both": ("torch-cka-1", "ours-both"),
    "torch_cka_1_over_ours_debiased": ("torch-cka-1", "ours-debiased"),
    "torch_cka_100_over_ours_both": ("torch-cka-100", "ours-both"),
}


def _models() -> tuple[torch.nn.Module, torch.nn.Module]:
    import torchvision

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        r18 = torchvision.models.resnet18(weights=None, num_classes=10).eval()
        r34 = torchvision.models.resnet34(weights=None, num_classes=10).eval()
    return r18, r34


def _inputs(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.rand(n, 3, 32, 32, generator=g), torch.zeros(n, dtype=torch.long)


pytestmark = pytest.mark.usefixtures("two_threads")


@pytest.fixture(scope="module", autouse=True)
def _report(request):
    yield
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capman = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is None or capman is None:
        return
    with capman.global_and_fixture_disabled():
        reporter.write_line("")
        for n, values in sorted(_VALUES.items()):
            reporter.write_line(f"[bench_grid] N={n}: " + json.dumps(values, default=float))


def _record(name: str, n: int, benchmark) -> None:
    ratios.record(f"{name}@{n}", benchmark)
    for key, (a, b) in RATIOS.items():
        value = ratios.share_ratio(key, f"{a}@{n}", f"{b}@{n}") if name in (a, b) else None
        if value is not None:
            _VALUES.setdefault(n, {})[key] = round(value, 3)


def _grid(n: int, metrics: str, r18=None, r34=None) -> sp.Grid:
    if r18 is None:
        r18, r34 = _models()
    x, y = _inputs(n)
    pairs = [(("resnet18", a), ("resnet34", b)) for a in L18 for b in L34]
    return sp.compare_grid({"resnet18": r18, "resnet34": r34}, {"resnet18": L18, "resnet34": L34},
                           sp.Data(test=TensorDataset(x, y)), metrics, pairs=pairs)


# --------------------------------------------------------------------------- the floor and the references
def _capture(model: torch.nn.Module, names: list[str], x: torch.Tensor, batch: int = 256) -> list[np.ndarray]:
    """One forward pass per batch with plain hooks; every layer's (N, D) float32 activations."""
    modules, out, chunks = dict(model.named_modules()), {}, {n: [] for n in names}
    hooks = [modules[n].register_forward_hook(lambda m, i, o, n=n: out.__setitem__(n, o.detach().clone()))
             for n in names]
    try:
        with torch.no_grad():
            for start in range(0, len(x), batch):
                out.clear()
                model(x[start:start + batch])
                for n in names:
                    chunks[n].append(out[n].flatten(1))
    finally:
        for h in hooks:
            h.remove()
    return [torch.cat(chunks[n]).numpy() for n in names]


def _u_centre(k: np.ndarray) -> np.ndarray:
    n = len(k)
    k = k.copy()
    np.fill_diagonal(k, 0.0)
    means = k.sum(0) / (n - 2)
    means -= means.sum() / (2 * (n - 1))
    k -= means[:, None]
    k -= means[None, :]
    np.fill_diagonal(k, 0.0)
    return k


def floor(r18, r34, x: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """Forward passes, a centred float64 Gram per layer (one GEMM), both centrings, the products: (linear, debiased)."""
    grams = {}
    for tag, model, names in (("a", r18, L18), ("b", r34, L34)):
        for name, acts in zip(names, _capture(model, names, x)):
            xc = acts.astype(np.float64)
            xc -= xc.mean(0)
            k = xc @ xc.T
            grams[tag, name] = (k, _u_centre(k))
    lin, deb = np.empty((len(L18), len(L34))), np.empty((len(L18), len(L34)))
    norms = {key: (np.sqrt(np.vdot(k, k)), np.sqrt(np.vdot(u, u))) for key, (k, u) in grams.items()}
    for i, a in enumerate(L18):
        for j, b in enumerate(L34):
            (ka, ua), (kb, ub) = grams["a", a], grams["b", b]
            lin[i, j] = np.vdot(ka, kb) / (norms["a", a][0] * norms["b", b][0])
            deb[i, j] = np.vdot(ua, ub) / (norms["a", a][1] * norms["b", b][1])
    return lin, deb


def _kornblith(x: np.ndarray, y: np.ndarray) -> float:
    """Kornblith et al.'s ``cka(gram_linear(x), gram_linear(y))``: Gram matrices, ``center_gram``, HSIC ratio."""
    def centred(a):
        k = a @ a.T
        means = k.mean(0)
        means -= means.mean() / 2
        return k - means[:, None] - means[None, :]
    kx, ky = centred(x), centred(y)
    return float(np.vdot(kx, ky) / (np.linalg.norm(kx) * np.linalg.norm(ky)))


def _song(x: np.ndarray, y: np.ndarray) -> float:
    """Unbiased HSIC (Song et al. 2012, eq. 5) on Gram matrices with zeroed diagonals, as a CKA ratio. The estimator
    is translation-invariant, so the columns are centred first: on raw ReLU activations (large means) the
    formula's terms cancel and cost float64 digits."""
    n = len(x)
    x, y = x - x.mean(0), y - y.mean(0)

    def hsic(k, m):
        one_k, one_m = k.sum(0), m.sum(0)
        return (np.vdot(k, m) + one_k.sum() * one_m.sum() / ((n - 1) * (n - 2)) - 2 / (n - 2) * one_k @ one_m) / (n * (n - 3))

    grams = []
    for a in (x, y):
        k = a @ a.T
        np.fill_diagonal(k, 0.0)
        grams.append(k)
    kx, ky = grams
    return float(hsic(kx, ky) / np.sqrt(hsic(kx, kx) * hsic(ky, ky)))


def references(r18, r34, x: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """The float64 reference matrices (linear, debiased) from the formulas above."""
    a = [v.astype(np.float64) for v in _capture(r18, L18, x)]
    b = [v.astype(np.float64) for v in _capture(r34, L34, x)]
    lin = np.array([[_kornblith(p, q) for q in b] for p in a])
    deb = np.array([[_song(p, q) for q in b] for p in a])
    return lin, deb


def torch_cka(r18, r34, x: torch.Tensor, batch: int) -> np.ndarray:
    """torch-cka's matrix, on private copies (it leaves its hooks in the models it is given)."""
    import warnings

    from torch_cka import CKA

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cka = CKA(copy.deepcopy(r18), copy.deepcopy(r34), model1_name="resnet18", model2_name="resnet34",
                  model1_layers=L18, model2_layers=L34, device="cpu")
        cka.compare(DataLoader(TensorDataset(x, torch.zeros(len(x))), batch_size=batch))
    return cka.export()["CKA"].numpy().astype(np.float64)


# --------------------------------------------------------------------------- the group, one per N
@pytest.mark.parametrize("n", SIZES)
def test_ours_both(benchmark, n):
    benchmark.group = f"grid-resnet-N{n}"
    r18, r34 = _models()
    grid = benchmark.pedantic(_grid, args=(n, "cka-linear,cka-debiased", r18, r34), rounds=1, iterations=1)
    _record("ours-both", n, benchmark)
    lin, deb = (grid.matrix(m, "resnet18", "resnet34") for m in ("cka-linear", "cka-debiased"))
    ref_lin, ref_deb = references(r18, r34, _inputs(n)[0])
    values = _VALUES.setdefault(n, {})
    values["ours_vs_kornblith_max_abs"] = float(np.abs(lin - ref_lin).max())
    values["ours_vs_song_max_abs"] = float(np.abs(deb - ref_deb).max())
    values.update(_peak_memory(n))
    benchmark.extra_info.update(values)
    _EXACT[n] = deb
    assert values["ours_vs_kornblith_max_abs"] < 1e-10 and values["ours_vs_song_max_abs"] < 1e-10


@pytest.mark.parametrize("n", SIZES)
def test_ours_debiased(benchmark, n):
    benchmark.group = f"grid-resnet-N{n}"
    r18, r34 = _models()
    benchmark.pedantic(_grid, args=(n, "cka-debiased", r18, r34), rounds=1, iterations=1)
    _record("ours-debiased", n, benchmark)


@pytest.mark.parametrize("n", SIZES)
def test_floor(benchmark, n):
    benchmark.group = f"grid-resnet-N{n}"
    r18, r34 = _models()
    lin, deb = benchmark.pedantic(floor, args=(r18, r34, _inputs(n)[0]), rounds=1, iterations=1)
    _record("floor", n, benchmark)
    assert np.isfinite(lin).all() and np.isfinite(deb).all()


@pytest.mark.parametrize("n", SIZES)
def test_torch_cka_one_batch(benchmark, n):
    benchmark.group = f"grid-resnet-N{n}"
    r18, r34 = _models()
    theirs = benchmark.pedantic(torch_cka, args=(r18, r34, _inputs(n)[0], n), rounds=1, iterations=1)
    _record("torch-cka-1", n, benchmark)
    ours = _grid(300, "cka-debiased", r18, r34).matrix("cka-debiased", "resnet18", "resnet34")
    values = _VALUES.setdefault(n, {})
    values["torch_cka_1_float32_error_at_300"] = float(np.abs(torch_cka(r18, r34, _inputs(300)[0], 300) - ours).max())
    if n in _EXACT:
        values["torch_cka_1_vs_ours_max_abs"] = float(np.abs(theirs - _EXACT[n]).max())
    benchmark.extra_info.update(values)


@pytest.mark.parametrize("n", SIZES)
def test_torch_cka_minibatch(benchmark, n):
    benchmark.group = f"grid-resnet-N{n}"
    r18, r34 = _models()
    theirs = benchmark.pedantic(torch_cka, args=(r18, r34, _inputs(n)[0], 100), rounds=1, iterations=1)
    _record("torch-cka-100", n, benchmark)
    if n in _EXACT:
        values = _VALUES.setdefault(n, {})
        values["torch_cka_100_vs_exact_max_abs"] = float(np.abs(theirs - _EXACT[n]).max())
        benchmark.extra_info.update(values)


@pytest.mark.parametrize("n", SIZES)
def test_paired_interleaved(benchmark, n):
    """On a shared machine the load changes between tests: here ours, the floor and torch-cka (one batch) run in
    turn within each round, and the ratios are of the medians of these interleaved times."""
    import time

    benchmark.group = f"grid-resnet-paired-N{n}"
    r18, r34 = _models()
    x = _inputs(n)[0]
    times: dict[str, list[float]] = {"ours-both": [], "ours-debiased": [], "floor": [], "torch-cka-1": []}
    runs = {"ours-both": lambda: _grid(n, "cka-linear,cka-debiased", r18, r34),
            "ours-debiased": lambda: _grid(n, "cka-debiased", r18, r34),
            "floor": lambda: floor(r18, r34, x), "torch-cka-1": lambda: torch_cka(r18, r34, x, n)}

    def one_round():
        for name, run in runs.items():
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)

    benchmark.pedantic(one_round, rounds=2, iterations=1)
    med = {k: float(np.median(v)) for k, v in times.items()}
    values = {"paired_seconds": {k: round(v, 2) for k, v in med.items()},
              "paired_ours_both_over_floor": round(med["ours-both"] / med["floor"], 3),
              "paired_torch_cka_1_over_ours_both": round(med["torch-cka-1"] / med["ours-both"], 3),
              "paired_torch_cka_1_over_ours_debiased": round(med["torch-cka-1"] / med["ours-debiased"], 3)}
    _VALUES.setdefault(n, {}).update(values)
    benchmark.extra_info.update(values)


# --------------------------------------------------------------------------- memory
_MEMORY_SCRIPT = """
import sys, json, torch
torch.set_num_threads(2)
sys.path.insert(0, "benchmarks")
import bench_grid as b

def status(key):
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith(key))

r18, r34 = b._models()
b._inputs({n})
with open("/proc/self/clear_refs", "w") as fh:  # reset the peak (VmHWM) to the resident set now
    fh.write("5")
base = status("VmRSS:")
b._grid({n}, "cka-linear,cka-debiased", r18, r34)
print(json.dumps({{"base_kib": base, "peak_kib": status("VmHWM:")}}))
"""


def _peak_memory(n: int) -> dict:
    """Peak resident memory of a fresh process running the grid, and the formula's estimate (MiB)."""
    out = subprocess.run([sys.executable, "-c", _MEMORY_SCRIPT.format(n=n)], capture_output=True, text=True,
                         timeout=1200, check=True, env={**os.environ, "PYTHONPATH": os.getcwd()})
    got = json.loads(out.stdout.strip().splitlines()[-1])
    dims = [64 * 8 * 8] * 2 + [128 * 4 * 4] * 2 + [256 * 2 * 2] * 2 + [512] * 2
    dims += [64 * 8 * 8] * 3 + [128 * 4 * 4] * 4 + [256 * 2 * 2] * 6 + [512] * 3
    activations = 4 * n * sum(dims)
    grams = 8 * n * n * len(dims)  # one centred matrix per node serves both estimators
    return {"peak_rss_mib": round(got["peak_kib"] / 1024, 1), "before_grid_rss_mib": round(got["base_kib"] / 1024, 1),
            "grid_peak_increase_mib": round((got["peak_kib"] - got["base_kib"]) / 1024, 1),
            "formula_activations_mib": round(activations / 2**20, 1), "formula_grams_mib": round(grams / 2**20, 1)}


# --------------------------------------------------------------------------- a zoo at one layer
@pytest.mark.slow
def test_zoo_six_small_cnns_all_activation_metrics(benchmark):
    """Six SmallCNNs trained on digits with seeds 0..5, compared at ``block3`` by every activation-only metric."""
    from similarity_plugins.apps.training import train_classifier
    from similarity_plugins.apps.zoo import SmallCNN
    from similarity_plugins.datasets import digits_data

    benchmark.group = "grid-zoo-6-small-cnn"
    data = digits_data(size=16)
    zoo = {}
    for seed in range(6):
        torch.manual_seed(seed)
        zoo[f"seed{seed}"] = SmallCNN(in_channels=1, num_classes=10, width=8)
        train_classifier(zoo[f"seed{seed}"], data.train, epochs=2, seed=seed, progress="never")
    grid = benchmark.pedantic(sp.compare_grid, args=(zoo, ["block3"], data), kwargs={"pairs": "across"},
                              rounds=1, iterations=1)
    failed = [c.error for c in grid.cells.values() if not c.ok]
    benchmark.extra_info.update(metrics=grid.metrics, cells=len(grid.cells), failed=len(failed))
    assert len(grid.metrics) >= 8


# --------------------------------------------------------------------------- per-node parts of the other measures
_NODE_VALUES: dict[str, dict] = {}  # the grid's matrices, for the loop's agreement
NODE_METRICS = ["procrustes", "svcca", "pwcca", "mutual-knn", "rsa"]
MLP_LAYERS = ["1", "3", "5", "7"]


def _mlp(seed: int) -> torch.nn.Sequential:
    g = torch.Generator().manual_seed(seed)
    layers: list[torch.nn.Module] = []
    for i in range(4):
        linear = torch.nn.Linear(64 if i == 0 else 512, 512)
        with torch.no_grad():
            linear.weight.normal_(0.0, 0.05, generator=g)
        layers += [linear, torch.nn.ReLU()]
    return torch.nn.Sequential(*layers).eval()


@pytest.fixture(scope="module")
def mlp_pair():
    x = torch.randn(1500, 64, generator=torch.Generator().manual_seed(0))
    return {"a": _mlp(0), "b": _mlp(1)}, sp.Data(test=TensorDataset(x, torch.zeros(1500, dtype=torch.long)))


def test_node_parts_grid(benchmark, mlp_pair):
    """Two 4-layer ReLU MLPs (width 512), N = 1500, every layer of one against every layer of the other (16
    cells) for the measures whose per-node part a grid reuses (``options: svcca dims=50``)."""
    models, data = mlp_pair
    benchmark.group = "grid-node-parts"
    grid = benchmark.pedantic(sp.compare_grid, args=(models, MLP_LAYERS, data, NODE_METRICS),
                              kwargs={"pairs": "across", "options": {"svcca": {"dims": 50}}}, rounds=2, iterations=1)
    assert all(c.ok for c in grid.cells.values())
    _NODE_VALUES["node-parts"] = {m: grid.matrix(m, "a", "b") for m in NODE_METRICS}
    ratios.record("node-parts:grid", benchmark)
    ratios.share_ratio("score_loop_over_grid", "node-parts:loop", "node-parts:grid")


def test_node_parts_score_loop(benchmark, mlp_pair):
    """The same 16 x 5 cells as a loop of ``score`` over the layers' activations (captured before the timing)."""
    models, data = mlp_pair
    benchmark.group = "grid-node-parts"
    x = data.test.tensors[0]
    acts = {}
    for name, model in models.items():
        with torch.no_grad():
            for layer in MLP_LAYERS:
                acts[name, layer] = model[: int(layer) + 1](x).numpy()

    def loop() -> dict:
        out = {m: np.empty((4, 4)) for m in NODE_METRICS}
        for i, a in enumerate(MLP_LAYERS):
            for j, b in enumerate(MLP_LAYERS):
                for r in sp.score(acts["a", a], acts["b", b], NODE_METRICS, options={"svcca": {"dims": 50}}):
                    out[r.metric][i, j] = r.score
        return out

    values = benchmark.pedantic(loop, rounds=2, iterations=1)
    if "node-parts" in _NODE_VALUES:
        benchmark.extra_info["max_abs_vs_grid"] = max(float(np.abs(values[m] - _NODE_VALUES["node-parts"][m]).max())
                                                      for m in NODE_METRICS)
    ratios.record("node-parts:loop", benchmark)
    ratios.share_ratio("score_loop_over_grid", "node-parts:loop", "node-parts:grid")
