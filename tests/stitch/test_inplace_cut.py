"""A cut followed by an in-place op (``ReLU(inplace=True)``, the torchvision ResNet/VGG pattern): every service
reads the cut's output as produced, not the tensor the in-place op overwrote afterwards."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from similarity_plugins import compare
from similarity_plugins.networks.split import SplitNetwork
from tests.helpers.tolerance import twin_stitch_score_ok

pytestmark = pytest.mark.usefixtures("one_torch_thread")

STITCH = ["stitch-hlm", "stitch-slm", "stitch-dm", "stitch-fula"]
CUT = "block2.1"  # BatchNorm, followed by ReLU(inplace=True) once the flag is set


def in_place(model: nn.Module) -> nn.Module:
    """A copy of ``model`` whose ReLUs write into their input (the same function)."""
    twin = copy.deepcopy(model)
    for module in twin.modules():
        if isinstance(module, nn.ReLU):
            module.inplace = True
    return twin


def bn_output(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The output of ``CUT`` as produced, read by a hook that copies it at once."""
    seen = []
    handle = model.get_submodule(CUT).register_forward_hook(lambda _m, _i, out: seen.append(out.clone()))
    try:
        with torch.no_grad():
            model(x)
    finally:
        handle.remove()
    return seen[0]


def test_native_and_end_see_the_cut_as_produced(tiny_cnn16, digits16):
    model = in_place(tiny_cnn16)
    x = digits16.test.tensors[0][:32]
    expected = bn_output(tiny_cnn16, x)
    assert (expected < 0).any()  # the ReLU would change it, so the test can tell the difference
    split = SplitNetwork(model, CUT)
    with torch.no_grad():
        act, logits, _ = split.native(x)
        h = split.front(x)
        h_before = h.clone()
        end_logits = split.end(h)
    assert torch.equal(act, expected) and torch.equal(h, expected)
    assert torch.equal(h, h_before)  # the end runs on a copy: the caller's tensor is not written
    # both paths run the same float32 ops on the same values; only the graph around them differs
    assert torch.allclose(end_logits, logits, atol=1e-5) and torch.allclose(logits, tiny_cnn16(x), atol=1e-5)


def test_twins_with_in_place_relu_stitch_perfectly(tiny_cnn16, digits16):
    model = in_place(tiny_cnn16)
    twin = copy.deepcopy(model)
    report = compare(model, twin, CUT, digits16, STITCH + ["cka-linear"], options={"epochs": 1, "max_train": 512})
    for metric in STITCH:
        row = report[metric]
        assert row.ok, row.error
        assert twin_stitch_score_ok(metric, row.score), (metric, row.score)
        assert row.details["init"]["relative_error"] < 1e-5, (metric, row.details["init"])  # exact up to float32
    assert report["stitch-dm"].details["dm_relative_error"] < 1e-4
    assert report["cka-linear"].score == pytest.approx(1.0, abs=1e-6)
