"""Tiny models built inside the tests (nothing is ever fetched)."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn


def tiny_cnn(num_classes: int = 10, in_channels: int = 1, width: int = 8, seed: int = 0) -> nn.Module:
    """A 3-block CNN with BatchNorm: block1..block3, pool, flatten, fc. Input (N, in_channels, 16, 16).

    Initial weights depend only on ``seed`` (the caller's global RNG state is left as it was)."""

    def block(cin: int, cout: int) -> nn.Sequential:
        return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(), nn.MaxPool2d(2))

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = nn.Sequential()
        model.add_module("block1", block(in_channels, width))
        model.add_module("block2", block(width, 2 * width))
        model.add_module("block3", block(2 * width, 2 * width))
        model.add_module("pool", nn.AdaptiveAvgPool2d(1))
        model.add_module("flatten", nn.Flatten())
        model.add_module("fc", nn.Linear(2 * width, num_classes))
    return model


class TwoHeaded(nn.Module):
    """A module tree (not Sequential) whose `split` layer returns a tuple, for error tests."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(1, 4, 3, padding=1)
        self.split = _Split()
        self.head = nn.Linear(4 * 16 * 16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = self.split(self.stem(x))
        return self.head((a + b).flatten(1))


class _Split(nn.Module):
    def forward(self, x: torch.Tensor):
        return x, x * 2


def snapshot(model: nn.Module) -> dict:
    """Everything that must not change: state dict values, training flags, requires_grad flags."""
    return {
        "state": {k: v.detach().clone() for k, v in model.state_dict().items()},
        "training": [m.training for m in model.modules()],
        "grad": [p.requires_grad for p in model.parameters()],
    }


def assert_unchanged(model: nn.Module, before: dict) -> None:
    """Assert a model is bit-identical to its snapshot."""
    after = snapshot(model)
    assert after["training"] == before["training"], "training flags changed"
    assert after["grad"] == before["grad"], "requires_grad flags changed"
    assert after["state"].keys() == before["state"].keys()
    for k, v in before["state"].items():
        assert torch.equal(v, after["state"][k]), f"{k} changed"


class Channel(nn.Module):
    """Reads one channel of a (N, C, ...) input: models reading different channels see different data."""

    def __init__(self, channel: int) -> None:
        super().__init__()
        self.channel = channel

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, self.channel]


def child_activations(model: nn.Module, inputs: torch.Tensor, layer: str) -> np.ndarray:
    """The output of ``model``'s direct child ``layer`` (an ``nn.Sequential``) on ``inputs``, flattened, float64."""
    x = inputs
    with torch.no_grad():
        for name, module in model.named_children():
            x = module(x)
            if name == layer:
                return x.double().flatten(1).numpy()
    raise AssertionError(f"no child {layer!r}")
