"""Grid.best_pair: the best cell of a block and its family-wise p-value under the max-statistic null (every cell
of the block scored under the same permutations of the end's rows, the best over the block per permutation)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

import similarity_plugins as sp
from similarity_plugins.cka import cka
from similarity_plugins.stats.permutation import draws
from tests.helpers.models import Channel, child_activations

pytestmark = pytest.mark.usefixtures("one_torch_thread")
LAYERS = ["1", "2", "3"]
K = 19


def _mlp(seed: int, channel: int = 0) -> nn.Module:
    """Reads one channel of a (N, 2, 4, 4) input: models of different channels see independent data."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        body = nn.Sequential(nn.Flatten(), nn.Linear(16, 8), nn.Tanh(), nn.Linear(8, 6))
    return nn.Sequential(Channel(channel), *body)



def _data(n: int = 40, seed: int = 0) -> sp.Data:
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 2, 4, 4, generator=g)
    return sp.Data(test=TensorDataset(x, torch.zeros(n, dtype=torch.long)))


def _acts(model: nn.Module, data: sp.Data, layer: str) -> np.ndarray:
    return child_activations(model, data.test.tensors[0], layer)


def test_a_model_against_itself_gets_one_over_k_plus_one():
    model, data = _mlp(0), _data()
    grid = sp.compare_grid({"a": model, "b": model}, LAYERS, data, "cka-linear", options={"permutations": K})
    for front, end in (("a", "b"), ("a", "a"), ("b", "a")):
        best = grid.best_pair("cka-linear", front, end)
        assert set(best) == {"front_layer", "end_layer", "score", "p_value"}
        assert best["front_layer"] == best["end_layer"] and best["score"] == pytest.approx(1.0, abs=1e-12)
        assert best["p_value"] == 1 / (K + 1)


def test_the_family_wise_p_value_equals_a_hand_written_max_statistic_null_and_is_never_below_the_cells():
    models, data, seed = {"x": _mlp(1, 0), "y": _mlp(2, 1)}, _data(), 5
    grid = sp.compare_grid(models, LAYERS, data, "cka-linear", pairs="across", options={"permutations": K}, seed=seed)
    xs = [_acts(models["x"], data, layer) for layer in LAYERS]
    ys = [_acts(models["y"], data, layer) for layer in LAYERS]
    observed = np.array([[cka(a, b) for b in ys] for a in xs])
    perms = next(draws(len(xs[0]), K, seed, K)).numpy()  # the cells' tests draw these from the grid's seed
    null_max = np.array([max(cka(a, b[p]) for a in xs for b in ys) for p in perms])
    r, c = np.unravel_index(np.argmax(observed), observed.shape)
    expected = (1 + int(np.sum(null_max >= observed[r, c] - 1e-9))) / (K + 1)  # ties within rounding count
    best = grid.best_pair("cka-linear", "x", "y")
    assert (best["front_layer"], best["end_layer"]) == (LAYERS[r], LAYERS[c])
    assert best["score"] == pytest.approx(observed[r, c], rel=1e-10)  # node Grams vs the direct formula
    assert best["p_value"] == expected
    own = grid.p_values("cka-linear", front="x", end="y")
    assert best["p_value"] >= own[r, c]
    assert best["p_value"] > 0.1 and own.min() < best["p_value"]  # independent channels: not significant


@pytest.mark.parametrize("metric", ["rsa", "procrustes", "linear-regression"])
def test_never_below_the_best_cells_own_p_value_for_other_measures(metric):
    models = {"x": _mlp(3, 0), "y": _mlp(4, 0)}
    g = torch.Generator().manual_seed(1)
    x = torch.rand(60, 2, 4, 4, generator=g)
    data = sp.Data(train=TensorDataset(x[20:], torch.zeros(40).long()),
                   test=TensorDataset(x[:40], torch.zeros(40).long()))
    grid = sp.compare_grid(models, LAYERS, data, metric, options={"permutations": K})
    for front in models:
        for end in models:
            best = grid.best_pair(metric, front, end)
            i, j = grid.nodes.index((front, best["front_layer"])), grid.nodes.index((end, best["end_layer"]))
            assert 1 / (K + 1) <= grid.cells[(metric, i, j)].details["p_value"] <= best["p_value"] <= 1.0


