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


def fit_adam(model: nn.Module, x: torch.Tensor, y: torch.Tensor, epochs: int = 3, lr: float = 3e-3) -> nn.Module:
    """``model`` trained ``epochs`` epochs of Adam (``lr``, batch 64, a fixed order) on (x, y); in eval mode."""
    opt = torch.optim.Adam(model.parameters(), lr=lr)
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


def torchvision_cut(arch: str, layer: str, shape: tuple[int, ...]) -> tuple:
    """A torchvision ``arch`` (10 classes, eval mode, built after ``torch.manual_seed(0)``) cut at ``layer``, and
    inputs of ``shape`` drawn after it: ``(model, split, x, folded front, the unfolded front's output on x)``."""
    from similarity_plugins.iri.front import folded_front
    from similarity_plugins.networks.split import SplitNetwork

    model = torchvision_model(arch)
    split = SplitNetwork(model, layer)
    x = torch.rand(*shape)
    with torch.no_grad():
        ref = split.front(x)
    return model, split, x, folded_front(split.front_graph), ref


def torchvision_model(arch: str) -> nn.Module:
    """torchvision's ``arch`` with 10 classes in eval mode, built after ``torch.manual_seed(0)``."""
    import torchvision

    torch.manual_seed(0)
    return getattr(torchvision.models, arch)(num_classes=10).eval()


def checked_torchvision_iris(arch: str, layer: str) -> tuple:
    """IRIs (3 steps) of two random 3x32x32 seeds at ``layer`` of `torchvision_model` ``arch``, after checking that
    their reported relative errors are those of the plain (unfolded) front and that the model is unchanged:
    ``(model, seeds, iris)``."""
    from similarity_plugins.iri import generate_iris
    from similarity_plugins.networks.split import SplitNetwork

    model = torchvision_model(arch)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    seeds = torch.rand(2, 3, 32, 32)
    iris = generate_iris(model, layer, seeds, steps=3, progress="never")
    with torch.no_grad():
        front = SplitNetwork(model, layer).front
        target, reached = front(seeds), front(iris.inputs)
    true = (reached - target).flatten(1).norm(dim=1) / target.flatten(1).norm(dim=1)
    torch.testing.assert_close(iris.rel_error.float(), true, rtol=1e-4, atol=1e-6)
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())
    return model, seeds, iris
