"""Mixed precision in the IRI optimiser: the option, the rule of "auto", bfloat16 steps with a float32 finish.

Tiny CNNs built here (a few thousand FLOPs per sample); bfloat16 runs under CPU autocast everywhere (emulated
where the CPU has no bfloat16 units, which only makes it slower).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from similarity_plugins.iri import RunOptions, Settings, generate_iris, optimize_iris
from similarity_plugins.iri import precision as prec
from similarity_plugins.iri.service import iri_settings

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _cnn() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 6 * 6, 10)).eval()


def _seeds(n: int = 6) -> torch.Tensor:
    return torch.rand(n, 1, 12, 12, generator=torch.Generator().manual_seed(3))


def _f32_errors(model: nn.Module, layer: str, iris, seeds: torch.Tensor) -> np.ndarray:
    """The relative errors of the IRIs recomputed in float32 on the model itself."""
    front = nn.Sequential(*list(model.children())[: int(layer) + 1])
    with torch.no_grad():
        a, b = front(iris.inputs).flatten(1), front(seeds).flatten(1)
    return (torch.linalg.vector_norm(a - b, dim=1) / torch.linalg.vector_norm(b, dim=1)).double().numpy()


def test_unknown_precision_is_refused_naming_the_values():
    with pytest.raises(ValueError, match="bfloat16"):
        prec.check_precision("bf16")
    with pytest.raises(ValueError, match="iri_precision"):
        iri_settings({"iri_precision": "float16"})
    with pytest.raises(ValueError, match="precision"):
        generate_iris(_cnn(), "5", _seeds(2), steps=2, precision="half", progress="never")


def test_auto_rule(monkeypatch):
    cpu = torch.device("cpu")
    assert prec.resolve_precision("float32", cpu, 1e12)[0] == "float32"
    assert prec.resolve_precision("bfloat16", cpu, 1.0)[0] == "bfloat16"
    monkeypatch.setattr(prec, "device_has_bf16", lambda device: False)
    used, why = prec.resolve_precision("auto", cpu, 1e12)
    assert used == "float32" and "no bfloat16" in why
    monkeypatch.setattr(prec, "device_has_bf16", lambda device: True)
    assert prec.resolve_precision("auto", cpu, prec.AUTO_MIN_FLOPS / 10)[0] == "float32"
    assert prec.resolve_precision("auto", cpu, prec.AUTO_MIN_FLOPS * 10)[0] == "bfloat16"


def test_step_flops_counts_forward_and_backward():
    front = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1, bias=False), nn.ReLU(), nn.Flatten(), nn.Linear(256, 5))
    forward = 2 * 4 * 9 * 8 * 8 + 2 * 256 * 5
    # the forward and the gradient to the input (no weight gradient): twice the forward
    assert prec.step_flops(front, torch.rand(1, 1, 8, 8)) == 2 * forward


def test_auto_on_a_small_front_is_float32_bit_for_bit():
    model, seeds = _cnn(), _seeds()
    a = generate_iris(model, "5", seeds, steps=25, tol=1e-3, precision="float32", progress="never")
    b = generate_iris(model, "5", seeds, steps=25, tol=1e-3, progress="never")
    assert b.settings["precision"] == "float32" and "MFLOP" in b.settings["precision_rule"] or \
        "no bfloat16" in b.settings["precision_rule"]
    assert torch.equal(a.inputs, b.inputs) and torch.equal(a.rel_error, b.rel_error)
    assert a.settings["memory_format"] == "contiguous"


@pytest.mark.parametrize("preset", ["adam", "lbfgs"])
def test_bfloat16_finishes_in_float32(preset):
    model, seeds = _cnn(), _seeds()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    iris = generate_iris(model, "5", seeds, steps=80, tol=2e-2, precision="bfloat16", progress="never",
                         tuning={"preset": preset})
    assert iris.settings["precision"] == "bfloat16" and iris.settings["memory_format"] == "channels_last"
    assert iris.stats["lowp_sample_steps"] > 0
    # the reported errors are float32 values of the front, not bfloat16 ones
    np.testing.assert_allclose(iris.rel_error.numpy(), _f32_errors(model, "5", iris, seeds), rtol=1e-4, atol=1e-6)
    assert float(iris.rel_error.median()) < 0.5
    for k, v in model.state_dict().items():   # the user's model: same values, same layout
        assert torch.equal(v, before[k]) and v.is_contiguous()


def test_a_short_budget_still_ends_in_float32():
    model, seeds = _cnn(), _seeds(4)
    iris = generate_iris(model, "5", seeds, steps=2, tol=1e-6, precision="bfloat16", progress="never")
    # every sample switches after its last-but-one step at the latest: 2 bfloat16 evaluations, then float32
    assert iris.stats["lowp_switched"] == 4 and iris.stats["lowp_sample_steps"] == 4 * 2
    np.testing.assert_allclose(iris.rel_error.numpy(), _f32_errors(model, "5", iris, seeds), rtol=1e-4, atol=1e-6)


def test_precision_is_in_the_cache_key(tmp_path):
    model, seeds = _cnn(), _seeds(3)
    a = generate_iris(model, "5", seeds, steps=3, precision="float32", progress="never", cache_dir=tmp_path)
    b = generate_iris(model, "5", seeds, steps=3, precision="bfloat16", progress="never", cache_dir=tmp_path)
    assert a.key != b.key
    again = generate_iris(model, "5", seeds, steps=3, precision="bfloat16", progress="never", cache_dir=tmp_path)
    assert again.stats.get("from_cache") and again.settings["precision"] == "bfloat16"


def test_optimize_iris_on_a_bare_function():
    model, seeds = _cnn(), _seeds(3)
    front = nn.Sequential(*list(model.children())[:6])
    iris = optimize_iris(front, seeds, Settings.of(steps=20, tol=1e-2, precision="bfloat16"), RunOptions(progress="never"))
    assert iris.settings["precision"] == "bfloat16"
    np.testing.assert_allclose(iris.rel_error.numpy(), _f32_errors(model, "5", iris, seeds), rtol=1e-4, atol=1e-6)


def test_iris_command_takes_precision(tmp_path, capsys):
    from similarity_plugins.cli import main
    from similarity_plugins.iri.store import load_iris

    out = tmp_path / "iris.npz"
    assert main(["iris", "--model", "small-cnn", "--layer", "block2", "--data", "digits", "--max-seeds", "4",
                 "--steps", "3", "--precision", "bfloat16", "--out", str(out), "--no-progress"]) == 0
    assert "bfloat16" in capsys.readouterr().out
    assert load_iris(out)[0].settings["precision"] == "bfloat16"
    with pytest.raises(SystemExit):
        main(["iris", "--model", "small-cnn", "--layer", "block2", "--data", "digits", "--precision", "bf16",
              "--out", str(out)])


def _fake_run(n: int, tol: float = 1e-2, steps: int = 1000):
    """The parts of a run that the precision switch reads: settings, per-slot samples, the stepper."""
    from types import SimpleNamespace

    restarted = []
    samples = SimpleNamespace(t=np.zeros(n, dtype=np.int64), sample=np.arange(n), best_err=np.full(n, np.inf))
    run = SimpleNamespace(settings=SimpleNamespace(tol=tol, steps=steps), samples=samples, n=n,
                          stepper=SimpleNamespace(restart_slots=restarted.extend))
    return run, restarted


def test_a_sample_that_stalls_in_bfloat16_goes_on_in_float32_at_once():
    from similarity_plugins.iri.mixed import MixedPrecision

    run, restarted = _fake_run(3)
    mixed = MixedPrecision(run, lambda x: x)
    mixed.allocate(3)
    mixed.slots.lowp[:] = 1
    mixed.slots.floor[:] = 1e-3           # switch_at: 2 * tol = 0.02
    done = np.zeros(3, dtype=bool)
    left = {}
    for step in range(1, 200):
        err = np.array([0.9 * 0.99 ** step,          # falls 1% a step: more than STALL_GAIN per window
                        0.5 + 0.01 * (step % 2),      # flat at 0.5: stalled
                        0.3 / step])                  # reaches 0.02 at step 15: close
        run.samples.t += 1
        mixed.after_step(3, err, done)
        for slot in np.flatnonzero(mixed.slots.lowp == 0):
            left.setdefault(int(slot), step)
    assert left[1] == prec.STALL_WINDOW + 1      # its best came at step 1; no gain of STALL_GAIN since
    assert left[2] == 15
    assert left.get(0, 1000) > 150               # still improving: stays in bfloat16 (up to its budget share)
    stats = mixed.stats()
    assert stats["lowp_switched_stalled"] == 1 and stats["lowp_switched_close"] == 1
    assert stats["lowp_switched"] == sum(stats[f"lowp_switched_{r}"] for r in ("close", "stalled", "budget"))
    assert sorted(restarted) == sorted(k for k in left)
    assert np.isinf(run.samples.best_err[[1, 2]]).all()   # their best restarts in float32


def test_auto_keeps_float32_where_a_probe_shows_bfloat16_is_not_faster(monkeypatch):
    cpu = torch.device("cpu")
    monkeypatch.setattr(prec, "device_has_bf16", lambda device: True)
    used, why = prec.resolve_precision("auto", cpu, prec.AUTO_MIN_FLOPS * 10, probe=lambda: 1.0)
    assert used == "float32" and "probe" in why and "1.00x" in why
    used, why = prec.resolve_precision("auto", cpu, prec.AUTO_MIN_FLOPS * 10, probe=lambda: 2.0)
    assert used == "bfloat16" and "2.00x" in why
    calls = []
    assert prec.resolve_precision("auto", cpu, prec.AUTO_MIN_FLOPS / 10, probe=lambda: calls.append(1) or 9.0)[0] \
        == "float32" and not calls                # no probe where the FLOP rule already says float32
    assert prec.resolve_precision("float32", cpu, 1e12, probe=lambda: calls.append(1) or 9.0)[0] == "float32"
    assert not calls


def test_the_probe_times_both_precisions_and_leaves_the_front_as_it_was():
    model = _cnn()
    front = nn.Sequential(*list(model.children())[:6])
    before = {k: v.clone() for k, v in front.state_dict().items()}
    speedup = prec.probe_speedup(front, _seeds(), torch.device("cpu"))
    assert np.isfinite(speedup) and speedup > 0
    for k, v in front.state_dict().items():
        assert torch.equal(v, before[k]) and v.is_contiguous()
