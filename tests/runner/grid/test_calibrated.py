"""Calibrated grids: ``Grid.calibrated`` (each cell against its own null) and ``Grid.aggregate`` (the block's
maximum or mean against the block's joint null), through models, stores, resume files and JSON; a block with
missing or failed cells is refused naming them."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

import similarity_plugins as sp
from similarity_plugins.cka import cka
from similarity_plugins.cli import main
from similarity_plugins.stats.calibration import calibrate
from similarity_plugins.stats.permutation import draws
from tests.helpers.models import Channel, child_activations

pytestmark = pytest.mark.usefixtures("one_torch_thread")
LAYERS = ["1", "2", "3"]
K = 19



class _Zero(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(x)


def _mlp(seed: int, channel: int = 0) -> nn.Module:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        body = nn.Sequential(nn.Flatten(), nn.Linear(16, 8), nn.Tanh(), nn.Linear(8, 6))
    return nn.Sequential(Channel(channel), *body, _Zero())


def _data(n: int = 40, seed: int = 0, mix: float = 0.7) -> sp.Data:
    """Two channels that share ``mix`` of their content, so models reading different channels are related."""
    g = torch.Generator().manual_seed(seed)
    base = torch.rand(n, 1, 4, 4, generator=g)
    x = torch.cat([base, mix * base + (1 - mix) * torch.rand(n, 1, 4, 4, generator=g)], dim=1)
    return sp.Data(test=TensorDataset(x, torch.zeros(n, dtype=torch.long)))


def _acts(model: nn.Module, data: sp.Data, layer: str) -> np.ndarray:
    return child_activations(model, data.test.tensors[0], layer)


@pytest.fixture(scope="module")
def tested() -> tuple[dict, sp.Data, sp.Grid]:
    models, data = {"x": _mlp(1, 0), "y": _mlp(2, 1)}, _data()
    return models, data, sp.compare_grid(models, LAYERS, data, "cka-linear", options={"permutations": K}, seed=4)


def test_the_calibrated_matrix_is_each_cells_calibrated_score(tested):
    _, _, grid = tested
    values = grid.calibrated("cka-linear", "x", "y")
    for r, a in enumerate(LAYERS):
        for c, b in enumerate(LAYERS):
            cell = grid.cells[("cka-linear", grid.nodes.index(("x", a)), grid.nodes.index(("y", b)))]
            assert values[r, c] == cell.details["calibrated"]
    assert values.shape == (3, 3) and (values >= 0).all() and (values <= 1).all() and values.max() > 0


def test_aggregates_equal_a_hand_written_joint_null(tested):
    models, data, grid = tested
    xs = [_acts(models["x"], data, layer) for layer in LAYERS]
    ys = [_acts(models["y"], data, layer) for layer in LAYERS]
    observed = np.array([[cka(a, b) for b in ys] for a in xs])
    perms = next(draws(len(xs[0]), K, 4, K)).numpy()
    null = np.array([[[cka(a, b[p]) for b in ys] for a in xs] for p in perms])
    for agg, reduce in (("max", np.max), ("mean", np.mean)):
        score, values = float(reduce(observed)), reduce(null, axis=(1, 2))
        found = grid.aggregate("cka-linear", "x", "y", agg=agg)
        assert set(found) == {"score", "p_value", "tau", "calibrated"}
        assert found["score"] == pytest.approx(score, rel=1e-10)
        assert found["p_value"] == (1 + int(np.sum(values >= score - 1e-9))) / (K + 1)
        expected = calibrate(score, values, 0.05, (0.0, 1.0), "similarity")
        assert found["tau"] == pytest.approx(expected["tau"], rel=1e-10)
        assert found["calibrated"] == pytest.approx(expected["calibrated"], rel=1e-9, abs=1e-12)
    assert grid.aggregate("cka-linear", "x", "y", "max")["p_value"] == grid.best_pair("cka-linear", "x", "y")["p_value"]
    tighter = grid.aggregate("cka-linear", "x", "y", "max", alpha=0.5)
    assert tighter["tau"] <= grid.aggregate("cka-linear", "x", "y", "max")["tau"]
    with pytest.raises(ValueError, match="agg must be one of max, mean"):
        grid.aggregate("cka-linear", "x", "y", agg="median")


def test_a_model_against_itself_is_calibrated_to_one_and_no_test_gives_none(tested):
    models, data, grid = tested
    own = grid.aggregate("cka-linear", "x", "x")
    assert own["score"] == pytest.approx(1.0) and own["p_value"] == 1 / (K + 1)
    assert own["calibrated"] == pytest.approx(1.0, abs=1e-12)
    plain = sp.compare_grid(models, LAYERS, data, "cka-linear", pairs="across")
    assert plain.aggregate("cka-linear", "x", "y", "mean") == {
        "score": pytest.approx(np.mean(plain.matrix("cka-linear", "x", "y"))), "p_value": None, "tau": None,
        "calibrated": None}
    assert np.isnan(plain.calibrated("cka-linear")).all()


def test_json_resume_and_stores_keep_the_aggregates(tested, tmp_path):
    models, data, grid = tested
    path = tmp_path / "grid.json"
    grid.to_json(path)
    back = sp.Grid.from_json(path)
    resumed = [sp.compare_grid(models, LAYERS, data, "cka-linear", options={"permutations": K}, seed=4,
                               resume=tmp_path / "cells.jsonl") for _ in range(2)]
    stored = sp.compare_grid(models, LAYERS, data, "cka-linear", options={"permutations": K}, seed=4,
                             store=tmp_path / "store")
    alone = sp.compare_grid(metrics="cka-linear", layers={"x": LAYERS, "y": LAYERS}, options={"permutations": K},
                            seed=4, store=tmp_path / "store")
    for agg in ("max", "mean"):
        want = grid.aggregate("cka-linear", "x", "y", agg)
        for other in (back, *resumed, stored, alone):
            assert other.aggregate("cka-linear", "x", "y", agg) == pytest.approx(want, rel=1e-9)
    assert np.array_equal(back.calibrated("cka-linear"), grid.calibrated("cka-linear"), equal_nan=True)


def test_an_interrupted_grid_refuses_aggregates_and_best_pairs_naming_the_missing_cells(tested, monkeypatch):
    import similarity_plugins.runner.grid.run as grid_run

    models, data, _ = tested
    calls, real = [], grid_run.run_metric

    def stop_in_the_second_block(*args, **kwargs):
        calls.append(1)
        if len(calls) > 11:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(grid_run, "run_metric", stop_in_the_second_block)
    with pytest.raises(KeyboardInterrupt) as caught:
        sp.compare_grid(models, LAYERS, data, "cka-linear", options={"permutations": K})
    partial = caught.value.grid
    assert partial.meta["interrupted"] and len(partial.cells) == 9  # the (x, x) block: cells are kept block by block
    assert partial.aggregate("cka-linear", "x", "x")["p_value"] is not None
    for call in (lambda: partial.aggregate("cka-linear", "x", "y", "mean"),
                 lambda: partial.best_pair("cka-linear", "x", "y")):
        with pytest.raises(ValueError, match=r"9 cells missing \(not computed: an interrupted grid\?\): x:1 x y:1; "):
            call()


def test_a_block_with_failed_cells_leaves_them_out_naming_them(tested):
    IncompleteBlockWarning = sp.IncompleteBlockWarning  # public: users filter it by this name

    models, data, _ = tested
    grid = sp.compare_grid(models, [*LAYERS, "5"], data, "cka-linear", pairs="across", options={"permutations": K})
    assert not grid.cells[("cka-linear", grid.nodes.index(("x", "5")), grid.nodes.index(("y", "1")))].ok
    chosen = [(("x", a), ("y", b)) for a in LAYERS for b in LAYERS]  # the block without the constant layer
    fine = sp.compare_grid(models, [*LAYERS, "5"], data, "cka-linear", pairs=chosen, options={"permutations": K})
    for agg in ("max", "mean"):
        with pytest.warns(IncompleteBlockWarning, match=r"7 of its 16 cells failed .*: x:1 x y:5 \(ValueError: "):
            found = grid.aggregate("cka-linear", "x", "y", agg)
        assert found == pytest.approx(fine.aggregate("cka-linear", "x", "y", agg), rel=1e-12)  # the cells with a value
    with pytest.warns(IncompleteBlockWarning):
        assert grid.best_pair("cka-linear", "x", "y") == fine.best_pair("cka-linear", "x", "y")


def test_groups_and_arrays_of_permutations_reach_every_cell():
    models, data = {"x": _mlp(1, 0), "y": _mlp(2, 1)}, _data()
    labels = np.repeat(np.arange(10), 4)
    grid = sp.compare_grid(models, LAYERS, data, ["cka-linear", "procrustes"], pairs="across",
                           options={"permutations": K, "groups": labels, "permute": "groups"})
    assert all(c.details["permute"] == "groups" and c.details["groups"] == 10 for c in grid.cells.values())
    perms = np.stack([np.random.default_rng(i).permutation(40) for i in range(K)])
    given = sp.compare_grid(models, LAYERS, data, "cka-linear", options={"permutations": perms})
    assert not any(c.details.get("mirrored") for c in given.cells.values())  # each block scores the array itself
    assert given.block_nulls[("cka-linear", "x", "y")] != given.block_nulls[("cka-linear", "y", "x")]


def test_the_cli_prints_calibrated_matrices_and_aggregates(tested, tmp_path, capsys):
    models, data, _ = tested
    sp.extract(models, LAYERS, data, tmp_path / "store")
    code = main(["grid", "--store", str(tmp_path / "store"), "--metrics", "cka-linear", "--pairs", "across",
                 "--option", "permutations=19", "--calibrate", "--no-progress", "--out", str(tmp_path / "g.json")])
    out = capsys.readouterr().out
    assert code == 0, out
    grid = sp.Grid.from_json(tmp_path / "g.json")
    assert "cka-linear calibrated (rows: front, columns: end)" in out
    for agg in ("max", "mean"):
        found = grid.aggregate("cka-linear", "x", "y", agg)
        assert f"{agg} cka-linear x x y: {found['score']:.4f} (p = {found['p_value']:.4g}, tau = {found['tau']:.4f}, " \
               f"calibrated {found['calibrated']:.4f})" in out
    assert main(["grid", "--store", str(tmp_path / "store"), "--metrics", "cka-linear", "--calibrate",
                 "--no-progress"]) == 2
    assert "--calibrate needs permutations" in capsys.readouterr().err
