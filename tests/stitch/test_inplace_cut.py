"""A cut followed by an in-place op (``ReLU(inplace=True)``, the torchvision ResNet/VGG pattern): every service
reads the cut's output as produced, not the tensor the in-place op overwrote afterwards."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from torch import nn

import similarity_plugins as sp
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


@pytest.mark.slow
@pytest.mark.parametrize("plain_first", [True, False], ids=["plain->in-place", "in-place->plain"])
def test_the_same_function_with_and_without_in_place_relus_stitches_perfectly(tiny_cnn16, digits16, plain_first):
    pair = (tiny_cnn16, in_place(tiny_cnn16)) if plain_first else (in_place(tiny_cnn16), tiny_cnn16)
    report = compare(*pair, CUT, digits16, STITCH, options={"epochs": 1, "max_train": 512})
    for metric in STITCH:
        assert report[metric].ok and twin_stitch_score_ok(metric, report[metric].score), (metric, report[metric].error)


def test_a_metric_reads_the_cut_as_produced_through_the_context(tiny_cnn16, digits16, fresh_manager):
    seen = {}

    class Reader:
        needs = ("test",)
        activations_only = True

        @sp.hookimpl
        def similarity(self, front, layer, context):
            seen["acts"] = context.activations(front, layer.front, "test")
            return 0.5

    sp.register_metric(Reader(), "reader")
    model = in_place(tiny_cnn16)
    assert compare(model, model, CUT, digits16, "reader")["reader"].ok
    x = digits16.test.tensors[0]
    expected = bn_output(tiny_cnn16, x).reshape(len(x), -1)
    assert (expected < 0).any() and torch.allclose(seen["acts"].reshape(len(x), -1), expected, atol=1e-6)


def test_a_grid_stitches_a_model_to_its_in_place_twin_perfectly(tiny_cnn16, digits16):
    grid = sp.compare_grid({"plain": tiny_cnn16, "in-place": in_place(tiny_cnn16)}, [CUT], digits16, "stitch-dm",
                           options={"epochs": 1, "max_train": 256})
    assert all(cell.ok for cell in grid.cells.values())
    np.testing.assert_allclose(grid.matrix("stitch-dm"), 1.0, atol=1e-6)