def test_cells_of_a_models_own_block_share_the_permutations_and_both_orders_run():
    model, data = _mlp(0), _data()
    grid = sp.compare_grid({"a": model}, LAYERS, data, "cka-linear", options={"permutations": K})
    assert not any(c.details.get("mirrored") for c in grid.cells.values())  # the reversed order: inverse perms
    assert ("cka-linear", "a", "a") in grid.block_nulls and len(grid.block_nulls[("cka-linear", "a", "a")]) == K
    plain = sp.compare_grid({"a": model}, LAYERS, data, "cka-linear")
    assert any(c.details.get("mirrored") for c in plain.cells.values())  # no test: mirrored as before
    assert np.allclose(grid.matrix("cka-linear"), plain.matrix("cka-linear"), rtol=1e-12, atol=0)


def test_without_permutations_the_p_value_is_none_and_json_keeps_the_block_nulls(tmp_path):
    models, data = {"x": _mlp(1, 0), "y": _mlp(2, 1)}, _data()
    plain = sp.compare_grid(models, LAYERS, data, "cka-linear", pairs="across")
    assert plain.best_pair("cka-linear", "x", "y")["p_value"] is None and not plain.block_nulls
    grid = sp.compare_grid(models, LAYERS, data, "cka-linear", pairs="across", options={"permutations": K})
    assert all("null_values" not in c.details for c in grid.cells.values())  # kept per block, not per cell
    back = sp.Grid.from_json(grid.to_json(tmp_path / "g.json") and tmp_path / "g.json")
    for front, end in (("x", "y"), ("y", "x")):
        assert back.best_pair("cka-linear", front, end) == grid.best_pair("cka-linear", front, end)
    with pytest.raises(ValueError, match="unknown model"):
        grid.best_pair("cka-linear", "x", "z")


def test_a_distance_takes_the_lowest_score_and_the_lowest_null(fresh_manager):
    from similarity_plugins.cka.permutation import cka_permutation_test

    class OneMinusCKA:
        needs = ("test",)
        activations_only = True
        deterministic = True
        kind = "distance"
        options = (sp.Option("permutations", 0, "K"),)

        @sp.hookimpl
        def similarity(self, front, end, layer, options, context, seed):
            x = context.activations(front, layer.front, "test")
            y = context.activations(end, layer.end, "test")
            test = cka_permutation_test(x, y, permutations=options["permutations"], seed=seed, analytic=False,
                                        null_values=True)
            null = [1.0 - v for v in test["null_values"]]
            p = (1 + sum(v <= 1.0 - cka(x, y) + 1e-9 for v in null)) / (len(null) + 1)
            return {"score": 1.0 - cka(x, y), "details": {"p_value": p, "null_values": null}}

    sp.register_metric(OneMinusCKA(), "one-minus-cka")
    models, data = {"x": _mlp(1, 0), "y": _mlp(2, 0)}, _data()
    grid = sp.compare_grid(models, LAYERS, data, "one-minus-cka", pairs="across", options={"permutations": K})
    reference = sp.compare_grid(models, LAYERS, data, "cka-linear", pairs="across", options={"permutations": K})
    best, ref = grid.best_pair("one-minus-cka", "x", "y"), reference.best_pair("cka-linear", "x", "y")
    assert (best["front_layer"], best["end_layer"]) == (ref["front_layer"], ref["end_layer"])
    assert best["score"] == pytest.approx(1.0 - ref["score"], abs=1e-12) and best["p_value"] == ref["p_value"]
    low, high = grid.aggregate("one-minus-cka", "x", "y"), reference.aggregate("cka-linear", "x", "y")
    assert low["score"] == best["score"] and low["p_value"] == high["p_value"]  # "max" is the best: the lowest
    assert low["tau"] == pytest.approx(1.0 - high["tau"], abs=1e-12)  # the mirrored critical value
    assert low["calibrated"] == pytest.approx(max(0.0, low["tau"] - low["score"]), abs=1e-12)  # no declared bound


