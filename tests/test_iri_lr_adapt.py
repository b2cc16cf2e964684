"""Per-sample step-size adaptation (``lr_adapt``, first_order.py, opt-in) and the auto rule for wide and mid
pooled cuts of fronts without BatchNorm (auto.AUTO_UNNORMALIZED_WIDE_LR)."""

from __future__ import annotations

import os
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from test_iri import Interrupted, _digits16, _fit, interrupt_at
from torch import nn

from similarity_plugins.iri import generate_iris, optimize_iris
from similarity_plugins.iri.auto import (
    AUTO_COMPRESSIVE_POOLED_ADAM,
    AUTO_EXPANDING_ADAM,
    AUTO_UNNORMALIZED_WIDE_LR,
    AUTO_WIDE_ADAM,
    auto_adam_defaults,
)
from similarity_plugins.iri.first_order import (
    LR_ADAPT_MAX,
    LR_ADAPT_RESTART_AT,
    LR_ADAPT_RESTART_BELOW,
    FirstOrderStepper,
)
from similarity_plugins.iri.settings import make_settings

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CONSTANT = dict(schedule="constant", cycle_steps=0, progress=False)


def _stepper(lr_adapt: float, gain: list[float], moves: torch.Tensor, **options) -> FirstOrderStepper:
    """A stepper over a stand-in working batch: per-slot gains ``gain`` and last moves ``moves``."""
    stepper = FirstOrderStepper.__new__(FirstOrderStepper)
    stepper.s = make_settings(steps=10, tol=1e-2, lr=None, init="noise", seed=0, lr_adapt=lr_adapt, **options)
    stepper.run = SimpleNamespace(w=SimpleNamespace(u=moves, gain=np.array(gain, dtype=np.float64)))
    stepper.adam, stepper.restarts = True, 0
    return stepper


def test_the_gain_follows_the_cosine_between_the_gradient_and_the_last_move():
    moves = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 2.0], [0.0, 0.0], [1.0, 0.0], [3.0, 0.0]])
    grad = torch.tensor([[-5.0, 0.0],    # still downhill along the last move: longer steps
                         [2.0, 0.0],     # pointing back: the step overshot, shorter steps
                         [1.0, 0.0],     # orthogonal: unchanged
                         [1.0, 1.0],     # no move yet (a fresh sample): unchanged
                         [-1.0, 0.0],    # finished: unchanged
                         [-1.0, -1.0]])  # at 45 degrees
    stepper = _stepper(0.1, [1.0, 1.0, 1.0, 1.0, 1.0, 0.5], moves)
    done = np.array([False, False, False, False, True, False])
    stepper._adapt(6, grad, done)
    np.testing.assert_allclose(stepper.run.w.gain, [1.1, 0.9, 1.0, 1.0, 1.0, 0.5 * (1 + 0.1 / np.sqrt(2))])
    high = _stepper(0.5, [LR_ADAPT_MAX], torch.ones(1, 3))   # the ceiling holds
    high._adapt(1, -torch.ones(1, 3), np.zeros(1, bool))
    np.testing.assert_allclose(high.run.w.gain, [LR_ADAPT_MAX])


def _batch(gain: list[float], **host) -> SimpleNamespace:
    """A stand-in working batch of ``len(gain)`` slots of 2 pixels, 5 steps into a cycle of 5."""
    n = len(gain)
    fields = dict(t=np.full(n, 5), t_adam=np.full(n, 5), scale=np.ones(n), since=np.full(n, 3),
                  ref_err=np.full(n, 0.5), best_err=np.full(n, 0.2), cycle_start=np.zeros(n, np.int64),
                  cycle_len=np.full(n, 5), **host)
    return SimpleNamespace(x=torch.full((n, 2), 0.7), best=torch.arange(2.0 * n).reshape(n, 2) / 10,
                           m=torch.ones(n, 2), v=torch.ones(n, 2), u=torch.ones(n, 2),
                           gain=np.array(gain, dtype=np.float64), device="cpu", **fields)


