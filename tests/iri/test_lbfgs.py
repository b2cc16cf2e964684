"""Tests for the default IRI optimiser, per-sample L-BFGS (similarity_plugins.iri.lbfgs), and resume via the CLI."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from similarity_plugins.iri import RunOptions, Settings, generate_iris, optimize_iris
from similarity_plugins.iri.backends import cupy_backend, numpy_backend, torch_backend
from similarity_plugins.iri.kernels import best_copy_kernel, trial_kernel
from similarity_plugins.iri.lbfgs import two_loop_ring
from tests.helpers.iri import Interrupted, fake_cupy, interrupt_at, iri_cnn, rel_error
from tests.helpers.tolerance import FLOAT32_PATHS

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.slow  # seconds of IRI steps; the fast suite keeps the README's time limit
def test_lbfgs_converges_at_a_deep_layer(trained):
    model, seeds = trained
    iris = generate_iris(model, "2", seeds, steps=300, optimizer="lbfgs", progress="never")
    s = iris.summary
    assert s["settings"]["optimizer"] == "lbfgs" and s["settings"]["fake_relu"] == "last"
    assert s["settings"]["history"] == 30
    assert s["median_error"] <= 1e-2 and s["converged_fraction"] >= 0.75, s
    true = rel_error(model, "2", iris.inputs, seeds)
    assert torch.allclose(true.double(), iris.rel_error, rtol=1e-3, atol=1e-6)
    assert float(iris.seed_distance.mean()) > 0.2    # far from the seeds, as Adam's
    assert float(iris.inputs.min()) >= 0.0 and float(iris.inputs.max()) <= 1.0
    # fewer steps than Adam on the converged samples
    adam = generate_iris(model, "2", seeds, steps=300, optimizer="adam", progress="never")
    assert float(iris.steps.double().median()) < 0.7 * float(adam.steps.double().median())


def two_loop(g: torch.Tensor, s_hist: torch.Tensor, y_hist: torch.Tensor, rho: torch.Tensor,
             count: torch.Tensor) -> torch.Tensor:
    """:func:`two_loop_ring` for histories stored newest last, of which the newest ``count`` (B,) are valid."""
    m = s_hist.shape[1]
    valid = (torch.arange(m, device=g.device)[None, :] >= (m - count)[:, None]).to(g.dtype)
    sy = (s_hist[:, -1] * y_hist[:, -1]).sum(dim=1)
    yy = (y_hist[:, -1] * y_hist[:, -1]).sum(dim=1)
    gamma = torch.where(count > 0, sy / yy.clamp_min(torch.finfo(g.dtype).tiny), torch.ones_like(sy))
    return two_loop_ring(g, s_hist, y_hist, rho, valid, m - 1, gamma)


def test_two_loop_satisfies_the_secant_equation_per_row():
    """The recursion applies the L-BFGS inverse Hessian H, which maps the newest y onto the newest s
    (H y = s), is positive definite (a descent direction for any g), and rows use only their own history."""
    torch.manual_seed(0)
    d, m = 6, 4
    q = torch.randn(d, d, dtype=torch.float64)
    a = q @ q.T + d * torch.eye(d, dtype=torch.float64)
    s = torch.randn(2, m, d, dtype=torch.float64)
    y = s @ a                             # y_i = A s_i, so s.y > 0
    rho = 1.0 / (s * y).sum(-1)
    count = torch.tensor([m, 2])
    out = two_loop(y[:, -1], s, y, rho, count)
    assert torch.allclose(out, -s[:, -1], atol=1e-10)
    g = torch.randn(2, d, dtype=torch.float64)
    assert bool(((two_loop(g, s, y, rho, count) * g).sum(1) < 0).all())
    s2 = s.clone()
    s2[1, :2] = 99.0                      # row 1 ignores its invalid (oldest) pairs ...
    assert torch.equal(two_loop(g, s2, y, rho, count)[1], two_loop(g, s, y, rho, count)[1])
    assert torch.equal(two_loop(g[:1], s[:1], y[:1], rho[:1], count[:1]), two_loop(g, s, y, rho, count)[:1])
    assert torch.equal(two_loop(g, s, y, rho, torch.tensor([0, 0])), -g)   # ... and no history gives -g


def test_lbfgs_batch_size_independent(trained):
    model = iri_cnn().double()
    model.load_state_dict(trained[0].state_dict())
    model.eval()
    seeds = trained[1][:10].double()
    kw = dict(steps=80, tol=3e-2, optimizer="lbfgs", progress="never")
    big = generate_iris(model, "2", seeds, batch_size=len(seeds), **kw)
    small = generate_iris(model, "2", seeds, batch_size=5, **kw)
    assert int(big.steps.min()) < int(big.steps.max())  # samples leave at different steps: slots are refilled
    assert small.stats["batch_steps"] > big.stats["batch_steps"]
    assert torch.equal(small.steps, big.steps)
    assert float((small.inputs - big.inputs).abs().max()) <= 1e-6


@pytest.mark.slow  # three runs; the fast suite resumes L-BFGS through the CLI (test_cli_checkpoint_every_resumes)
def test_lbfgs_resume_is_identical(trained, tmp_path):
    model, seeds = trained
    kw = dict(steps=60, tol=1e-2, batch_size=6, optimizer="lbfgs", progress="never")
    reference = generate_iris(model, "2", seeds, **kw)
    with pytest.raises(Interrupted):
        generate_iris(model, "2", seeds, cache_dir=tmp_path, checkpoint_every=10, callback=interrupt_at(27), **kw)
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".pt") and not p.endswith(".ckpt.pt")]
    resumed = generate_iris(model, "2", seeds, cache_dir=tmp_path, checkpoint_every=10, **kw)
    assert resumed.stats["resumed"]
    assert torch.equal(resumed.inputs, reference.inputs) and torch.equal(resumed.steps, reference.steps)


def test_lbfgs_backends_agree_bit_for_bit(trained):
    """L-BFGS's reductions run in torch; the backend runs only arithmetic kernels, so the runs are identical."""
    model, seeds = trained
    kw = dict(steps=40, tol=1e-9, optimizer="lbfgs", progress="never")
    a = generate_iris(model, "2", seeds[:6], backend="numpy", **kw)
    b = generate_iris(model, "2", seeds[:6], backend="torch", **kw)
    assert a.stats["backend"] == "numpy" and b.stats["backend"] == "torch"
    assert torch.equal(a.inputs, b.inputs) and torch.equal(a.rel_error, b.rel_error)


