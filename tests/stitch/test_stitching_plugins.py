"""End to end: the stitch-* metrics through similarity_plugins.compare."""

from __future__ import annotations

import copy
import math
import re

import pytest
import torch
from torch import nn

import similarity_plugins
from similarity_plugins import Data, compare
from similarity_plugins.datasets.tensors import ImageTensors
from similarity_plugins.networks.context import Context
from tests.helpers.models import assert_unchanged, snapshot
from tests.helpers.tolerance import twin_stitch_score_ok

pytestmark = pytest.mark.usefixtures("one_torch_thread")

STITCH = ["stitch-hlm", "stitch-slm", "stitch-dm", "stitch-fula"]
FAST = {"epochs": 1}


@pytest.fixture(scope="module")
def data(digits16) -> Data:
    return digits16


@pytest.fixture(scope="module")
def trained(tiny_cnn16) -> nn.Module:
    """tiny_cnn trained on 16x16 digits (the session donor from conftest)."""
    return tiny_cnn16


def permuted_rescaled_copy(model: nn.Module, seed: int = 0) -> nn.Module:
    """A functionally identical copy whose channels at ``block2`` are permuted and positively rescaled.

    block2 = conv -> BN -> ReLU -> MaxPool. Its conv output channels, conv bias and BN parameters and
    statistics are permuted together; BN weight and bias are scaled by s > 0 (ReLU and max pooling
    commute with positive scaling, so the activation at the cut is permuted and scaled by s); block3's
    conv input channels are permuted the same way and divided by s, so every later value is unchanged.
    """
    clone = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    conv, bn, nxt = clone.block2[0], clone.block2[1], clone.block3[0]
    c = conv.out_channels
    perm = torch.randperm(c, generator=g)
    scale = torch.exp(torch.empty(c).uniform_(-2.5, 2.5, generator=g))  # about 0.08 .. 12
    with torch.no_grad():
        conv.weight.copy_(conv.weight[perm])
        conv.bias.copy_(conv.bias[perm])
        bn.running_mean.copy_(bn.running_mean[perm])
        bn.running_var.copy_(bn.running_var[perm])
        bn.weight.copy_(bn.weight[perm] * scale)
        bn.bias.copy_(bn.bias[perm] * scale)
        nxt.weight.copy_(nxt.weight[:, perm] / scale.view(1, c, 1, 1))
    return clone


def test_self_stitch_scores_one_under_every_objective(trained, data):
    report = compare(trained, trained, "block2", data, STITCH, options=FAST)
    for r in report:
        assert r.ok, r.error
        assert r.score >= 0.99, (r.metric, r.score)
        d = r.details
        assert d["objective"] == r.metric.split("-")[1]
        assert d["end_accuracy"] == d["front_accuracy"] > 0.85
        assert 0.95 <= d["agreement"] <= 1.0 and d["stitched_accuracy"] > 0.85  # HLM may drift towards the labels
        assert d["train_size"] == 1347 and d["test_size"] == 450 and d["resized"] is False
        assert d["settings"]["epochs"] == 1 and d["settings"]["lr"] == 1e-3 and len(d["losses"]) == 1
        assert math.isfinite(d["final_loss"])
    assert report["stitch-dm"].details["dm_relative_error"] < 1e-3


def test_permuted_rescaled_copy_stitches_while_cka_drops(trained, data):
    twin = permuted_rescaled_copy(trained)
    xt = data.test.tensors[0]
    with torch.no_grad():
        assert torch.allclose(twin(xt), trained(xt), atol=1e-4)  # functionally identical
    report = compare(trained, twin, "block2", data, STITCH + ["cka-linear"], options=FAST)
    for metric in STITCH:
        assert report[metric].ok, report[metric].error
        assert report[metric].score >= 0.98, (metric, report[metric].score)
    cka = report["cka-linear"].score
    assert cka < 0.9, cka  # CKA sees the changed geometry; stitching sees the same function


def test_donors_are_bit_identical_afterwards(trained, data):
    front, end = copy.deepcopy(trained), permuted_rescaled_copy(trained)
    front.train()  # the user's model in train mode: must stay so, with its BatchNorm statistics unchanged
    end.block1.train()
    end.fc.weight.requires_grad_(False)
    before = snapshot(front), snapshot(end)
    report = compare(front, end, "block2", data, STITCH, options={"epochs": 1, "max_train": 256})
    assert all(r.ok for r in report), [r.error for r in report]
    assert_unchanged(front, before[0])
    assert_unchanged(end, before[1])
    assert front.training and end.block1.training and not end.training