def test_a_sample_whose_steps_shrank_too_far_restarts_from_its_best_iterate():
    w = _batch([0.01, 0.01, 0.5])
    stepper = _stepper(0.05, [0.0], torch.zeros(1, 2), cycle_steps=0)
    stepper.run.w = w
    stepper.after_step(3, np.array([False, True, False]))   # row 1 finished, row 2 still large; no cycles
    assert torch.equal(w.x[0], w.best[0]) and torch.equal(w.x[1:], torch.full((2, 2), 0.7))
    assert float(w.m[0].abs().sum() + w.v[0].abs().sum() + w.u[0].abs().sum()) == 0 and bool((w.m[1:] == 1).all())
    assert list(w.gain) == [LR_ADAPT_RESTART_AT, 0.01, 0.5] and LR_ADAPT_RESTART_AT > LR_ADAPT_RESTART_BELOW
    assert list(w.t_adam) == [0, 5, 5] and w.ref_err[0] == 0.2 and stepper.restarts == 1
    assert list(w.scale) == [1.0, 1.0, 1.0]   # the gain is its own factor: the decays are left alone


def test_a_cycle_end_and_a_shrunk_gain_in_the_same_step_restart_a_sample_once():
    """Slot 0: its cycle ended and its gain shrank; slot 1: only its cycle ended; slot 2: only its gain."""
    w = _batch([0.01, 0.8, 0.01])
    w.cycle_len = np.array([5, 5, 50])
    stepper = _stepper(0.05, [0.0], torch.zeros(1, 2), cycle_steps=5, cycle_decay=0.5)
    stepper.run.w = w
    stepper.after_step(3, np.zeros(3, bool))
    assert stepper.restarts == 3                                   # one restart each, not two for slot 0
    assert list(w.scale) == [0.5, 0.5, 1.0]                        # the cycle decay holds
    assert list(w.gain) == [LR_ADAPT_RESTART_AT, 0.8, LR_ADAPT_RESTART_AT]
    assert torch.equal(w.x, w.best) and float(w.u.abs().sum() + w.m.abs().sum()) == 0
    assert list(w.cycle_start) == [5, 5, 0]                        # a shrunk gain does not end the cycle


def test_lbfgs_refuses_lr_adapt():
    with pytest.raises(ValueError, match="lr_adapt apply to optimizer='adam'"):
        optimize_iris(lambda x: x, torch.rand(2, 1, 4, 4), optimizer="lbfgs", lr_adapt=0.1, progress=False)


@pytest.mark.parametrize("lr", [0.2, 0.002])
def test_adapted_steps_fix_a_step_size_too_large_or_too_small(lr):
    """At a constant lr, Adam on the identity front settles at an error floor set by its lr (0.2: too large)
    or crawls (0.002: too small); adapting each sample's step size reaches the tolerance either way."""
    torch.manual_seed(0)
    seeds = torch.rand(6, 1, 8, 8)
    fixed = optimize_iris(lambda x: x, seeds, steps=250, tol=1e-3, lr=lr, **CONSTANT)
    adapted = optimize_iris(lambda x: x, seeds, steps=250, tol=1e-3, lr=lr, lr_adapt=0.05, **CONSTANT)
    assert int(fixed.steps.min()) > 220 and float(fixed.rel_error.max()) > 1e-3   # (250: never; 224-250)
    assert bool((adapted.rel_error <= 1e-3).all()) and int(adapted.steps.max()) < 130   # (84-97; 112-118)
    assert adapted.settings["lr_adapt"] == 0.05 and fixed.settings["lr_adapt"] == 0.0


def test_lr_adapt_is_validated_and_named_in_errors():
    for bad in (-0.1, 1.0, float("nan"), "0.1", True):
        with pytest.raises(ValueError, match=r"lr_adapt must be in \[0, 1\)"):
            make_settings(steps=10, tol=1e-2, lr=None, init="noise", seed=0, lr_adapt=bad)
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2)).eval()
    with pytest.raises(TypeError, match="lr_adapt"):
        generate_iris(model, "2", torch.rand(2, 1, 8, 8), lr_adpat=0.1, progress=False)


def _front(batchnorm: bool, convs: int = 8) -> nn.Module:
    """Conv-ReLU layers with a max-pool after every 4th (a small VGG), with or without BatchNorm."""
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for i in range(convs):
        layers += [nn.Conv2d(1 if i == 0 else 4, 4, 3, padding=1), *([nn.BatchNorm2d(4)] if batchnorm else []),
                   nn.ReLU()]
        if i % 4 == 3:
            layers.append(nn.MaxPool2d(2))
    return nn.Sequential(*layers).eval()


