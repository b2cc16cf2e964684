"""Mixed precision of the IRI optimiser on CUDA: bfloat16 autocast steps, a float32 finish, TF32 restored.

Skipped without CUDA. Run: ``python -m pytest tests/iri/test_precision_gpu.py -q``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

from similarity_plugins.iri import generate_iris  # noqa: E402
from similarity_plugins.iri import precision as prec  # noqa: E402

DEVICE = torch.device("cuda")


def _cnn() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(16, 16, 3, padding=1), nn.ReLU()).to(DEVICE).eval()


def _seeds(n: int = 8) -> torch.Tensor:
    return torch.rand(n, 3, 16, 16, generator=torch.Generator().manual_seed(3)).to(DEVICE)


def test_auto_uses_bfloat16_on_a_bfloat16_gpu():
    used, why = prec.resolve_precision("auto", DEVICE, prec.AUTO_MIN_FLOPS * 10)
    assert used == ("bfloat16" if prec.device_has_bf16(DEVICE) else "float32"), why
    assert prec.memory_format(DEVICE, "float32", _cnn()) == torch.channels_last


def test_bfloat16_on_cuda_reports_float32_errors_and_restores_tf32():
    model, seeds = _cnn(), _seeds()
    before = torch.get_float32_matmul_precision()
    iris = generate_iris(model, "5", seeds, steps=60, tol=2e-2, precision="bfloat16", progress="never")
    assert torch.get_float32_matmul_precision() == before
    assert iris.settings["precision"] == "bfloat16" and iris.inputs.device.type == "cuda"
    with torch.no_grad():
        a, b = model(iris.inputs).flatten(1), model(seeds).flatten(1)
    err = (torch.linalg.vector_norm(a - b, dim=1) / torch.linalg.vector_norm(b, dim=1)).double().cpu().numpy()
    np.testing.assert_allclose(iris.rel_error.numpy(), err, rtol=1e-3, atol=1e-5)
    assert all(p.is_contiguous() for p in model.parameters())
