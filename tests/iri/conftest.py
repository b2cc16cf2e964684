"""Fixtures of the IRI tests."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tests.helpers.iri import digit_tensors16, fit_adam, iri_cnn


@pytest.fixture(scope="module")
def trained() -> tuple[nn.Module, torch.Tensor]:
    """A 3-block CNN (conv-BN-ReLU-maxpool) trained for a few epochs on 16x16 digits, and 16 seed images."""
    torch.manual_seed(0)
    x, y = digit_tensors16()
    model = fit_adam(iri_cnn(), x, y)
    with torch.no_grad():
        acc = (model(x).argmax(1) == y).float().mean().item()
    assert acc > 0.8, f"fixture model failed to train (accuracy {acc:.2f})"
    return model, x[:16].clone()
