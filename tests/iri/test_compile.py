"""``compile=True``: the front's forward+backward through torch.compile (similarity_plugins/iri/backends.py)."""

from __future__ import annotations

import functools
import shutil

import pytest
import torch
from torch import nn

from similarity_plugins.iri import RunOptions, Settings, generate_iris, optimize_iris
from similarity_plugins.iri.backends import compile_front
from tests.helpers.models import assert_unchanged, snapshot, tiny_cnn

needs_cxx = pytest.mark.skipif(not any(shutil.which(c) for c in ("g++", "c++", "clang++")),
                               reason="torch.compile's inductor backend needs a C++ compiler on the CPU")


def _seeds(n: int = 6) -> torch.Tensor:
    return torch.rand(n, 1, 16, 16, generator=torch.Generator().manual_seed(3))


def _compile_raising(monkeypatch: pytest.MonkeyPatch, exc: Exception) -> None:
    def fake_compile(_fn, **_kwargs):
        def run(_x):
            raise exc
        return run

    monkeypatch.setattr(torch, "compile", fake_compile)


def test_compile_must_be_a_bool_and_is_checked_before_any_work():
    with pytest.raises(ValueError, match="compile must be True or False"):
        generate_iris(tiny_cnn(), "block2", _seeds(), steps=2, progress="never", compile="yes")
    with pytest.raises(TypeError, match="did you mean 'history'"):
        generate_iris(tiny_cnn(), "block2", _seeds(), steps=2, progress="never", histroy=5)
    with pytest.raises(TypeError, match="did you mean 'compile'"):
        generate_iris(tiny_cnn(), "block2", _seeds(), steps=2, progress="never", compiled=True)


def test_a_failing_compiler_names_the_cause_and_the_fix(monkeypatch):
    inner = RuntimeError("no C++ compiler found\nlong traceback")
    _compile_raising(monkeypatch, torch._dynamo.exc.BackendCompilerFailed(lambda *a: None, inner, None))
    with pytest.raises(RuntimeError, match="run without compile=True") as info:
        generate_iris(tiny_cnn(), "block2", _seeds(), steps=2, progress="never", compile=True)
    assert "RuntimeError: no C++ compiler found" in str(info.value) and "long traceback" not in str(info.value)
    assert isinstance(info.value.__cause__, torch._dynamo.exc.BackendCompilerFailed)


def test_the_compiled_copy_keeps_keyword_only_defaults(monkeypatch):
    monkeypatch.setattr(torch, "compile", lambda fn, **_kw: fn)   # only the per-run copy of the code
    w = torch.full((3,), 2.0)

    def front(x: torch.Tensor, *, weight: torch.Tensor = w) -> torch.Tensor:
        return torch.tanh(x * weight)

    seeds = torch.rand(2, 3, generator=torch.Generator().manual_seed(0))
    eager = optimize_iris(front, seeds, Settings.of("adam", steps=3), RunOptions(progress="never"))
    compiled = optimize_iris(front, seeds, Settings.of("adam", steps=3), RunOptions(progress="never", compile=True))
    assert torch.equal(eager.inputs, compiled.inputs)


def test_the_models_own_errors_pass_through_unchanged(monkeypatch):
    _compile_raising(monkeypatch, torch.OutOfMemoryError("out of memory"))
    with pytest.raises(torch.OutOfMemoryError, match="out of memory"):
        generate_iris(tiny_cnn(), "block2", _seeds(), steps=2, progress="never", compile=True)


def test_compiled_front_runs_eagerly_without_gradients(monkeypatch):
    calls = []

    def fake_compile(fn, **_kwargs):
        def run(x):
            calls.append("compiled")
            return fn(x)
        return run

    monkeypatch.setattr(torch, "compile", fake_compile)
    front = compile_front(lambda x: 2 * x)
    with torch.no_grad():
        assert torch.equal(front(torch.ones(2)), torch.full((2,), 2.0))
    assert calls == []
    x = torch.ones(2, requires_grad=True)
    front(x).sum().backward()
    assert calls == ["compiled"] and torch.equal(x.grad, torch.full((2,), 2.0))


def test_compile_is_a_run_option_outside_the_cache_key(tmp_path, monkeypatch):
    monkeypatch.setattr(torch, "compile", lambda fn, **_kw: fn)   # compile as the identity: only the plumbing
    model, seeds = tiny_cnn(), _seeds(4)
    eager = generate_iris(model, "block2", seeds, steps=3, progress="never", cache_dir=tmp_path)
    again = generate_iris(model, "block2", seeds, steps=3, progress="never", cache_dir=tmp_path, compile=True)
    assert again.key == eager.key and "compile" not in eager.settings
    assert eager.stats["compiled"] is False and eager.stats["compiled_graphs"] == 0 and eager.stats["compile_s"] == 0


@pytest.mark.slow
@needs_cxx
@pytest.mark.parametrize("optimizer", ["adam", "lbfgs"])
def test_compile_gives_the_eager_iris_up_to_rounding_and_leaves_the_model(optimizer):
    model = tiny_cnn(in_channels=1, seed=1)
    before = snapshot(model)
    seeds = _seeds(5)
    kw = dict(steps=40, tol=0.12, optimizer=optimizer, batch_size=3, progress="never", tuning={"fold_bn": True})
    eager = generate_iris(model, "block2", seeds, **kw)
    compiled = generate_iris(model, "block2", seeds, compile=True, **kw)
    assert_unchanged(model, before)
    assert compiled.stats["compiled"] is True and compiled.stats["compiled_graphs"] >= 1
    assert 0 < compiled.stats["compile_s"] <= compiled.stats["front_s"]
    assert len(set(eager.steps.tolist())) > 1 and int(eager.steps.min()) < 40   # samples stop at different steps
    # compiled kernels round differently from eager ones, so a sample whose error crosses the tolerance within
    # rounding of it may stop one step earlier or later; the errors agree to the stated tolerance
    assert int((compiled.steps - eager.steps).abs().max()) <= 1
    torch.testing.assert_close(compiled.rel_error, eager.rel_error, rtol=1e-3, atol=1e-5)
    torch.testing.assert_close(compiled.inputs, eager.inputs, rtol=0, atol=1e-3)


class _GraphBreak(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        torch._dynamo.graph_break()
        return x


@pytest.mark.slow
def test_every_run_compiles_its_own_front_even_with_a_graph_break(monkeypatch):
    """Dynamo falls back to eager after 8 recompilations of one code object; runs must not share one."""
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="eager"))
    for i in range(10):
        model = tiny_cnn(seed=i)
        model.block1.insert(1, _GraphBreak())
        iris = generate_iris(model, "block2", _seeds(2), steps=2, progress="never", compile=True)
        assert iris.stats["compiled_graphs"] >= 1, f"run {i} compiled nothing"
