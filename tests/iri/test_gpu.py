"""GPU tests for the IRI optimiser: the CuPy backend (fused kernel, DLPack views) against the torch reference.

Skipped cleanly without CUDA or without CuPy. Run: ``python -m pytest tests/iri/test_gpu.py -q``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)
cupy = pytest.importorskip("cupy", reason="needs CuPy (pip install 'similarity-plugins[gpu]')")

from similarity_plugins.iri import generate_iris  # noqa: E402
from similarity_plugins.iri.backends import cupy_backend, resolve_backend, torch_backend  # noqa: E402
from similarity_plugins.iri.kernels import update_kernel  # noqa: E402

DEVICE = torch.device("cuda")


def _smooth_cnn() -> nn.Module:
    """A smooth front (tanh, average pooling): rounding differences between backends do not get amplified
    by ReLU/max-pool switches, so trajectories stay within float32 noise of each other."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.Tanh(), nn.AvgPool2d(2),
                         nn.Conv2d(8, 8, 3, padding=1), nn.Tanh(), nn.AvgPool2d(2), nn.Flatten(),
                         nn.Linear(8 * 4 * 4, 10)).to(DEVICE).eval()


def test_auto_picks_cupy_on_cuda():
    assert resolve_backend("auto", DEVICE).name == "cupy"


def test_dlpack_views_are_zero_copy():
    t = torch.zeros(4, 5, device=DEVICE)
    a = cupy_backend().view(t)
    assert a.data.ptr == t.data_ptr()
    a += 1
    torch.cuda.synchronize()
    assert float(t.sum()) == 20.0
    back = torch.from_dlpack(a)
    assert back.data_ptr() == t.data_ptr()


def test_fused_update_matches_torch_reference():
    g0 = torch.Generator(device=DEVICE).manual_seed(0)
    x0 = torch.rand(16, 3000, device=DEVICE, generator=g0)
    grads = [torch.randn(16, 3000, device=DEVICE, generator=g0) for _ in range(50)]
    out = []
    for be in (cupy_backend(), torch_backend()):
        x, best, m, v = x0.clone(), x0.clone(), torch.zeros_like(x0), torch.zeros_like(x0)
        kernel = update_kernel(be, (0.9, 0.999, 1e-8))
        col = lambda a: be.column(np.asarray(a, dtype=np.float32), DEVICE)  # noqa: E731
        with be.stream(DEVICE):
            for t, g in enumerate(grads, start=1):
                imp = col(np.arange(16) % (t % 3 + 1) == 0)
                kernel(be.view(x), be.view(g), be.view(m), be.view(v), be.view(best), imp, col([0.05] * 16),
                       col([1 - 0.9 ** t] * 16), col([1 - 0.999 ** t] * 16))
        torch.cuda.synchronize()
        out.append((x, best))
    assert float((out[0][0] - out[1][0]).abs().max()) <= 1e-5
    assert float((out[0][1] - out[1][1]).abs().max()) <= 1e-5


def test_cupy_and_torch_backends_agree_after_50_steps():
    model = _smooth_cnn()
    seeds = torch.rand(32, 3, 16, 16)
    kw = dict(steps=50, tol=1e-9, optimizer="adam", progress="never")
    a = generate_iris(model, "5", seeds, backend="cupy", **kw)
    b = generate_iris(model, "5", seeds, backend="torch", **kw)
    assert a.stats["backend"] == "cupy" and b.stats["backend"] == "torch"
    assert a.inputs.device == seeds.device  # results come back where the seeds were
    assert float((a.inputs - b.inputs).abs().max()) <= 1e-5
    assert torch.allclose(a.rel_error, b.rel_error, atol=1e-5)


def test_lbfgs_cupy_and_torch_backends_agree():
    """L-BFGS: the backend runs only the trial update and best copy (cupy.fuse may contract to FMA), so one
    step agrees tightly and 50 steps agree in quality. (Written without a GPU at hand: unverified.)"""
    model = _smooth_cnn()
    seeds = torch.rand(32, 3, 16, 16)
    for steps, tight in ((2, True), (50, False)):
        kw = dict(steps=steps, tol=1e-9, optimizer="lbfgs", progress="never")
        a = generate_iris(model, "5", seeds, backend="cupy", **kw)
        b = generate_iris(model, "5", seeds, backend="torch", **kw)
        if tight:
            assert float((a.inputs - b.inputs).abs().max()) <= 1e-5
        else:
            ma, mb = float(a.rel_error.median()), float(b.rel_error.median())
            assert abs(ma - mb) <= 0.5 * max(ma, mb), (ma, mb)


def test_gpu_run_leaves_model_unchanged_and_converges():
    model = _smooth_cnn()
    model.train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    seeds = torch.rand(64, 3, 16, 16, device=DEVICE)
    iris = generate_iris(model, "6", seeds, steps=300, progress="never", batch_size=16)
    assert iris.inputs.device.type == "cuda"
    assert model.training and all(m.training for m in model.modules())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert iris.summary["median_error"] <= 1e-2
