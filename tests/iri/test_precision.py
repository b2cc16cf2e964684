"""Mixed precision in the IRI optimiser: the option, the rule of "auto", bfloat16 steps with a float32 finish.

Tiny CNNs built here (a few thousand FLOPs per sample); bfloat16 runs under CPU autocast everywhere (emulated
where the CPU has no bfloat16 units, which only makes it slower).
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from torch import nn

from similarity_plugins.iri import RunOptions, Settings, generate_iris, optimize_iris
from similarity_plugins.iri import precision as prec
from similarity_plugins.iri.mixed import BF16, CHECK
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
        for slot in np.flatnonzero(mixed.slots.lowp != BF16):   # on to float32 errors (first a check)
            left.setdefault(int(slot), step)
    assert left[1] == prec.STALL_WINDOW + 1      # its best came at step 1; no gain of STALL_GAIN since
    assert left[2] == 15
    assert left.get(0, 1000) > 150               # still improving: stays in bfloat16 (up to its budget share)
    stats = mixed.stats()
    assert stats["lowp_switched_stalled"] == 1 and stats["lowp_switched_close"] == 1
    assert stats["lowp_switched"] == sum(stats[f"lowp_switched_{r}"] for r in ("close", "stalled", "budget"))
    assert sorted(restarted) == sorted(k for k in left)
    assert np.isinf(run.samples.best_err[[1, 2]]).all()   # their best restarts in float32
    assert (mixed.slots.lowp[[1, 2]] == CHECK).all()      # their next step also checks the bfloat16 gradient


def _front_and_twin(broken: bool) -> tuple[nn.Module, nn.Module]:
    """A small CNN front, and its bfloat16 twin: a copy (its Jacobian is the front's up to bfloat16), or with
    ``broken`` a copy whose first convolution has other weights (a wrong Jacobian, and wrong values)."""
    front = nn.Sequential(*list(_cnn().children())[:6])
    twin = copy.deepcopy(front)
    if broken:
        with torch.no_grad():
            twin[0].weight.copy_(torch.randn_like(twin[0].weight))
    return front, twin


@pytest.mark.parametrize("broken", [False, True])
def test_float32_errors_with_a_checked_bfloat16_gradient(broken):
    front, twin = _front_and_twin(broken)
    seeds = _seeds()
    iris = optimize_iris(front, seeds, Settings.of(steps=150, tol=2e-2, precision="bfloat16"),
                         RunOptions(progress="never", lowp_fn=twin))
    plain = optimize_iris(front, seeds, Settings.of(steps=150, tol=2e-2, precision="float32"),
                          RunOptions(progress="never"))
    stats = iris.stats
    assert stats["lowp_switched"] == len(seeds)     # every sample left bfloat16, then its gradient was checked
    finished = stats["finished_in"]
    assert sum(finished.values()) == len(seeds) and finished["bfloat16"] == 0
    if broken:   # the twin's gradient points elsewhere: every sample goes on in plain float32
        assert stats["float32_fallbacks"] == len(seeds) and finished["float32"] == len(seeds)
        assert stats["grad16_cosine_median"] < prec.GRAD16_MIN_COSINE
    else:
        assert stats["float32_fallbacks"] == 0 and finished["grad16"] == len(seeds)
        assert stats["grad16_cosine_min"] >= prec.GRAD16_MIN_COSINE and stats["grad16_sample_steps"] > 0
    # the errors reported are the float32 front's, whichever gradient steered
    with torch.no_grad():
        a, b = front(iris.inputs).flatten(1), front(seeds).flatten(1)
    f32 = (torch.linalg.vector_norm(a - b, dim=1) / torch.linalg.vector_norm(b, dim=1)).double().numpy()
    np.testing.assert_allclose(iris.rel_error.numpy(), f32, rtol=1e-4, atol=1e-6)
    # about as far as float32 alone gets in the budget (this small CNN converges few samples in either)
    assert float(iris.rel_error.median()) <= 1.25 * float(plain.rel_error.median())


def test_without_grad16_samples_leave_bfloat16_for_plain_float32():
    front, twin = _front_and_twin(False)
    iris = optimize_iris(front, _seeds(4), Settings.of(steps=40, tol=1e-6, precision="bfloat16"),
                         RunOptions(progress="never", lowp_fn=twin, grad16=False))
    stats = iris.stats
    assert stats["grad16_sample_steps"] == 0 and stats["finished_in"] == {"bfloat16": 0, "grad16": 0, "float32": 4}
    assert stats["lowp_switched"] == 4 and stats["grad16_cosine_min"] is None


def test_the_bfloat16_gradient_of_a_float32_error_follows_the_float32_gradient():
    from types import SimpleNamespace

    from similarity_plugins.iri.mixed import MixedPrecision

    front, _ = _front_and_twin(False)
    seeds = _seeds(4)
    with torch.no_grad():
        target = front(seeds).flatten(1)
    x = (seeds + 0.05 * torch.randn_like(seeds)).flatten(1)
    samples = SimpleNamespace(x=x, target=target, tnorm=torch.linalg.vector_norm(target, dim=1))
    run = SimpleNamespace(samples=samples, shape=tuple(seeds.shape[1:]), device=torch.device("cpu"),
                          dtype=torch.float32, front_fn=front, n=4, settings=SimpleNamespace(steps=10))
    err, grad = MixedPrecision(run, front).residual_gradient(np.arange(4))
    xg = x.reshape(seeds.shape).clone().requires_grad_(True)
    exact = torch.linalg.vector_norm(front(xg).flatten(1) - target, dim=1) / samples.tnorm
    (want,) = torch.autograd.grad(exact.sum(), xg)
    torch.testing.assert_close(err, exact.detach())                # a float32 error, to the last bit
    cosine = torch.nn.functional.cosine_similarity(grad, want.flatten(1), dim=1)
    assert float(cosine.min()) > 0.98                             # the gradient: bfloat16's rounding only


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


def test_the_probe_times_each_step_and_chooses_the_finish():
    front = nn.Sequential(*list(_cnn().children())[:6])
    times = prec.probe_times(front, _seeds(), torch.device("cpu"))
    assert set(times) == {"float32", "bfloat16", "forward32"} and all(t > 0 for t in times.values())
    assert prec.grad16_pays({"float32": 1.0, "bfloat16": 0.3, "forward32": 0.4})        # 1.43x
    assert not prec.grad16_pays({"float32": 1.0, "bfloat16": 0.6, "forward32": 0.4})    # 1.0x: plain float32
    assert prec.grad16_pays(None) and prec.grad16_pays({})                            # bfloat16 asked for


def test_auto_records_how_its_samples_finish(monkeypatch):
    monkeypatch.setattr(prec, "device_has_bf16", lambda device: True)
    monkeypatch.setattr(prec, "AUTO_MIN_FLOPS", 0)
    monkeypatch.setattr(prec, "probe_times", lambda *a: {"float32": 3.0, "bfloat16": 1.0, "forward32": 1.8})
    model, seeds = _cnn(), _seeds(3)
    iris = generate_iris(model, "5", seeds, steps=6, tol=1e-6, progress="never")
    assert iris.settings["precision"] == "bfloat16" and "3.00x" in iris.settings["precision_rule"]
    assert iris.settings["precision_finish"] == "float32"       # 3.0 / (1.8 + 1.0) < GRAD16_MIN_SPEEDUP
    assert iris.stats["finished_in"]["float32"] == 3 and iris.stats["grad16_sample_steps"] == 0


def test_optimize_iris_resolves_auto_and_its_finish_as_generate_iris_does(monkeypatch):
    monkeypatch.setattr(prec, "device_has_bf16", lambda device: True)
    monkeypatch.setattr(prec, "AUTO_MIN_FLOPS", 0)
    monkeypatch.setattr(prec, "probe_times", lambda *a: {"float32": 3.0, "bfloat16": 1.0, "forward32": 1.8})
    front, _ = _front_and_twin(False)
    iris = optimize_iris(front, _seeds(3), Settings.of(steps=6, tol=1e-6), RunOptions(progress="never"))
    assert iris.settings["precision"] == "bfloat16"
    assert iris.stats["finished_in"]["float32"] == 3 and iris.stats["grad16_sample_steps"] == 0