def test_auto_gives_wide_and_mid_pooled_cuts_without_batchnorm_a_smaller_lr_and_never_adapts():
    lr = {"lr": AUTO_UNNORMALIZED_WIDE_LR}
    # (relu calls, options, lr, input values, cut values, ReLUs after the last pool, stride, at a pool, BatchNorm)
    assert auto_adam_defaults(7, {}, None, 3072, 4096, 0, 0, True, False) == {**AUTO_WIDE_ADAM, **lr}  # vgg16 .16
    assert auto_adam_defaults(7, {}, None, 3072, 4096, 0, 0, True, True) == AUTO_WIDE_ADAM   # VGG-16-BN .23
    assert auto_adam_defaults(4, {}, None, 3072, 4096, 0, 0, True, False) == lr              # vgg11 .10
    assert auto_adam_defaults(4, {}, None, 3072, 1537, 0, 0, True, False) == lr              # just over half
    assert auto_adam_defaults(4, {}, None, 3072, 4096, 0, 0, True, True) == {}               # VGG-11-BN .14
    assert auto_adam_defaults(2, {}, None, 3072, 1536, 0, 0, True, False) == {}              # 2x compressive
    assert auto_adam_defaults(2, {}, None, 3072, 16384, 0, 0, True, False) == AUTO_EXPANDING_ADAM   # 1st pool
    assert auto_adam_defaults(4, {}, None, 3072, 4096, 1, 0, False, False) == {}             # a ReLU after it
    assert auto_adam_defaults(4, {}, 0.2, 3072, 4096, 0, 0, True, False) == {}               # the caller's lr
    assert auto_adam_defaults(10, {}, None, 3072, 512, 0, 0, True, False) == {
        **AUTO_COMPRESSIVE_POOLED_ADAM, "lr": 0.05}                                          # round 9's rule
    seeds = torch.rand(2, 1, 16, 16)

    def picked(model: nn.Module, **options) -> tuple:
        s = generate_iris(model, str(len(model) - 1), seeds, steps=3, progress=False, **options).settings
        return s["lr"], s["cycle_steps"], s["lr_adapt"]

    # 4 ReLU calls, then a pool: 4x8x8 = 256 values from 256 pixels (the mid class)
    assert picked(_front(False, 4)) == (AUTO_UNNORMALIZED_WIDE_LR, 300, 0.0)
    assert picked(_front(True, 4)) == (0.2, 300, 0.0)
    assert picked(_front(False, 4), lr_adapt=0.05) == (AUTO_UNNORMALIZED_WIDE_LR, 300, 0.05)  # adds to the rule
    assert picked(_front(False, 4), lr=0.3) == (0.3, 300, 0.0)


@pytest.fixture(scope="module")
def unnormalized_cnn():
    """A small VGG without BatchNorm, trained 2 epochs on 16x16 digits, and 12 seeds (float64)."""

    torch.manual_seed(0)
    x, y = _digits16()
    features = _front(False)
    model = _fit(nn.Sequential(*features, nn.Flatten(), nn.Linear(4 * 4 * 4, 10)), x, y, epochs=2)
    return model.double().eval(), x[:12].double().clone()


def test_adapted_runs_stay_per_sample_and_resume_bit_identical(unnormalized_cnn, tmp_path):
    model, seeds = unnormalized_cnn
    kw = dict(steps=60, tol=2e-2, progress=False, lr=3.0, lr_adapt=0.5)   # steps too large: samples restart
    big = generate_iris(model, "8", seeds, batch_size=len(seeds), **kw)
    assert big.stats["restarts"] > 0
    assert int(big.steps.min()) < int(big.steps.max())   # samples leave at different steps: slots are refilled
    small = generate_iris(model, "8", seeds, batch_size=5, **kw)
    assert torch.equal(small.steps, big.steps)
    assert float((small.inputs - big.inputs).abs().max()) <= 1e-6
    numpy = generate_iris(model, "8", seeds, batch_size=5, backend="numpy", **kw)
    torch_ = generate_iris(model, "8", seeds, batch_size=5, backend="torch", **kw)
    assert float((numpy.inputs - torch_.inputs).abs().max()) <= 1e-6
    with pytest.raises(Interrupted):
        generate_iris(model, "8", seeds, batch_size=5, cache_dir=tmp_path, checkpoint_every=5,
                      callback=interrupt_at(17), **kw)
    assert [p for p in os.listdir(tmp_path) if p.endswith(".ckpt.pt")]
    resumed = generate_iris(model, "8", seeds, batch_size=5, cache_dir=tmp_path, checkpoint_every=5, **kw)
    assert resumed.stats["resumed"]
    assert torch.equal(resumed.inputs, small.inputs) and torch.equal(resumed.steps, small.steps)
