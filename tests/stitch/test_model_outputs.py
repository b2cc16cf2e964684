"""Models whose forward returns a tuple or a dict (Hugging Face style) work: the logits are read from it; arrays
with negative strides (a reversed NumPy view) are scored as any array."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

import similarity_plugins as sp
from similarity_plugins import Data
from tests.helpers.models import tiny_cnn

pytestmark = pytest.mark.usefixtures("one_torch_thread")


class TupleOut(nn.Module):
    """Returns (logits, the hidden state of block1): the second item reads a value from before the cut."""

    def __init__(self) -> None:
        super().__init__()
        self.net = tiny_cnn()

    def forward(self, x):
        hidden = self.net.block1(x)
        rest = self.net.block3(self.net.block2(hidden))
        return self.net.fc(self.net.flatten(self.net.pool(rest))), hidden


class DictOut(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = tiny_cnn()

    def forward(self, x):
        return {"logits": self.net(x), "pooled": x.mean((1, 2, 3))}


def _data() -> Data:
    g = torch.Generator().manual_seed(0)
    x, y = torch.rand(48, 1, 16, 16, generator=g), torch.randint(0, 10, (48,), generator=g)
    return Data(TensorDataset(x[:32], y[:32]), TensorDataset(x[32:], y[32:]))


@pytest.mark.parametrize("kind", [TupleOut, DictOut], ids=["tuple", "dict"])
def test_tuple_and_dict_outputs_are_read_for_their_logits(kind):
    model = kind().eval()
    report = sp.compare(model, copy.deepcopy(model), "net.block2", _data(), ["cka-linear", "stitch-dm", "stitch-slm"],
                        options={"epochs": 1, "batch_size": 16})
    for row in report:
        assert row.ok, (row.metric, row.error)
    assert report["stitch-dm"].score == 1.0 and report["cka-linear"].score == pytest.approx(1.0, abs=1e-9)


def test_an_output_without_logits_is_refused_naming_the_fix():
    class Nested(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = tiny_cnn()

        def forward(self, x):
            return {"a": self.net(x), "b": x.sum()}

    model = Nested().eval()
    row = sp.compare(model, model, "net.block2", _data(), "stitch-dm", options={"epochs": 1, "batch_size": 16})["stitch-dm"]
    assert "returns a dict" in row.error and "forward returns the logits" in row.error, row.error


def test_score_takes_arrays_with_negative_strides():
    a = np.random.default_rng(0).normal(size=(30, 5))
    reversed_rows, reversed_cols = a[::-1], a[:, ::-1]
    assert sp.score(reversed_rows, a[::-1].copy(), "cka-linear")["cka-linear"].score == pytest.approx(1.0, abs=1e-12)
    same = sp.score(a, a, "cka-linear")["cka-linear"].score
    assert sp.score(reversed_cols, a, "cka-linear")["cka-linear"].score == pytest.approx(same, abs=1e-12)