def test_same_seed_same_scores(trained, data):
    twin = permuted_rescaled_copy(trained, seed=1)
    options = {"epochs": 1, "init": "random", "lr": 1e-2, "max_train": 256}
    first = compare(trained, twin, "block1", data, STITCH, seed=3, options=options)
    second = compare(trained, twin, "block1", data, STITCH, seed=3, options=options)
    for a, b in zip(first, second):
        assert a.ok and a.score == b.score and a.details["losses"] == b.details["losses"]


def test_fitted_stitches_are_memoised_within_a_context(trained, data, monkeypatch):
    from similarity_plugins.stitch import service

    calls = []
    real = service.fit_stitch
    monkeypatch.setattr(service, "fit_stitch", lambda *a, **k: calls.append(a[4]) or real(*a, **k))
    ctx = Context(data, seed=0)
    layers = ["block1", "block2"]
    options = {**FAST, "max_train": 256}  # what is counted is the fits, not their quality
    first = compare(trained, trained, layers, data, STITCH, context=ctx, options=options)
    assert sorted(calls) == sorted(["hlm", "slm", "dm", "fula"] * 2)
    second = compare(trained, trained, layers, data, STITCH, context=ctx, options=options)
    assert len(calls) == 8  # nothing refitted
    assert [r.score for r in first] == [r.score for r in second]
    caches = [k for k in ctx.memo if k[0] == "stitch-cache"]
    assert len(caches) == 2  # one activation/target cache per layer, shared by the four objectives
    compare(trained, trained, "block1", data, ["stitch-dm"], context=ctx, options={**options, "epochs": 2})
    assert len(calls) == 9  # new settings: a new fit
    assert [k for k in ctx.memo if k[0] == "stitch-cache"] == caches  # the caches are reused


def test_service_trains_on_other_inputs_than_the_training_split(trained, data):
    """The path the invariance-aware plugins take: their own inputs (e.g. IRIs) with the seeds' labels."""
    from similarity_plugins.stitch import TrainingSet, stitch_result

    x, y = data.train.tensors
    noisy = (x[:256] + 0.05 * torch.randn(256, *x.shape[1:], generator=torch.Generator().manual_seed(0))).clamp(0, 1)
    ctx = Context(Data(test=data.test), seed=0, progress="auto")  # no training split needed
    source = TrainingSet(noisy, y[:256], key=("noisy-digits", 0), name="IRIs")
    result = stitch_result(ctx, trained, trained, "block2", "slm", {"epochs": 1, "batch_size": 64}, train_source=source)
    assert result.details["train_source"] == "IRIs" and result.details["train_size"] == 256
    assert result.score >= 0.95
    again = stitch_result(ctx, trained, trained, "block2", "slm", {"epochs": 1, "batch_size": 64}, train_source=source)
    assert again.details == result.details  # memoised by the source's key


def test_resize_between_different_spatial_sizes_is_reported(trained, data):
    report = compare(trained, trained, ("block1", "block2"), data, ["stitch-dm"], options=FAST)
    r = report["stitch-dm"]
    assert r.ok, r.error
    assert r.details["resized"] is True and "8x8" in r.details["warnings"][0] and "4x4" in r.details["warnings"][0]
    assert r.details["front_shape"] == [8, 8, 8] and r.details["end_shape"] == [16, 4, 4]


# ------------------------------------------------------------------------------------ bad input


def _error(report, metric="stitch-hlm") -> str:
    r = report[metric]
    assert not r.ok and r.score is None
    return r.error


def test_no_training_split(trained, data):
    report = compare(trained, trained, "block2", Data(test=data.test), STITCH, options=FAST)
    for metric in STITCH:
        assert "no training split was given" in _error(report, metric)


