"""Results to draw as HTML pages, built in the tests (seeded, nothing trained): a comparison with every kind of
score, interval, p-value and calibrated value, and grids and zoos whose cells carry what a permutation-tested grid's
cells carry (the keys of ``compare_grid(..., options={"permutations": K})``, plus ``tau`` and ``calibrated``)."""

from __future__ import annotations

import numpy as np

from similarity_plugins.host.results import Report, SimilarityResult
from similarity_plugins.runner.grid.results import Grid

SIMILARITY = {"kind": "similarity", "range": [0.0, 1.0], "symmetric": True,
              "invariances": ["translation", "isotropic-scaling", "orthogonal"], "family": "cka",
              "description": "a similarity of the activations"}
STITCH = {"kind": "similarity", "range": None, "symmetric": False, "invariances": [], "family": "stitching",
          "description": "model stitching; relative accuracy"}
DISTANCE = {"kind": "distance", "range": [0.0, None], "symmetric": True, "invariances": ["orthogonal"],
            "family": "representational", "description": "a distance of the activations"}

PROVENANCE = {
    "package": "0.1.0", "date": "2026-01-02T03:04:05+00:00",
    "machine": {"platform": "Linux-test", "python": "3.11.7", "torch": "2.x", "cpu": "Test CPU", "cpu_count": 2,
                "device": "cpu"},
    "models": {"front": {"class": "pkg.Front", "dtype": "torch.float32", "parameters": 1234,
                         "source": {"path": None, "hub_id": "org/model", "revision": "main", "commit": "abc123"},
                         "fingerprint": None},
               "end": {"class": "pkg.End", "dtype": "torch.float32", "parameters": 99, "source": None,
                       "fingerprint": "f" * 64}},
    "data": {"test": {"size": 450, "fingerprint": "d" * 64}},
    "options": {"permutations": 9, "epochs": 2},
}


def comparison(cuts: tuple[str, ...] = ("block2", "block3"), seed: int = 0) -> Report:
    """A two-cut comparison: a similarity with p-values and calibrated scores, a relative accuracy with intervals
    over seeds, a distance with a bootstrap interval, a failed row and a row with a warning."""
    rng = np.random.default_rng(seed)
    rows = []
    for cut in cuts:
        s = float(rng.uniform(0.3, 0.9))
        rows.append(SimilarityResult("cka-linear", s, {"p_value": 0.1, "permutations": 9, "null_mean": 0.2,
                                                       "null_std": 0.05, "tau": 0.31, "calibrated": (s - 0.31) / 0.69},
                                     float(rng.uniform(0, 1)), None, cut))
        a = float(rng.uniform(0.5, 1.1))
        rows.append(SimilarityResult("stitch-slm", a, {"seed_ci95": [a - 0.05, a + 0.04], "repeats": 3,
                                                       "test_ci95": [a - 0.1, a + 0.1]}, 2.5, None, cut))
        d = float(rng.uniform(0.1, 2.0))
        rows.append(SimilarityResult("my-distance", d, {"test_ci95": [d - 0.2, d + 0.3],
                                                        "warnings": ["few samples <b>"]}, 0.01, None, cut))
        rows.append(SimilarityResult.failed("broken", "ValueError: it failed <here>", cut, error_type="ValueError"))
    meta = {"front": "Front", "end": "End", "layers": list(cuts), "metrics": ["cka-linear", "stitch-slm", "my-distance",
                                                                              "broken"],
            "kinds": {"cka-linear": "similarity", "stitch-slm": "similarity", "my-distance": "distance",
                      "broken": None},
            "info": {"cka-linear": SIMILARITY, "stitch-slm": STITCH, "my-distance": DISTANCE},
            "seed": 3, "repeats": 3, "device": "cpu", "torch": "2.x", "world_size": 1, "provenance": PROVENANCE}
    return Report(rows, meta)


def zoo(models: int = 3, layers: int = 2, metrics: tuple[str, ...] = ("cka-linear", "my-distance"),
        permutations: int = 9, fail: bool = True, calibrated: bool = True, seed: int = 0) -> Grid:
    """A grid of every ordered pair of nodes (``pairs="all"``) over ``models`` models of ``layers`` layers, each cell
    permutation-tested with its ``permutations`` null values (the grid keeps each block's best cell's), and with
    one failed cell when ``fail``."""
    rng = np.random.default_rng(seed)
    names = [f"m{k}" for k in range(models)]
    nodes = [(m, f"layer{k}") for m in names for k in range(layers)]
    info = {m: dict(DISTANCE if "distance" in m else SIMILARITY) for m in metrics}
    for m in info.values():
        m["range"] = tuple(m["range"]) if m["range"][1] is not None else None
    cells = {}
    for metric in metrics:
        distance = "distance" in metric
        for i, (fm, fl) in enumerate(nodes):
            for j, (em, el) in enumerate(nodes):
                score = float(rng.uniform(0.1, 2.0) if distance else rng.uniform(0.05, 1.0))
                null = (rng.uniform(1.0, 3.0, permutations) if distance else rng.uniform(0.0, 0.3, permutations)).tolist()
                extreme = sum(v <= score if distance else v >= score for v in null)
                details = {"n": 100, "front_dim": 64, "end_dim": 64, "p_value": (1 + extreme) / (permutations + 1),
                           "null_mean": float(np.mean(null)), "null_std": float(np.std(null, ddof=1)),
                           "permutations": permutations, "null_values": null, "front_model": fm, "end_model": em}
                if calibrated and not distance:
                    tau = float(np.sort(null + [score])[int(np.ceil(0.95 * (permutations + 1))) - 1])
                    details.update(tau=tau, calibrated=min(max((score - tau) / (1 - tau), 0.0), 1.0))
                cells[(metric, i, j)] = SimilarityResult(metric, score, details, float(rng.uniform(0.01, 0.5)), None,
                                                         fl if fl == el else f"{fl}->{el}")
    if fail:
        cells[(metrics[0], 0, len(nodes) - 1)] = SimilarityResult.failed(
            metrics[0], "RuntimeError: out of <memory>", f"{nodes[0][1]}->{nodes[-1][1]}",
            details={"front_model": nodes[0][0], "end_model": nodes[-1][0]}, error_type="RuntimeError")
    meta = {"models": {m: "Net" for m in names}, "layers": {m: [layer for n, layer in nodes if n == m] for m in names},
            "metrics": list(metrics), "pairs": "all", "seed": 0, "device": "cpu", "torch": "2.x", "world_size": 1,
            "provenance": {**PROVENANCE, "models": {m: {"class": "pkg.Net", "dtype": "torch.float32", "parameters": 10,
                                                        "source": None, "fingerprint": f"{k:064x}"}
                                                    for k, m in enumerate(names)}}}
    return Grid(nodes, list(metrics), cells, info, meta)
