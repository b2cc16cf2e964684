"""Grids refuse or error exactly where compare does, one cell or one metric at a time: model names that collide,
a layer whose module runs twice per forward pass, a metric that needs a missing train split, one bad layer."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

import similarity_plugins as sp
from tests.helpers.models import TwoHeaded, tiny_cnn

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _test_only(n: int = 40) -> sp.Data:
    g = torch.Generator().manual_seed(0)
    return sp.Data(test=TensorDataset(torch.rand(n, 1, 16, 16, generator=g), torch.randint(0, 10, (n,), generator=g)))


def _assert_only_cells_of(grid: sp.Grid, layer: str, fail_with: str) -> None:
    """Every cell with ``layer`` on a side is an error whose text holds ``fail_with``; every other cell is scored."""
    for (_, i, j), cell in grid.cells.items():
        if layer in (grid.nodes[i][1], grid.nodes[j][1]):
            assert not cell.ok and fail_with in cell.error, cell
        else:
            assert cell.ok, cell.error


class SharedTwice(nn.Module):
    """``shared`` runs twice per forward pass (the torchvision BasicBlock ``relu`` pattern); ``a`` and ``b`` once."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a = nn.Conv2d(1, 4, 3, padding=1)
        self.shared = nn.ReLU()
        self.b = nn.Conv2d(4, 4, 3, padding=1)
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(4 * 16 * 16, 10))

    def forward(self, x):
        return self.head(self.shared(self.b(self.shared(self.a(x)))))


def test_model_names_that_collide_as_text_are_refused_naming_both():
    with pytest.raises(ValueError, match=r"models 1 and '1' have the same name"):
        sp.compare_grid({1: tiny_cnn(width=4), "1": tiny_cnn(seed=1, width=4)}, ["block1"], _test_only(), "cka-linear")


def test_a_layer_that_runs_twice_is_refused_as_compare_refuses_it_and_only_its_cells_fail():
    model = SharedTwice()
    ref = sp.compare(model, model, "shared", _test_only(), "cka-linear")["cka-linear"]
    assert not ref.ok and "called 2 times" in ref.error
    grid = sp.compare_grid({"m": model}, ["a", "shared", "b"], _test_only(), "cka-linear")
    _assert_only_cells_of(grid, "shared", fail_with="called 2 times")


def test_a_metric_that_needs_a_missing_train_split_gets_error_cells_and_the_others_run():
    model = tiny_cnn(width=4)
    ref = sp.compare(model, model, "block1", _test_only(), "cka-linear,linear-regression")
    grid = sp.compare_grid({"a": model, "b": tiny_cnn(seed=1, width=4)}, ["block1"], _test_only(),
                           "cka-linear,linear-regression")
    for (metric, _, _), cell in grid.cells.items():
        if metric == "linear-regression":
            assert not cell.ok and cell.error == ref["linear-regression"].error
        else:
            assert cell.ok


def test_one_bad_layer_fails_only_its_cells():
    model = TwoHeaded()  # its layer `split` outputs a tuple, which no measure reads
    grid = sp.compare_grid({"m": model}, ["stem", "split", "head"], _test_only(), "cka-linear")
    _assert_only_cells_of(grid, "split", fail_with="not a tensor")


def test_a_bad_train_split_fails_only_the_metrics_that_read_it():
    test = _test_only().test
    x, y = (t.clone() for t in _test_only(48).test.tensors)
    x[5, 0, 1, 1] = float("nan")
    grid = sp.compare_grid({"a": tiny_cnn(width=4), "b": tiny_cnn(seed=1, width=4)}, ["block1"],
                           sp.Data(train=TensorDataset(x, y), test=test), "cka-linear,linear-regression")
    for (metric, _, _), cell in grid.cells.items():
        if metric == "linear-regression":
            assert not cell.ok and "NaN" in cell.error and "train" in cell.error, cell.error
        else:
            assert cell.ok, cell.error


def test_a_model_whose_head_fails_after_the_layers_is_still_captured():
    class BadHead(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.a = nn.Conv2d(1, 4, 3, padding=1)

        def forward(self, x):
            self.a(x)
            raise RuntimeError("the head does not fit")

    grid = sp.compare_grid({"m": BadHead()}, ["a"], _test_only(), "cka-linear")
    assert all(cell.ok for cell in grid.cells.values())


def test_model_names_are_text_in_layers_and_pairs_too():
    grid = sp.compare_grid({1: tiny_cnn(width=4)}, {1: ["block1"]}, _test_only(), "cka-linear",
                           pairs=[((1, "block1"), (1, "block1"))])
    assert grid.nodes == [("1", "block1")] and len(grid.cells) == 1


def test_a_mirrored_cell_names_the_side_that_failed_in_its_own_order():
    """A symmetric metric's cell computed once for both orders: each order's error names the sides of that order
    (the constant input is X in one order and Y in the other), as compare's error in that order does."""
    symmetric = [m for m in sp.list_metrics() if sp.metric_info(m).symmetric]
    torch.manual_seed(0)
    models = {"varied": nn.Sequential(nn.Flatten(), nn.Linear(16 * 16, 4)),
              "dead": nn.Sequential(nn.Flatten(), nn.Linear(16 * 16, 4))}
    nn.init.zeros_(models["dead"][1].weight)
    nn.init.zeros_(models["dead"][1].bias)
    data = _test_only()
    grid = sp.compare_grid(models, ["1"], data, symmetric, pairs="across")
    for front, end in (("varied", "dead"), ("dead", "varied")):
        expected = sp.compare(models[front], models[end], "1", data, symmetric)
        for (metric, i, j), cell in grid.cells.items():
            if (grid.nodes[i][0], grid.nodes[j][0]) == (front, end):
                assert cell.error == expected[metric].error, (metric, front, end)
    mirrored = [cell for cell in grid.cells.values() if cell.details.get("mirrored")]
    assert len(mirrored) == len(symmetric) and all(cell.error.startswith("ValueError: X is constant") for cell in mirrored)