def test_labels_out_of_range_of_the_end_model(trained, data):
    x, y = data.test.tensors
    bad_test = ImageTensors(x, torch.where(y == 3, 11, y))
    report = compare(trained, trained, "block2", Data(data.train, bad_test), ["stitch-dm"], options=FAST)
    assert "test labels range from 0 to 11, but the end model has 10 classes" in _error(report, "stitch-dm")
    x, y = data.train.tensors
    bad_train = ImageTensors(x, y + 10)
    report = compare(trained, trained, "block2", Data(bad_train, data.test), ["stitch-hlm"], options=FAST)
    assert "training labels range from 10 to 19" in _error(report)


def test_incompatible_layer_pair(trained, data):
    report = compare(trained, trained, ("block2", "flatten"), data, STITCH, options=FAST)
    for metric in STITCH:
        assert "same number of positions" in _error(report, metric)


def test_training_set_smaller_than_one_batch(trained, data):
    x, y = data.train.tensors
    small = Data(ImageTensors(x[:50], y[:50]), data.test)
    row = compare(trained, trained, "block2", small, ["stitch-hlm"], options=FAST)["stitch-hlm"]
    assert row.ok, row.error   # batch_size 128 > 50 samples: one batch of all 50
    assert row.details["train_size"] == 50 and twin_stitch_score_ok("stitch-hlm", row.score)


def test_nan_loss(trained, data):
    before = snapshot(trained)
    report = compare(trained, trained, "block2", data, ["stitch-slm"], options={"epochs": 2, "lr": 1e30, "max_train": 256})
    assert re.search(r"diverged: the SLM loss is (nan|inf) at epoch [12] of 2", _error(report, "stitch-slm"))
    assert_unchanged(trained, before)


# ------------------------------------------------------------------------- real architectures


def _self_labelled(model: nn.Module, n: int, seed: int) -> ImageTensors:
    """Random 3x32x32 images labelled by ``model`` itself (so its accuracy is 1 and the ratio defined)."""
    x = torch.rand(n, 3, 32, 32, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        y = model.eval()(x).argmax(1)
    return ImageTensors(x, y, num_classes=10)


@pytest.mark.slow  # trains a stitch on torchvision's ResNet-18
def test_torchvision_resnet18_end_to_end():
    import torchvision

    torch.manual_seed(0)
    a, b = torchvision.models.resnet18(num_classes=10).eval(), torchvision.models.resnet18(num_classes=10).eval()
    data = Data(_self_labelled(b, 64, 0), _self_labelled(b, 32, 1))
    options = {"epochs": 1, "batch_size": 32}
    report = compare(b, b, "layer1", data, STITCH, options=options)
    for r in report:
        assert r.ok, r.error
        assert 0.0 <= r.score <= 2.0 and r.details["front_shape"] == [64, 8, 8]
    # an untrained network's logits are nearly tied, so label-driven objectives may flip a few; DM starts
    # at the exact least-squares answer (the identity) where its gradient vanishes
    assert report["stitch-dm"].score == 1.0 and report["stitch-dm"].details["init"]["relative_error"] < 1e-6
    cross = compare(a, b, ("layer1", "layer2.0"), data, ["stitch-fula"], options=options)["stitch-fula"]
    assert cross.ok, cross.error
    assert cross.details["resized"] and cross.details["end_shape"] == [128, 4, 4]


@pytest.mark.slow  # a ViT-Tiny front and end, stitched
def test_timm_vit_end_to_end():
    import timm
    import torchvision

    torch.manual_seed(0)
    vit = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, patch_size=4, num_classes=10).eval()
    data = Data(_self_labelled(vit, 16, 0), _self_labelled(vit, 8, 1))
    report = compare(vit, vit, "blocks.3", data, STITCH, options={"epochs": 1, "batch_size": 8})
    for r in report:
        assert r.ok, r.error
        assert 0.0 <= r.score <= 2.0 and r.details["front_shape"] == [65, 192] and "position-wise" in r.details["stitch"]
    assert report["stitch-dm"].score == 1.0
    resnet = torchvision.models.resnet18(num_classes=10).eval()
    mixed = compare(resnet, vit, ("layer1", "blocks.3"), data, ["stitch-dm"], options={"epochs": 1, "batch_size": 8})
    assert "class/register tokens" in _error(mixed, "stitch-dm")


def test_metrics_are_registered_with_descriptions():
    for name in STITCH:
        info = similarity_plugins.metric_info(name)
        assert info.error is None and "stitching" in info.description
