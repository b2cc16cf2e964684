"""Tests for the batched IRI optimiser (similarity_plugins.iri). Fast: tiny models, few seeds, CPU only."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from torch import nn

from similarity_plugins.iri import IRISet, RunOptions, Settings, generate_iris, optimize_iris
from similarity_plugins.iri.backends import cupy_backend, numpy_backend, resolve_backend, torch_backend
from similarity_plugins.iri.kernels import update_kernel
from similarity_plugins.iri.relu import straight_through_relu, trace_front
from similarity_plugins.iri.state import derangement
from tests.helpers.iri import Interrupted, fake_cupy, interrupt_at, iri_cnn, rel_error
from tests.helpers.repo import load_repo_module

pytestmark = pytest.mark.usefixtures("one_torch_thread")

QUIET = RunOptions(progress="never")


# ------------------------------------------------------------------------------------------- quality


def test_fidelity_at_a_deep_layer(trained):
    model, seeds = trained
    # layer "2": the third block's output, 8 x 2 x 2 = 32 values for 256 input pixels.
    iris = generate_iris(model, "2", seeds, steps=300, tol=1e-2, optimizer="adam", progress="never")
    assert isinstance(iris, IRISet)
    assert iris.inputs.shape == seeds.shape and iris.inputs.dtype == seeds.dtype
    assert float(iris.inputs.min()) >= 0.0 and float(iris.inputs.max()) <= 1.0
    s = iris.summary
    assert s["median_error"] <= 1e-2, s
    assert s["converged_fraction"] >= 0.9 and s["p95_error"] <= 2e-2, s
    # honest reporting: the reported error is the true error of the returned input
    true = rel_error(model, "2", iris.inputs, seeds)
    assert torch.allclose(true.double(), iris.rel_error, rtol=1e-3, atol=1e-6)
    # IRIs are far from their seeds (the layer discards information); RMS distance in pixel units
    assert float(iris.seed_distance.min()) > 0.05, iris.seed_distance
    assert torch.allclose(iris.seed_distance, (iris.inputs - seeds).double().flatten(1).pow(2).mean(1).sqrt())
    # converged samples stopped early; nobody exceeded the budget
    assert int(iris.steps.max()) <= 300 and int(iris.steps[iris.converged].max()) < 300
    assert callable(iris.summary) and iris.summary() == s
    assert {"median_error", "p95_error", "converged_fraction", "mean_seed_distance", "settings"} <= set(s)


def test_fake_relu_beats_plain_gradients(trained):
    model, seeds = trained
    common = dict(steps=60, tol=1e-9, optimizer="adam", progress="never")
    fake = generate_iris(model, "2", seeds[:8], tuning={"fake_relu": "last"}, **common).summary["median_error"]
    plain = generate_iris(model, "2", seeds[:8], tuning={"fake_relu": "none"}, **common).summary["median_error"]
    assert fake < plain


# ------------------------------------------------------------------------------------------ backends


def test_numpy_and_torch_backends_agree_after_50_steps(trained):
    model, seeds = trained
    kw = dict(steps=50, tol=1e-9, progress="never")
    a = generate_iris(model, "2", seeds[:8], backend="numpy", **kw)
    b = generate_iris(model, "2", seeds[:8], backend="torch", **kw)
    assert a.stats["backend"] == "numpy" and b.stats["backend"] == "torch"
    assert float((a.inputs - b.inputs).abs().max()) <= 1e-5
    assert torch.allclose(a.rel_error, b.rel_error, atol=1e-5)


def test_update_step_same_on_every_backend():
    g0 = torch.Generator().manual_seed(1)
    x0 = torch.rand(6, 50, generator=g0)
    grads = [torch.randn(6, 50, generator=g0) for _ in range(50)]
    results = []
    for be in (numpy_backend(), torch_backend(), cupy_backend(fake_cupy())):
        x, best = x0.clone(), x0.clone()
        m, v = torch.zeros_like(x), torch.zeros_like(x)
        kernel = update_kernel(be, (0.9, 0.999, 1e-8))
        col = lambda a: be.column(np.asarray(a, dtype=np.float32), torch.device("cpu"))  # noqa: E731
        for t, g in enumerate(grads, start=1):
            imp = col([t % 2, 1, 0, 1, 1, 0])
            kernel(be.view(x), be.view(g), be.view(m), be.view(v), be.view(best), imp, col([0.05] * 6),
                   col([1 - 0.9 ** t] * 6), col([1 - 0.999 ** t] * 6))
        results.append((x, best))
    for x, best in results[1:]:
        assert float((x - results[0][0]).abs().max()) <= 1e-6
        assert float((best - results[0][1]).abs().max()) <= 1e-6
    assert float(results[0][0].min()) >= 0 and float(results[0][0].max()) <= 1


def test_auto_backend_and_errors():
    assert resolve_backend("auto", torch.device("cpu")).name == "numpy"
    with pytest.raises(ValueError, match="unknown backend"):
        resolve_backend("jax", torch.device("cpu"))
    with pytest.raises(ValueError, match="CUDA"):
        resolve_backend("cupy", torch.device("cpu"))


def test_dlpack_views_share_memory():
    t = torch.zeros(3, 4)
    be = numpy_backend()
    a = be.view(t)
    a += 1.0
    assert float(t.sum()) == 12.0


# ------------------------------------------------------------------------------- continuous batching


def test_continuous_batching_matches_one_big_batch(trained):
    model, seeds = trained
    # A mix of samples that converge at different steps and samples that use the whole budget, so slots
    # are refilled and compacted. The front runs in eval mode, so samples are independent, but batched
    # float32 convolutions round differently for different batch sizes, and a ReLU/max-pool network
    # amplifies such 1-ulp differences along a trajectory (an argmax flips). In float64 the rounding
    # differences are ~1e-16 and the IRIs must agree to 1e-6.
    model = iri_cnn().double()
    model.load_state_dict(trained[0].state_dict())
    model.eval()
    seeds = seeds.double()
    kw = dict(steps=120, tol=3e-2, progress="never")
    big = generate_iris(model, "2", seeds, batch_size=len(seeds), **kw)
    small = generate_iris(model, "2", seeds, batch_size=5, **kw)
    assert big.inputs.dtype == torch.float64
    assert int(big.steps.min()) < int(big.steps.max())  # samples leave the batch at different steps
    assert small.stats["batch_steps"] > big.stats["batch_steps"]
    assert torch.equal(small.steps, big.steps)
    assert float((small.inputs - big.inputs).abs().max()) <= 1e-6
    assert torch.allclose(small.rel_error, big.rel_error, atol=1e-6)


def test_batch_stays_full_until_work_runs_out():
    sizes = []

    def front(x: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled():  # optimisation steps (target computations run without grad)
            sizes.append(x.shape[0])
        return nn.functional.avg_pool2d(x, 4)

    seeds = torch.rand(11, 1, 8, 8)
    iris = optimize_iris(front, seeds, Settings.of(steps=30, tol=0.05), RunOptions(batch_size=4, progress="never"))
    assert int(iris.steps.min()) < int(iris.steps.max())  # samples finish at different times
    first_small = next(i for i, c in enumerate(sizes) if c < 4)
    assert set(sizes[:first_small]) == {4}
    assert all(a >= b for a, b in zip(sizes[first_small:], sizes[first_small + 1:]))  # shrinks only at the end
    assert sum(sizes) == int(iris.steps.sum()) + len(seeds)  # every step of every sample, nothing else


# --------------------------------------------------------------------------------- cache and resume


def test_resume_after_interruption_is_identical(trained, tmp_path):
    model, seeds = trained
    kw = dict(steps=40, tol=1e-2, batch_size=6, progress="never")
    reference = generate_iris(model, "2", seeds, **kw)
    with pytest.raises(Interrupted):
        generate_iris(model, "2", seeds, cache_dir=tmp_path, checkpoint_every=10, callback=interrupt_at(23), **kw)
    ckpts = [p for p in os.listdir(tmp_path) if p.endswith(".ckpt.pt")]
    assert len(ckpts) == 1 and not [p for p in os.listdir(tmp_path) if p.startswith(".tmp")]
    steps_seen = []
    resumed = generate_iris(model, "2", seeds, cache_dir=tmp_path, checkpoint_every=10,
                            callback=lambda info: steps_seen.append(info["step"]), **kw)
    assert resumed.stats["resumed"] and steps_seen[0] == 21
    assert torch.equal(resumed.inputs, reference.inputs)
    assert torch.equal(resumed.rel_error, reference.rel_error) and torch.equal(resumed.steps, reference.steps)
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".ckpt.pt")]
    # finished sets are cached: the next call does not optimise at all
    again = generate_iris(model, "2", seeds, cache_dir=tmp_path, callback=lambda info: pytest.fail("recomputed"),
                          **kw)
    assert torch.equal(again.inputs, reference.inputs) and again.key == resumed.key


def test_cache_key_depends_on_weights_layer_seeds_and_settings(trained, tmp_path):
    model, seeds = trained
    kw = dict(steps=3, progress="never", cache_dir=tmp_path)
    base = generate_iris(model, "2", seeds[:2], **kw).key
    assert generate_iris(model, "2", seeds[:2], **kw).key == base
    assert generate_iris(model, "2", seeds[:2], batch_size=1, **kw).key == base  # batch size is not a setting
    assert generate_iris(model, "1", seeds[:2], **kw).key != base
    assert generate_iris(model, "2", seeds[1:3], **kw).key != base
    assert generate_iris(model, "2", seeds[:2], tuning={"lr": 0.01}, **kw).key != base
    other = iri_cnn()
    other.load_state_dict(model.state_dict())
    with torch.no_grad():
        other[4].weight.add_(1.0)  # the classifier head: not part of the front, same key
    assert generate_iris(other, "2", seeds[:2], **kw).key == base
    with torch.no_grad():
        other[0][0].weight.add_(1e-3)
    assert generate_iris(other, "2", seeds[:2], **kw).key != base


# ----------------------------------------------------------------------------------- donor untouched


def test_model_is_not_changed(trained):
    model, seeds = trained
    model = iri_cnn()
    model.load_state_dict(trained[0].state_dict())
    model.train()
    model[1].eval()
    model[0][0].weight.requires_grad_(False)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    flags = [m.training for m in model.modules()]
    grads = [p.requires_grad for p in model.parameters()]
    hooks = [(len(m._forward_hooks), len(m._forward_pre_hooks)) for m in model.modules()]
    generate_iris(model, "2", seeds[:4], steps=10, progress="never")
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # weights and BatchNorm buffers
    assert [m.training for m in model.modules()] == flags
    assert [p.requires_grad for p in model.parameters()] == grads
    assert all(p.grad is None for p in model.parameters())
    assert [(len(m._forward_hooks), len(m._forward_pre_hooks)) for m in model.modules()] == hooks


def test_front_runs_only_up_to_the_cut(trained):
    model, seeds = trained
    ran = []
    handles = [m.register_forward_pre_hook(lambda mod, inp, n=n: ran.append(n)) for n, m in model.named_modules() if n]
    try:
        generate_iris(model, "1", seeds[:2], steps=2, progress="never")
    finally:
        for h in handles:
            h.remove()
    assert ran and not any(n.split(".")[0] in ("2", "3", "4") for n in ran)


# ------------------------------------------------------------------------------------ straight-through


class _SharedInplaceRelu(nn.Module):
    """A residual-style block that reuses one in-place ReLU twice (as torchvision's BasicBlock does)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, padding=1)
        self.conv2 = nn.Conv2d(4, 4, 3, padding=1)
        self.relu = nn.ReLU(inplace=True)
        self.pool = nn.MaxPool2d(2)
        self.head = nn.Linear(4 * 4 * 4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.relu(self.conv1(x))
        h = self.relu(self.conv2(h) + h)
        return self.head(self.pool(h).flatten(1))


def test_straight_through_targets_last_call_of_shared_inplace_relu():
    torch.manual_seed(0)
    model = _SharedInplaceRelu().eval()
    x = torch.rand(3, 1, 8, 8)
    cut = lambda inp: model.pool(model.relu(model.conv2(model.relu(model.conv1(inp))) + 0))  # noqa: E731
    trace = trace_front(model, cut, x[:1])
    assert trace.last_relu == ("relu", 2)
    xr = x.clone().requires_grad_(True)
    with straight_through_relu(model, trace.last_relu) as reset:
        reset()
        out = cut(xr)
        (g_fake,) = torch.autograd.grad(out.sum(), xr)
    with torch.no_grad():
        assert torch.equal(out, cut(x))  # the forward value is exact
    xr2 = x.clone().requires_grad_(True)
    (g_true,) = torch.autograd.grad(cut(xr2).sum(), xr2)
    assert not torch.equal(g_fake, g_true)
    assert not model.relu._forward_hooks and not model.relu._forward_pre_hooks


# ------------------------------------------------------------------------------------------- options


def test_inits_are_deterministic_and_shuffle_is_a_derangement(trained):
    model, seeds = trained
    perm = derangement(9, seed=3)
    assert sorted(perm.tolist()) == list(range(9)) and not np.any(perm == np.arange(9))
    assert np.array_equal(perm, derangement(9, seed=3)) and not np.array_equal(perm, derangement(9, seed=4))
    # Adam: its first evaluation is at the start itself (L-BFGS clamps starts to [1e-3, 1 - 1e-3])
    a = optimize_iris(lambda x: x.mean(dim=(2, 3)), seeds[:6],
                      Settings.of("adam", steps=1, tol=1e-9, init="shuffle", tuning={"lr": 1e-9}), QUIET)
    donors = derangement(6, seed=0)
    assert torch.allclose(a.inputs, seeds[:6][torch.as_tensor(donors)], atol=1e-6)
    n1 = optimize_iris(lambda x: x.mean(dim=(2, 3)), seeds[:6], Settings.of(steps=1, tuning={"lr": 1e-9}, tol=1e-9), QUIET)
    n2 = optimize_iris(lambda x: x.mean(dim=(2, 3)), seeds[2:6], Settings.of(steps=1, tuning={"lr": 1e-9}, tol=1e-9), QUIET)
    assert not torch.allclose(n1.inputs[2:], n2.inputs)  # noise depends on the sample index ...
    n3 = optimize_iris(lambda x: x.mean(dim=(2, 3)), seeds[:6], Settings.of(steps=1, tuning={"lr": 1e-9}, tol=1e-9, seed=0),
                       RunOptions(batch_size=2, progress="never"))
    assert torch.equal(n1.inputs, n3.inputs)  # ... and on the seed, not on the batch
    assert abs(float(n1.inputs.mean()) - 0.5) < 0.02 and float(n1.inputs.std()) < 0.07


def test_progress_bar_runs(trained, capsys):
    model, seeds = trained
    generate_iris(model, "2", seeds[:3], steps=3, progress="always")  # "always": a bar even into a pipe
    assert "IRIs" in capsys.readouterr().err
    generate_iris(model, "2", seeds[:3], steps=3, progress="auto")      # "auto": a bar only on a terminal
    assert "IRIs" not in capsys.readouterr().err


# ------------------------------------------------------------------------------------------- errors


def test_bad_inputs_raise_clear_errors(trained):
    model, seeds = trained
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        generate_iris(model, "2", seeds * 2.0, steps=2, progress="never")
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        generate_iris(model, "2", seeds - 0.5, steps=2, progress="never")
    with pytest.raises(ValueError, match="not found") as info:
        generate_iris(model, "block9", seeds, steps=2, progress="never")
    assert "available" in str(info.value)
    for steps in (0, -5):
        with pytest.raises(ValueError, match="steps"):
            generate_iris(model, "2", seeds, steps=steps, progress="never")
    for tol in (0, -1e-3, float("nan")):
        with pytest.raises(ValueError, match="tol"):
            generate_iris(model, "2", seeds, tol=tol, progress="never")
    with pytest.raises(ValueError, match="optimizer"):
        generate_iris(model, "2", seeds, optimizer="sgd", progress="never")
    with pytest.raises(ValueError, match="init"):
        generate_iris(model, "2", seeds, init="zeros", progress="never")
    with pytest.raises(TypeError, match="unknown option"):
        generate_iris(model, "2", seeds, lr_schedule="cosine", progress="never")
    with pytest.raises(ValueError, match="cache_dir"):
        generate_iris(model, "2", seeds, checkpoint_every=5, progress="never")
    for value in (-1, 2.5):
        with pytest.raises(ValueError, match="cycle_steps must be") as info:
            generate_iris(model, "2", seeds, steps=2, progress="never", cycle_steps=value)
        assert repr(value) in str(info.value)
    bad_tuning = [("cycle_mult", 0.5), ("cycle_decay", 0.0), ("beta1", 1.0), ("beta2", -0.1), ("eps", 0.0),
                  ("lr", 0.0), ("lr", float("nan")), ("relu_leak", 1.0), ("beta1", True)]
    for name, value in bad_tuning:
        with pytest.raises(ValueError, match=f"{name} must be") as info:
            generate_iris(model, "2", seeds, steps=2, progress="never", optimizer="adam", tuning={name: value})
        assert repr(value) in str(info.value)


class _NanGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):  # noqa: D102
        ctx.save_for_backward(x)
        return x.clone()

    @staticmethod
    def backward(ctx, g):  # noqa: D102
        (x,) = ctx.saved_tensors
        bad = x.flatten(1)[:, 0] > 0.99  # rows that start from the marked seed image
        g = g.clone()
        g[bad] = float("nan")
        return g


def test_nan_gradients_name_the_samples():
    seeds = torch.full((6, 1, 4, 4), 0.3)
    seeds[4, 0, 0, 0] = 1.0  # marked; with init="shuffle" sample donors^-1[4] starts from it
    donors = derangement(6, seed=0)
    culprit = int(np.flatnonzero(donors == 4)[0])
    with pytest.raises(FloatingPointError, match=rf"seed\(s\) \[{culprit}\]"):
        optimize_iris(lambda x: _NanGrad.apply(x).mean(dim=(2, 3)), seeds, Settings.of(init="shuffle", steps=5, tol=1e-9),
                      QUIET)


# ---------------------------------------------------------------------------------------- cycles


def test_cycles_restart_and_stay_honest(trained):
    model, seeds = trained
    for options in (dict(cycle_steps=20), dict(cycle_steps=10, tuning={"cycle_mult": 1.0, "cycle_decay": 0.5})):
        iris = generate_iris(model, "2", seeds[:4], steps=60, tol=1e-9, optimizer="adam", progress="never", **options)
        assert iris.stats["restarts"] > 0, options
        true = rel_error(model, "2", iris.inputs, seeds[:4])
        assert torch.allclose(true.double(), iris.rel_error, rtol=1e-3, atol=1e-6)
        assert int(iris.steps.max()) == 60


# ---------------------------------------------------------------------------------- the GPU script


@pytest.mark.slow  # a lab script (lab/gpu_iri.py), not the library: its IRI paths run in the fast tests above
def test_gpu_script_dry_run_on_cpu(tmp_path):
    """lab/gpu_iri.py cannot run its GPU path here; its CPU dry run exercises the same code."""
    import json

    module = load_repo_module("lab/gpu_iri.py", "gpu_iri")
    assert module.main(["--out", str(tmp_path), "--device", "cpu", "--small", "--skip-tests"]) == 0
    report = json.loads((tmp_path / "gpu_iri.json").read_text())
    assert report["update_adam_torch"]["median_s"] > 0 and report["update_adam_numpy"]["median_s"] > 0
    assert report["iris_layer4_16_adam"]["seeds"] == 2 and "error" not in report["iris_layer3_16_auto"]
    assert report["iris_layer3_16_auto"]["optimizer"] == "lbfgs" and report["iris_layer4_16_adam"]["optimizer"] == "adam"
    if not torch.cuda.is_available():
        assert module.main(["--out", str(tmp_path)]) == 2  # fails loudly without CUDA


@pytest.mark.slow
def test_gpu_script_measures_compile_on_cpu():
    """The GPU script's compiled runs, at tiny sizes on the CPU (the eager backend: no C++ toolchain needed)."""
    import functools

    module = load_repo_module("lab/gpu_iri.py", "gpu_iri")
    real = torch.compile
    torch.compile = functools.partial(real, backend="eager")
    try:
        row = module.iris_per_second("layer3", 16, 3, 2, 2, torch.device("cpu"), compile=True)
    finally:
        torch.compile = real
    assert row["compile"] is True and row["compiled_graphs"] >= 1 and 0 < row["compile_s"] < row["wall_s"]
    assert row["iris_per_s_after_warm_up"] > row["iris_per_s"]


def test_optimize_iris_takes_settings_and_run_options_objects():
    seeds = torch.rand(2, 1, 4, 4)
    with pytest.raises(TypeError, match=r"Settings.of"):
        optimize_iris(lambda x: x, seeds, {"steps": 5})
    with pytest.raises(TypeError, match=r"RunOptions"):
        optimize_iris(lambda x: x, seeds, Settings.of(steps=5), {"batch_size": 2})
    for bad in (0, 2.5, True, "4"):
        with pytest.raises(ValueError, match="option batch_size must be a positive integer"):
            RunOptions(batch_size=bad)
    assert type(RunOptions(batch_size=4.0).batch_size) is int and Settings.of(steps=3.0).steps == 3
    iris = optimize_iris(lambda x: x.mean(dim=(2, 3)), seeds, Settings.of(steps=3, precision="float32"), QUIET)
    assert iris.settings["precision"] == "float32" and iris.settings["steps"] == 3