def test_lbfgs_kernels_same_on_every_backend():
    g0 = torch.Generator().manual_seed(2)
    z, d = torch.randn(5, 30, generator=g0), torch.randn(5, 30, generator=g0)
    out = []
    for be in (numpy_backend(), torch_backend(), cupy_backend(fake_cupy())):
        zt = torch.zeros_like(z)
        trial_kernel(be)(be.view(zt), be.view(z), be.view(d), be.column(np.linspace(0.1, 1, 5, dtype=np.float32),
                                                                       torch.device("cpu")))
        x, best = torch.rand(5, 30, generator=torch.Generator().manual_seed(3)), torch.zeros(5, 30)
        best_copy_kernel(be)(be.view(x), be.view(best), be.column(np.array([1, 0, 1, 1, 0], dtype=np.float32),
                                                                  torch.device("cpu")))
        out.append((zt, best))
    for zt, best in out[1:]:
        assert torch.equal(zt, out[0][0]) and torch.equal(best, out[0][1])
    assert torch.equal(out[0][1][1], torch.zeros(30)) and torch.equal(out[0][1][0], x[0])
    assert torch.allclose(out[0][0], z + torch.linspace(0.1, 1, 5)[:, None] * d, **FLOAT32_PATHS)


def test_lbfgs_bad_settings_name_the_fix(trained):
    model, seeds = trained
    for name, value in (("history", 0), ("armijo", 0.7), ("max_backtracks", 0), ("history", 2.5)):
        with pytest.raises(ValueError, match=f"{name} must be"):
            generate_iris(model, "2", seeds, steps=2, optimizer="lbfgs", progress="never", tuning={name: value})
    with pytest.raises(ValueError, match="apply only to optimizer adam"):   # never a silent switch to Adam
        generate_iris(model, "2", seeds, steps=2, optimizer="lbfgs", progress="never", cycle_steps=50)
    with pytest.raises(ValueError, match="apply only to optimizer lbfgs"):
        generate_iris(model, "2", seeds, steps=2, optimizer="adam", progress="never", tuning={"history": 5})


