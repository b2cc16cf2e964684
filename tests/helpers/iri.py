"""What the IRI tests share: a 3-block CNN and a residual block, 16x16 digit tensors, a short fit, the relative
error of a cut, a run interrupted on purpose and NumPy dressed as CuPy."""

from __future__ import annotations

import types

import numpy as np
import torch
from torch import nn


def iri_cnn(width: int = 8) -> nn.Module:
    """Three conv-BN-ReLU-maxpool blocks (no conv bias), flatten, linear to 10 classes; input (N, 1, 16, 16)."""
    def block(cin: int, cout: int) -> nn.Sequential:
        return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
                             nn.MaxPool2d(2))

    return nn.Sequential(block(1, width), block(width, width), block(width, width), nn.Flatten(),
                         nn.Linear(width * 2 * 2, 10))


class ResidualBlock(nn.Module):
    """conv-BN-ReLU-conv-BN, plus the input, then ReLU (one in-place ReLU module called twice); ``w`` channels."""

    def __init__(self, w: int) -> None:
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(w, w, 3, padding=1, bias=False), nn.BatchNorm2d(w)
        self.c2, self.b2 = nn.Conv2d(w, w, 3, padding=1, bias=False), nn.BatchNorm2d(w)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(self.b2(self.c2(self.relu(self.b1(self.c1(x))))) + x)


def digit_tensors16() -> tuple[torch.Tensor, torch.Tensor]:
    """sklearn's 1797 digits as (N, 1, 16, 16) float32 images in [0, 1] and their (N,) int64 labels."""
    from similarity_plugins.datasets import digits

    return digits(None, size=16).tensors


def fit_adam(model: nn.Module, x: torch.Tensor, y: torch.Tensor, epochs: int = 3) -> nn.Module:
    """``model`` trained ``epochs`` epochs of Adam (lr 3e-3, batch 64, fixed order) on (x, y); in eval mode."""
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(0)
    model.train()
    for _ in range(epochs):
        for idx in torch.randperm(len(x), generator=g).split(64):
            opt.zero_grad()
            nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
            opt.step()
    return model.eval()


def rel_error(model: nn.Module, layer: str, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """(N,) relative error ``||f(a) - f(b)|| / ||f(b)||`` of the output of module ``layer``, row by row."""
    acts = {}
    handle = dict(model.named_modules())[layer].register_forward_hook(lambda m, i, o: acts.__setitem__("o", o))
    with torch.no_grad():
        model(a)
        fa = acts["o"].flatten(1)
        model(b)
        fb = acts["o"].flatten(1)
    handle.remove()
    return (fa - fb).norm(dim=1) / fb.norm(dim=1)


class Interrupted(Exception):
    """What :func:`interrupt_at`'s callback raises: a run killed mid-way (the resume tests)."""


def interrupt_at(step: int):
    """A ``callback`` for ``generate_iris`` that raises :class:`Interrupted` after batch step ``step``."""
    def callback(info: dict) -> None:
        if info["step"] == step:
            raise Interrupted

    return callback


def fake_cupy() -> types.SimpleNamespace:
    """NumPy dressed as CuPy, to run the CuPy backend's CPU-side code (fuse is the identity here)."""
    return types.SimpleNamespace(sqrt=np.sqrt, maximum=np.maximum, minimum=np.minimum, linalg=np.linalg,
                                 from_dlpack=np.from_dlpack, asarray=np.asarray, fuse=lambda f: f)
