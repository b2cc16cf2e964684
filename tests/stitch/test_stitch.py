"""Units of similarity_plugins.stitch: layer, initialisation, objectives, cache, trainer, settings."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from similarity_plugins.networks.split import SplitNetwork
from similarity_plugins.stitch import StitchDivergedError, StitchLayer, StitchSettings, StitchShapeError, fit_stitch
from similarity_plugins.stitch.cache import TrainingCache
from similarity_plugins.stitch.init import identity_init, least_squares_init, random_init
from similarity_plugins.stitch.layer import plan_stitch
from similarity_plugins.stitch.objectives import (
    NEEDS,
    dm_loss,
    fula_loss,
    hlm_loss,
    relative_sq_error,
    slm_loss,
    stitched_loss,
)
from tests.helpers.models import assert_unchanged, snapshot, tiny_cnn
from tests.helpers.tolerance import FLOAT32_PATHS

pytestmark = pytest.mark.usefixtures("one_torch_thread")


# ------------------------------------------------------------------------------------------- layer


def test_conv_stitch_same_size():
    plan = plan_stitch((8, 4, 4), (16, 4, 4))
    layer = StitchLayer(plan)
    assert plan.conv and plan.resize is None
    assert isinstance(layer.affine, nn.Conv2d) and layer.affine.kernel_size == (1, 1) and layer.affine.bias is not None
    assert layer(torch.randn(3, 8, 4, 4)).shape == (3, 16, 4, 4)


def test_conv_stitch_resizes_bilinearly_and_says_so():
    plan = plan_stitch((8, 8, 8), (16, 4, 4))
    assert plan.resize == (4, 4) and "bilinear resize 8x8 -> 4x4" in plan.describe()
    layer = StitchLayer(plan)
    a = torch.randn(2, 8, 8, 8)
    expected = layer.affine(F.interpolate(a, size=(4, 4), mode="bilinear", align_corners=False))
    assert torch.allclose(layer(a), expected, **FLOAT32_PATHS)


def test_token_stitch_is_tokenwise_linear():
    plan = plan_stitch((5, 6), (5, 7))
    layer = StitchLayer(plan)
    assert isinstance(layer.affine, nn.Linear) and not plan.conv
    a = torch.randn(2, 5, 6)
    out = layer(a)
    assert out.shape == (2, 5, 7)
    assert torch.allclose(out[:, 3], layer.affine(a[:, 3]), **FLOAT32_PATHS)  # every token, the same map (CLS included)


def test_vector_stitch():
    assert StitchLayer(plan_stitch((6,), (4,)))(torch.randn(3, 6)).shape == (3, 4)


def test_batchnorm_option():
    assert isinstance(StitchLayer(plan_stitch((8, 4, 4), (8, 4, 4)), bn=True).bn, nn.BatchNorm2d)
    assert isinstance(StitchLayer(plan_stitch((5, 6), (5, 6)), bn=True).bn, nn.BatchNorm1d)
    assert StitchLayer(plan_stitch((5, 6), (5, 6))).bn is None


def test_token_count_mismatch_is_a_clear_error():
    with pytest.raises(StitchShapeError, match="token count mismatch: the front has 65 tokens.*expects 17"):
        plan_stitch((65, 192), (17, 192))


def test_cnn_to_transformer_with_class_token_is_a_clear_error():
    with pytest.raises(ValueError, match="class/register tokens"):
        plan_stitch((64, 8, 8), (65, 192))
    with pytest.raises(ValueError, match="same number of positions"):
        plan_stitch((16, 4, 4), (16,))


def test_cnn_map_to_tokens_when_positions_match_is_row_major():
    plan = plan_stitch((3, 2, 2), (4, 5))
    layer = StitchLayer(plan)
    a = torch.randn(2, 3, 2, 2)
    out = layer(a)
    assert out.shape == (2, 4, 5)
    assert torch.allclose(out[:, 1], layer.affine(a[:, :, 0, 1]), **FLOAT32_PATHS)  # position (0, 1) is token 1
    back = StitchLayer(plan_stitch((4, 5), (3, 2, 2)))
    assert back(out).shape == (2, 3, 2, 2)


# ---------------------------------------------------------------------------------- initialisation


class _ArrayCache:
    """Stands in for TrainingCache in the least-squares unit tests: fixed A and B arrays."""

    def __init__(self, a: torch.Tensor, b: torch.Tensor) -> None:
        self.a, self.b = a, b

    def __len__(self) -> int:
        return len(self.a)

    def front(self, idx):
        return self.a[idx]

    def end_cut(self, idx):
        return self.b[idx]


@pytest.mark.parametrize("bn", [False, True])
def test_least_squares_recovers_an_exact_affine_map(bn):
    g = torch.Generator().manual_seed(0)
    a = torch.randn(50, 6, 3, 3, generator=g) * torch.linspace(0.5, 3, 6).view(1, 6, 1, 1) + 1.0
    true = nn.Conv2d(6, 4, 1)
    with torch.no_grad():
        b = true(a)
    stitch = StitchLayer(plan_stitch((6, 3, 3), (4, 3, 3)), bn=bn).eval()
    info = least_squares_init(stitch, _ArrayCache(a, b), 2048, torch.Generator().manual_seed(1), batch_size=16)
    assert info["method"] == "least-squares" and info["samples"] == 50 and info["rows"] == 50 * 9
    assert info["relative_error"] < 1e-10
    with torch.no_grad():
        assert torch.allclose(stitch(a), b, atol=1e-4)
    if not bn:
        assert torch.allclose(stitch.weight_matrix, true.weight.view(4, 6), atol=1e-4)
        assert torch.allclose(stitch.affine.bias, true.bias, atol=1e-4)


def test_least_squares_matches_numpy_pinv_with_a_dead_channel_and_resize():
    g = torch.Generator().manual_seed(0)
    a = torch.relu(torch.randn(40, 5, 4, 4, generator=g))
    a[:, 2] = 0.0  # a dead channel: rank-deficient design, pinv gives the minimum-norm answer
    b = torch.randn(40, 3, 2, 2, generator=g)
    stitch = StitchLayer(plan_stitch((5, 4, 4), (3, 2, 2)))
    info = least_squares_init(stitch, _ArrayCache(a, b), 2048, torch.Generator().manual_seed(0))
    rows_a = F.interpolate(a.double(), size=(2, 2), mode="bilinear", align_corners=False).permute(0, 2, 3, 1).reshape(-1, 5)
    rows_b = b.double().permute(0, 2, 3, 1).reshape(-1, 3).numpy()
    z = np.concatenate([rows_a.numpy(), np.ones((len(rows_a), 1))], axis=1)
    solution = np.linalg.pinv(z) @ rows_b
    assert np.allclose(stitch.weight_matrix.detach().numpy(), solution[:5].T, atol=1e-5)
    assert np.allclose(stitch.affine.bias.detach().numpy(), solution[5], atol=1e-5)
    residual = ((z @ solution - rows_b) ** 2).sum() / (rows_b**2).sum()
    assert info["relative_error"] == pytest.approx(residual, rel=1e-6)


def test_least_squares_on_tokens_uses_a_random_subset():
    a = torch.randn(30, 4, 3)
    b = a @ torch.randn(3, 2) + 0.5
    stitch = StitchLayer(plan_stitch((4, 3), (4, 2)))
    info = least_squares_init(stitch, _ArrayCache(a, b), 10, torch.Generator().manual_seed(0))
    assert info["samples"] == 10 and info["rows"] == 40
    with torch.no_grad():
        assert torch.allclose(stitch(a), b, atol=1e-4)  # exact map, so the subset suffices


def test_identity_init():
    stitch = StitchLayer(plan_stitch((4, 3, 3), (4, 3, 3)))
    identity_init(stitch)
    a = torch.randn(2, 4, 3, 3)
    assert torch.equal(stitch(a), a)
    with pytest.raises(ValueError, match="init='identity' needs the same number of features.*4 -> 8"):
        identity_init(StitchLayer(plan_stitch((4, 3, 3), (8, 3, 3))))


def test_random_init_is_seeded():
    def weights(seed):
        s = StitchLayer(plan_stitch((4, 3, 3), (5, 3, 3)))
        random_init(s, torch.Generator().manual_seed(seed))
        return s.affine.weight.detach().clone()

    assert torch.equal(weights(3), weights(3))
    assert not torch.equal(weights(3), weights(4))
    assert weights(3).abs().max() <= 0.5  # 1/sqrt(fan_in=4)


# ---------------------------------------------------------------------------------- objectives


def test_hlm_is_cross_entropy():
    logits, labels = torch.randn(5, 3), torch.tensor([0, 2, 1, 1, 0])
    assert torch.allclose(hlm_loss(logits, labels), F.cross_entropy(logits, labels), **FLOAT32_PATHS)


def test_slm_is_cross_entropy_to_the_softmax():
    logits, target = torch.randn(4, 3), torch.randn(4, 3)
    expected = -(F.softmax(target, 1) * F.log_softmax(logits, 1)).sum(1).mean()
    assert torch.allclose(slm_loss(logits, target), expected, **FLOAT32_PATHS)
    same = target.clone().requires_grad_(True)
    loss = slm_loss(same, target)
    entropy = -(F.softmax(target, 1) * F.log_softmax(target, 1)).sum(1).mean()
    assert torch.allclose(loss, entropy, **FLOAT32_PATHS)  # minimum: the targets' entropy
    loss.backward()
    assert same.grad.abs().max() < 1e-6
    t2 = slm_loss(logits, target, temperature=2.0)
    assert torch.allclose(t2, -(F.softmax(target / 2, 1) * F.log_softmax(logits / 2, 1)).sum(1).mean(), **FLOAT32_PATHS)


def test_dm_sum_and_normalised():
    stitched = torch.tensor([[1.0, 1.0], [2.0, 0.0]])
    target = torch.tensor([[0.0, 2.0], [1.0, 0.0]])
    assert dm_loss(stitched, target).item() == pytest.approx(1.5)  # per-sample sums 2 and 1
    assert dm_loss(stitched, target, "normalised").item() == pytest.approx(0.75)  # 2/4 and 1/1
    assert relative_sq_error(stitched, target).tolist() == pytest.approx([0.5, 1.0])
    with pytest.raises(ValueError, match="normalised"):
        dm_loss(stitched, target, "mean")


def test_fula_sums_relative_errors_per_term_with_weights():
    s0, t0 = torch.tensor([[1.0, 1.0], [2.0, 0.0]]), torch.tensor([[0.0, 2.0], [1.0, 0.0]])  # 0.75
    s1, t1 = torch.tensor([[3.0]]).expand(2, 1), torch.tensor([[1.0]]).expand(2, 1)  # 4 per sample
    assert fula_loss([s0, s1], [t0, t1]).item() == pytest.approx(4.75)
    assert fula_loss([s0, s1], [t0, t1], weights=[2.0, 0.5]).item() == pytest.approx(3.5)
    assert fula_loss([t0, t1], [t0, t1]).item() == 0.0
    with pytest.raises(ValueError, match="one weight per term"):
        fula_loss([s0, s1], [t0, t1], weights=[1.0])


@pytest.mark.parametrize("objective", ["hlm", "slm", "dm", "fula"])
def test_gradients_reach_only_the_stitch(objective):
    model = tiny_cnn()
    model.train()
    before = snapshot(model)
    split = SplitNetwork(model, "block1")
    x, y = torch.rand(6, 1, 16, 16), torch.randint(0, 10, (6,))
    with torch.no_grad():
        a = split.front(x)
        cut, logits, taps = split.native(x)
    targets = {"labels": y, "end_logits": logits, "end_cut": cut, "end_taps": taps}
    stitch = StitchLayer(plan_stitch(tuple(a.shape[1:]), tuple(cut.shape[1:])))
    random_init(stitch, torch.Generator().manual_seed(0))
    loss = stitched_loss(objective, stitch(a), split, {k: targets[k] for k in NEEDS[objective]})
    loss.backward()
    assert all(p.grad is None for p in model.parameters())
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in stitch.parameters())
    assert_unchanged(model, before)


# ------------------------------------------------------------------------------------ training


@pytest.fixture(scope="module")
def donor():
    torch.manual_seed(0)
    return tiny_cnn().eval()


@pytest.fixture(scope="module")
def inputs():
    g = torch.Generator().manual_seed(0)
    return torch.rand(96, 1, 16, 16, generator=g), torch.randint(0, 10, (96,), generator=g)


def _fit(model, x, y, objective="hlm", front="block1", end="block1", **settings):
    base = {"epochs": 2, "batch_size": 32}
    base.update(settings)
    return fit_stitch(SplitNetwork(model, front), SplitNetwork(model, end), x, y, objective, StitchSettings(**base))


@pytest.mark.parametrize("objective", ["hlm", "slm", "dm", "fula"])
def test_fit_is_deterministic_and_seeded(donor, inputs, objective):
    x, y = inputs
    first = _fit(donor, x, y, objective, end="block2", seed=5, init="random")
    second = _fit(donor, x, y, objective, end="block2", seed=5, init="random")
    other = _fit(donor, x, y, objective, end="block2", seed=6, init="random")
    assert first.losses == second.losses and len(first.losses) == 2
    assert torch.equal(first.stitch.affine.weight, second.stitch.affine.weight)
    assert not torch.equal(first.stitch.affine.weight, other.stitch.affine.weight)
    assert first.steps == 2 * 3 and first.train_size == 96 and not first.stitch.training


def test_training_lowers_the_loss_from_random_init(donor, inputs):
    x, y = inputs
    fitted = _fit(donor, x, y, "dm", end="block2", init="random", epochs=6, lr=1e-2)
    assert fitted.losses[-1] < 0.5 * fitted.losses[0]


def test_front_and_end_run_once_and_dm_never_runs_the_end(donor, inputs, monkeypatch):
    x, y = inputs
    front, end = SplitNetwork(donor, "block1"), SplitNetwork(donor, "block2")
    calls = {"front": 0, "end": 0}
    real_front, real_end = front.front, end.end_with_taps

    def count_front(xb):
        calls["front"] += 1
        return real_front(xb)

    def count_end(h):
        calls["end"] += 1
        return real_end(h)

    monkeypatch.setattr(front, "front", count_front)
    monkeypatch.setattr(end, "end_with_taps", count_end)
    cache = TrainingCache(front, end, x, y, batch_size=32)
    fitted = fit_stitch(front, end, None, None, "dm", StitchSettings(epochs=3, batch_size=32), cache=cache)
    assert calls["end"] == 0  # DM: no end forward at all
    assert calls["front"] == 1 + 3  # a 2-sample shape probe, then one pass of 3 batches for 3 epochs
    assert cache.passes == {"front": 1, "end": 1}
    fit_stitch(front, end, None, None, "fula", StitchSettings(epochs=3, batch_size=32), cache=cache)
    assert calls["front"] == 4 and cache.passes == {"front": 1, "end": 2}  # only the taps were added
    assert calls["end"] == 3 * 3  # FuLA: the end on the stitched activations, every batch
    fit_stitch(front, end, None, None, "slm", StitchSettings(epochs=1, batch_size=32), cache=cache)
    assert cache.passes == {"front": 1, "end": 2}  # B's logits came with the first end pass
    assert fitted.final_loss == fitted.losses[-1]


def test_targets_come_from_the_given_inputs(donor):
    noise = torch.rand(40, 1, 16, 16, generator=torch.Generator().manual_seed(3))
    fitted = _fit(donor, noise, None, "slm", end="block2", batch_size=20, epochs=1)
    with torch.no_grad():
        expected = donor(noise)
    assert torch.allclose(fitted.cache.stores["end_logits"].tensor, expected, atol=1e-5)
    assert fitted.train_size == 40


def test_memory_mapped_cache_gives_the_same_stitch(donor, inputs):
    x, y = inputs
    in_memory = _fit(donor, x, y, "fula", end="block2", cache_limit_mb=1024)
    mapped = _fit(donor, x, y, "fula", end="block2", cache_limit_mb=0)
    assert mapped.cache.memmapped() and not in_memory.cache.memmapped()
    assert in_memory.losses == mapped.losses
    assert torch.equal(in_memory.stitch.affine.weight, mapped.stitch.affine.weight)


def test_max_train_uses_a_seeded_subset(donor, inputs):
    x, y = inputs
    fitted = _fit(donor, x, y, "dm", max_train=64)
    assert fitted.train_size == 64


def test_batchnorm_stitch_trains_and_least_squares_starts_exact(donor, inputs):
    x, y = inputs
    fitted = _fit(donor, x, y, "dm", stitch_bn=True, epochs=1)
    assert fitted.init["relative_error"] < 1e-6  # self-stitch: the identity, in normalised units
    assert fitted.stitch.bn is not None and not fitted.stitch.training


def test_a_training_set_smaller_than_a_batch_is_one_batch(donor, inputs):
    x, y = inputs
    assert len(x) == 96
    whole = _fit(donor, x, y, "hlm", batch_size=128, init="random")
    exact = _fit(donor, x, y, "hlm", batch_size=96, init="random")
    assert whole.steps == exact.steps == 2 and whole.losses == exact.losses  # the same steps on the same rows
    assert all(torch.equal(a, b) for a, b in zip(whole.stitch.parameters(), exact.stitch.parameters()))
    with pytest.raises(ValueError, match=r"1 sample\(s\): too few to train a stitch with stitch_bn"):
        _fit(donor, x[:1], y[:1], "dm", stitch_bn=True)


def test_labels_out_of_range(donor, inputs):
    x, y = inputs
    with pytest.raises(ValueError, match="labels range from 0 to 12, but the end model has 10 classes"):
        _fit(donor, x, torch.where(y == 1, 12, y), "hlm")


def test_incompatible_layers(donor, inputs):
    x, y = inputs
    with pytest.raises(StitchShapeError, match="same number of positions"):
        _fit(donor, x, y, "dm", end="flatten")


def test_nan_loss_stops_with_the_epoch_and_leaves_donors_intact(inputs):
    model = tiny_cnn()
    model.train()
    before = snapshot(model)
    x, y = inputs
    with pytest.raises(StitchDivergedError, match=r"loss is (nan|inf) at epoch \d+ of 3.*lower the learning rate"):
        _fit(model, x, y, "slm", end="block2", lr=1e30, epochs=3)
    assert_unchanged(model, before)


def test_fula_weights_must_match_the_terms(donor, inputs):
    x, y = inputs
    fitted = _fit(donor, x, y, "fula", end="block2", fula_weights=[1.0, 0.0, 0.0], epochs=1)
    assert fitted.losses[-1] >= 0
    with pytest.raises(ValueError, match="fula_weights has 2 values but FuLA has 3 terms"):
        _fit(donor, x, y, "fula", end="block2", fula_weights=[1.0, 1.0], epochs=1)


# ------------------------------------------------------------------------------------ settings


def test_settings_defaults_follow_the_paper():
    s = StitchSettings().validated()
    assert (s.epochs, s.lr, s.weight_decay, s.batch_size, s.init, s.ls_samples) == (30, 1e-3, 1e-4, 128, "least-squares", 2048)
    total = 30 * 10
    assert s.lr_at(0, total) == 1e-3 and s.lr_at(99, total) == 1e-3
    assert s.lr_at(100, total) == pytest.approx(1e-4) and s.lr_at(200, total) == pytest.approx(1e-5)


def test_settings_from_options():
    s = StitchSettings.from_options({"epochs": 6, "milestone_epochs": [4, 2], "init": "LSTSQ", "max_samples": 9}, seed=3)
    assert s.milestones == (pytest.approx(1 / 3), pytest.approx(2 / 3)) and s.init == "least-squares" and s.seed == 3
    assert s.milestone_epochs is None and "milestone_epochs" not in s.as_dict()
    with pytest.raises(ValueError, match="option init must be one of least-squares, identity, random, got 'svd'"):
        StitchSettings.from_options({"init": "svd"})
    with pytest.raises(ValueError, match="option dm_loss must be one of sum, normalised, got 'mean'"):
        StitchSettings.from_options({"dm_loss": "mean"})
    assert StitchSettings.from_options({"init": "Eye", "dm_loss": "Normalized"}).validated() == \
        StitchSettings(init="identity", dm_loss="normalised").validated()
    with pytest.raises(ValueError, match="lr must be a positive number"):
        StitchSettings.from_options({"lr": -1})
    with pytest.raises(ValueError, match="batch_size must be a positive integer"):
        StitchSettings.from_options({"batch_size": 0})
    hash(s)  # usable in memo keys