def test_a_resumed_grid_has_the_same_best_pair(tmp_path):
    models, data = {"x": _mlp(1, 0), "y": _mlp(2, 1)}, _data()
    options = {"permutations": K}
    first = sp.compare_grid(models, LAYERS, data, "cka-linear", options=options, resume=tmp_path / "cells.jsonl")
    again = sp.compare_grid(models, LAYERS, data, "cka-linear", options=options, resume=tmp_path / "cells.jsonl")
    assert all(c.seconds == first.cells[k].seconds for k, c in again.cells.items())  # read back, not recomputed
    assert again.block_nulls == first.block_nulls
    assert again.best_pair("cka-linear", "y", "x") == first.best_pair("cka-linear", "y", "x")


def test_explicit_pairs_that_mirror_part_of_a_block_compute_the_block_instead():
    models, data = {"x": _mlp(1, 0), "y": _mlp(2, 1)}, _data()
    pairs = [(("x", "1"), ("y", "2")), (("y", "2"), ("x", "1")), (("y", "3"), ("x", "1"))]
    grid = sp.compare_grid(models, LAYERS, data, "cka-linear", pairs=pairs, options={"permutations": K})
    assert not any(c.details.get("mirrored") for c in grid.cells.values())
    plain = sp.compare_grid(models, LAYERS, data, "cka-linear", pairs=pairs)
    assert sum(bool(c.details.get("mirrored")) for c in plain.cells.values()) == 1
    best = grid.best_pair("cka-linear", "y", "x")
    assert best["p_value"] >= grid.p_values("cka-linear")[grid.nodes.index(("y", best["front_layer"])),
                                                           grid.nodes.index(("x", best["end_layer"]))]


def test_each_block_costs_one_block_test_and_no_more(monkeypatch):
    import similarity_plugins.cka.block as cka_block

    calls = []
    real = cka_block.cka_block_nulls
    monkeypatch.setattr(cka_block, "cka_block_nulls",
                        lambda fronts, ends, plan, debiased: calls.append((len(fronts), len(ends), plan.k, plan.seed))
                        or real(fronts, ends, plan, debiased))
    models, data = {"x": _mlp(1, 0), "y": _mlp(2, 1)}, _data()
    grid = sp.compare_grid(models, LAYERS, data, "cka-linear", options={"permutations": K}, seed=2)
    # (x, x), (y, y) and (x, y): one block test each, all 3 x 3 cells; (y, x): the mirror of (x, y), nothing computed
    assert calls == [(3, 3, K, 2)] * 3
    assert grid.block_nulls[("cka-linear", "y", "x")] == grid.block_nulls[("cka-linear", "x", "y")]


def test_a_block_test_equals_the_cells_tested_one_by_one():
    """The grid's block test gives every cell the p-value, null and calibrated score of its own test."""
    from similarity_plugins.cka.permutation import cka_permutation_test

    models, data = {"x": _mlp(1, 0), "y": _mlp(2, 0)}, _data()
    for metric, debiased in (("cka-linear", False), ("cka-debiased", True)):
        grid = sp.compare_grid(models, LAYERS, data, metric, pairs="across", options={"permutations": K}, seed=3)
        for i, a in enumerate(LAYERS):
            for j, b in enumerate(LAYERS):
                cell = grid.cells[(metric, grid.nodes.index(("x", a)), grid.nodes.index(("y", b)))].details
                own = cka_permutation_test(_acts(models["x"], data, a), _acts(models["y"], data, b), debiased=debiased,
                                           permutations=K, seed=3, analytic=False)
                assert cell["p_value"] == own["p_value"] and cell["tau"] == pytest.approx(own["tau"], rel=1e-10)
                assert cell["null_mean"] == pytest.approx(own["null_mean"], rel=1e-10)
                assert cell["calibrated"] == pytest.approx(own["calibrated"], rel=1e-9, abs=1e-12)
