"""Fixtures of the IRI tests."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tests.helpers.iri import digit_tensors16, fit_adam, iri_cnn


@pytest.fixture(scope="session")
def trained() -> tuple[nn.Module, torch.Tensor]:
    """A 3-block CNN (conv-BN-ReLU-maxpool) trained for a few epochs on 16x16 digits, and 16 seed images.

    Trained once a session (tests must not change it; those that need a changed model load its weights into a
    copy), from a fixed seed, leaving the global random state as it was."""
    x, y = digit_tensors16()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = fit_adam(iri_cnn(), x, y)
    with torch.no_grad():
        acc = (model(x).argmax(1) == y).float().mean().item()
    assert acc > 0.8, f"fixture model failed to train (accuracy {acc:.2f})"
    return model, x[:16].clone()
