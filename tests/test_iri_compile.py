"""``compile=True``: the front's forward+backward through torch.compile (similarity_plugins/iri/compiled.py)."""

from __future__ import annotations

import pytest
import torch

from similarity_plugins.iri import generate_iris, optimize_iris
from similarity_plugins.iri.compiled import compile_front
from tests.models_for_tests import assert_unchanged, snapshot, tiny_cnn


def _seeds(n: int = 6) -> torch.Tensor:
    return torch.rand(n, 1, 16, 16, generator=torch.Generator().manual_seed(3))


def test_compile_must_be_a_bool_and_is_checked_before_any_work():
    model = tiny_cnn()
    with pytest.raises(ValueError, match="compile must be True or False"):
        generate_iris(model, "block2", _seeds(), steps=2, progress=False, compile="yes")
    with pytest.raises(TypeError, match="did you mean 'compile'"):
        generate_iris(model, "block2", _seeds(), steps=2, progress=False, compiled=True)


def test_a_failing_compiler_names_the_fix(monkeypatch):
    def broken(fn, **_kwargs):
        def run(_x):
            raise RuntimeError("no C++ compiler found\nlong traceback")
        return run

    monkeypatch.setattr(torch, "compile", broken)
    with pytest.raises(RuntimeError, match="run without compile=True") as info:
        generate_iris(tiny_cnn(), "block2", _seeds(), steps=2, progress=False, compile=True)
    assert "no C++ compiler found" in str(info.value) and "long traceback" not in str(info.value)
    assert isinstance(info.value.__cause__, RuntimeError)


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


@pytest.mark.slow
@pytest.mark.parametrize("optimizer", ["adam", "lbfgs"])
def test_compile_gives_the_eager_iris_up_to_rounding_and_leaves_the_model(optimizer):
    model = tiny_cnn(in_channels=1, seed=1)
    before = snapshot(model)
    seeds = _seeds(5)
    kw = dict(steps=4, optimizer=optimizer, batch_size=3, progress=False, fold_bn=True)
    eager = generate_iris(model, "block2", seeds, **kw)
    compiled = generate_iris(model, "block2", seeds, compile=True, **kw)
    assert_unchanged(model, before)
    assert compiled.settings["compile"] is True and eager.settings["compile"] is False
    assert compiled.stats["compile_s"] > 0 and eager.stats["compile_s"] == 0
    torch.testing.assert_close(compiled.rel_error, eager.rel_error, rtol=1e-3, atol=1e-5)
    torch.testing.assert_close(compiled.inputs, eager.inputs, rtol=0, atol=1e-3)
    assert torch.equal(compiled.steps, eager.steps)


@pytest.mark.slow
def test_every_run_compiles_its_own_front():
    """Dynamo falls back to eager after 8 recompilations of one code object; runs must not share one."""
    from torch._dynamo.utils import counters

    runs = 10
    before = counters["stats"]["unique_graphs"]
    for i in range(runs):
        w = torch.full((3,), float(i + 1))
        seeds = torch.rand(2, 3, generator=torch.Generator().manual_seed(i))
        iris = optimize_iris(lambda x, w=w: torch.tanh(x * w), seeds, steps=2, optimizer="adam", progress=False,
                             compile=True)
        assert iris.stats["compile_s"] > 0
    assert counters["stats"]["unique_graphs"] - before >= runs