class _NanRow(torch.autograd.Function):
    """Identity whose gradient is NaN in row 3 of the batch (sample 3 when all samples share one batch)."""

    @staticmethod
    def forward(ctx, x):  # noqa: D102
        return x.clone()

    @staticmethod
    def backward(ctx, g):  # noqa: D102
        g = g.clone()
        g[3] = float("nan")
        return g


def test_lbfgs_nan_names_the_samples(tmp_path):
    seeds = torch.full((5, 1, 4, 4), 0.3)
    with pytest.raises(FloatingPointError, match=r"seed\(s\) \[3\]"):
        optimize_iris(lambda x: _NanRow.apply(x).mean(dim=(2, 3)), seeds, Settings.of("lbfgs", steps=5, tol=1e-9),
                      RunOptions(progress="never"))


def test_cli_checkpoint_every_resumes(tmp_path, capsys, monkeypatch):
    """``iris --checkpoint-every``: a run killed mid-way resumes from its checkpoint and gives the IRIs of an
    uninterrupted run; nothing is cached until a run completes."""
    from similarity_plugins import cli
    from similarity_plugins.iri import generate as generate_module
    from similarity_plugins.iri.store import load_iris

    args = ["iris", "--model", "small-cnn", "--layer", "block2", "--data", "digits", "--max-seeds", "6",
            "--steps", "30", "--batch-size", "4", "--optimizer", "lbfgs", "--no-progress"]
    torch.manual_seed(0)           # the same (untrained) small-cnn weights in every call
    assert cli.main(args + ["--out", str(tmp_path / "ref.npz")]) == 0
    real = generate_module.generate_iris

    class Killed(Exception):
        pass

    def killed(*a, **k):
        def bomb(info: dict) -> None:
            if info["step"] == 17:
                raise Killed

        return real(*a, callback=bomb, **k)

    cache = tmp_path / "cache"
    monkeypatch.setattr(generate_module, "generate_iris", killed)
    monkeypatch.setattr("similarity_plugins.iri.generate_iris", killed)
    torch.manual_seed(0)
    with pytest.raises(Killed):
        cli.main(args + ["--cache-dir", str(cache), "--checkpoint-every", "5", "--out", str(tmp_path / "a.npz")])
    files = os.listdir(cache)
    assert [f for f in files if f.endswith(".ckpt.pt")] and not [f for f in files if not f.endswith(".ckpt.pt")]
    monkeypatch.undo()
    seen = {}

    def recording(*a, **k):
        iris = real(*a, **k)
        seen["resumed"] = iris.stats["resumed"]
        return iris

    monkeypatch.setattr("similarity_plugins.iri.generate_iris", recording)
    torch.manual_seed(0)
    assert cli.main(args + ["--cache-dir", str(cache), "--checkpoint-every", "5", "--out", str(tmp_path / "b.npz")]) == 0
    assert seen["resumed"]
    ref, _ = load_iris(tmp_path / "ref.npz")
    resumed, _ = load_iris(tmp_path / "b.npz")
    assert torch.equal(ref.inputs, resumed.inputs) and torch.equal(ref.rel_error, resumed.rel_error)
    assert not [f for f in os.listdir(cache) if f.endswith(".ckpt.pt")]
    assert cli.main(args + ["--checkpoint-every", "5", "--out", str(tmp_path / "c.npz")]) == 2
    assert "cache_dir" in capsys.readouterr().err
