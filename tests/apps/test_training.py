"""Donor training, evaluation, PGD and weight saving; and the shortcut-reliance fact the variants exist for."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader

from similarity_plugins.apps.training import (
    evaluate_accuracy,
    pgd_attack,
    predict,
    recompute_bn_stats,
    save_weights,
    train_classifier,
)
from similarity_plugins.apps.zoo import SmallCNN
from similarity_plugins.datasets import (
    ImageTensors,
    PixelShortcut,
    ShortcutRandomised,
    ShortcutRemoved,
    digits,
)
from tests.helpers.datasets import NoTensors

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def train_split():
    return digits("train")


@pytest.fixture(scope="module")
def test_split():
    return digits("test")


def _subset(ds, n):
    return ImageTensors(ds.x[:n], ds.y[:n], 10)


def _snapshot(model):
    return (
        {k: v.clone() for k, v in model.state_dict().items()},
        {n: m.training for n, m in model.named_modules()},
        {n: p.requires_grad for n, p in model.named_parameters()},
    )


def _assert_same(model, snap):
    state, flags, grads = snap
    for k, v in model.state_dict().items():
        assert torch.equal(v, state[k]), k
    assert {n: m.training for n, m in model.named_modules()} == flags
    assert {n: p.requires_grad for n, p in model.named_parameters()} == grads


@pytest.mark.slow  # trains two donors
def test_shortcut_reliance(train_split, test_split):
    """Trained with half the images swapped for other digits while the mark follows the label, a model relies on
    the mark: a randomised mark wrecks it. A clean-trained model barely notices the mark."""
    sub = _subset(train_split, 500)
    marked_test = PixelShortcut(test_split)
    removed, randomised = ShortcutRemoved(marked_test), ShortcutRandomised(marked_test, seed=1)
    acc = {}
    for name, data in [("clean", sub), ("swap", PixelShortcut(sub, swap_fraction=0.5, seed=0))]:
        model = SmallCNN(width=16)
        train_classifier(model, data, epochs=6, lr=3e-3, batch_size=32, seed=0, progress="never")
        acc[name] = {k: evaluate_accuracy(model, d) for k, d in
                     [("marked", marked_test), ("removed", removed), ("randomised", randomised)]}
    print(acc)
    assert acc["clean"]["removed"] > 0.75 and acc["clean"]["randomised"] > 0.6
    assert acc["swap"]["marked"] > 0.8
    assert acc["swap"]["randomised"] < 0.3 and acc["swap"]["removed"] < 0.4


def test_training_is_deterministic_and_keeps_global_rng(train_split):
    data = _subset(train_split, 200)
    states = []
    for _ in range(2):
        torch.manual_seed(123)
        model = SmallCNN(width=4)
        before = torch.random.get_rng_state()
        out = train_classifier(model, data, epochs=2, lr=1e-2, batch_size=64, seed=5, progress="never")
        assert torch.equal(torch.random.get_rng_state(), before)  # the caller's RNG is not consumed
        states.append(model.state_dict())
    for k in states[0]:
        assert torch.equal(states[0][k], states[1][k]), k
    assert len(out["history"]) == 2 and {"epoch", "loss", "train_accuracy", "seconds"} <= set(out["history"][0])
    torch.manual_seed(123)
    other = SmallCNN(width=4)
    train_classifier(other, data, epochs=2, lr=1e-2, batch_size=64, seed=6, progress="never")
    assert not torch.equal(other.fc.weight, states[0]["fc.weight"])


def test_training_learns_and_restores_flags(train_split, test_split):
    model = SmallCNN(width=8)
    model.eval()
    out = train_classifier(model, _subset(train_split, 300), epochs=3, lr=0.05, batch_size=32, seed=0,
                           optimizer="sgd", eval_dataset=test_split, progress="never")
    assert not any(m.training for m in model.modules())
    hist = out["history"]
    assert hist[-1]["loss"] < hist[0]["loss"]
    assert hist[-1]["eval_accuracy"] == pytest.approx(evaluate_accuracy(model, test_split))
    assert hist[-1]["eval_accuracy"] > 0.3


def test_non_tensor_dataset_and_dataloader(train_split):
    sub = _subset(train_split, 64)
    model = SmallCNN(width=4)
    train_classifier(model, NoTensors(sub), epochs=1, lr=1e-3, batch_size=16, seed=0, progress="never")
    loader = DataLoader(NoTensors(sub), batch_size=16)
    pred_a, y_a = predict(model, loader)
    pred_b, y_b = predict(model, sub)
    assert torch.equal(pred_a, pred_b) and torch.equal(y_a, sub.y) and torch.equal(y_b, sub.y)
    train_classifier(model, loader, epochs=1, lr=1e-3, seed=0, progress="never")


def test_evaluate_accuracy_leaves_model_untouched(test_split):
    model = SmallCNN(width=4)
    model.train()
    model.block2.eval()  # a mixed state must survive as it is
    model.fc.weight.requires_grad_(False)
    snap = _snapshot(model)
    acc = evaluate_accuracy(model, test_split, batch_size=100)
    _assert_same(model, snap)
    with torch.no_grad():
        model.eval()
        expected = float((model(test_split.x).argmax(1) == test_split.y).float().mean())
    assert acc == pytest.approx(expected)


def test_evaluate_accuracy_device_mismatch(test_split):
    with pytest.raises(ValueError, match="move the model"):
        evaluate_accuracy(SmallCNN(width=4), test_split, device="meta")


def test_pgd_attack_bounds_loss_and_model_untouched(test_split):
    torch.manual_seed(0)
    model = SmallCNN(width=8)
    train_classifier(model, test_split, epochs=1, lr=3e-3, seed=0, progress="never")
    model.train()
    snap = _snapshot(model)
    x, y = test_split.x[:64], test_split.y[:64]
    eps = 0.1
    adv = pgd_attack(model, x, y, eps=eps, steps=5, generator=torch.Generator().manual_seed(0))
    _assert_same(model, snap)
    assert float((adv - x).abs().max()) <= eps + 1e-6
    assert float(adv.min()) >= 0.0 and float(adv.max()) <= 1.0
    with torch.no_grad():
        model.eval()
        assert F.cross_entropy(model(adv), y) > F.cross_entropy(model(x), y)


def test_adversarial_training_runs(train_split):
    model = SmallCNN(width=4)
    out = train_classifier(model, _subset(train_split, 64), epochs=1, lr=1e-3, batch_size=32, seed=0,
                           adversarial=dict(eps=8 / 255, steps=2), progress="never")
    assert len(out["history"]) == 1 and all(p.grad is not None for p in model.parameters())
    with pytest.raises(ValueError, match="eps"):
        train_classifier(model, _subset(train_split, 8), epochs=1, adversarial=dict(steps=3), progress="never")


def test_bad_training_arguments(train_split):
    model = SmallCNN(width=4)
    data = _subset(train_split, 8)
    with pytest.raises(ValueError, match="optimizer"):
        train_classifier(model, data, optimizer="lbfgs", progress="never")
    with pytest.raises(ValueError, match="epochs"):
        train_classifier(model, data, epochs=0, progress="never")


def test_recompute_bn_stats_exact():
    model = nn.Sequential(nn.BatchNorm2d(2))
    x = torch.randn(40, 2, 3, 3) * 3 + 1
    recompute_bn_stats(model, ImageTensors(x, torch.zeros(40, dtype=torch.long), 1), batch_size=40)
    assert torch.allclose(model[0].running_mean, x.mean((0, 2, 3)), atol=1e-5)
    assert torch.allclose(model[0].running_var, x.var((0, 2, 3), unbiased=True), atol=1e-4)
    assert model[0].momentum == 0.1 and model.training


def test_save_weights_atomic_overwrite(tmp_path):
    model = SmallCNN(width=4)
    path = tmp_path / "w.pt"
    save_weights(model, path)
    with torch.no_grad():
        model.fc.bias.fill_(2.0)
    save_weights(model, path)
    state = torch.load(path, weights_only=True)
    assert torch.all(state["fc.bias"] == 2.0)
    assert [p.name for p in tmp_path.iterdir()] == ["w.pt"]
