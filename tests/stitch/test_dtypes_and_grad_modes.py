"""Stitching for donors of every floating dtype and whatever the caller's grad mode; CKA in inference mode."""

from __future__ import annotations

import copy

import pytest
import torch

from similarity_plugins import compare
from tests.helpers.tolerance import twin_stitch_score_ok

pytestmark = pytest.mark.usefixtures("one_torch_thread")

STITCH = ["stitch-hlm", "stitch-dm", "stitch-fula"]
OPTIONS = {"epochs": 1, "max_train": 128}


def _stitch_twins(model, data):
    report = compare(model, copy.deepcopy(model), "block2", data, STITCH, options=OPTIONS)
    for row in report:
        assert row.ok, (row.metric, row.error)
        assert twin_stitch_score_ok(row.metric, row.score), (row.metric, row.score)  # a model and its copy
    return report


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16], ids=str)
def test_donors_of_any_floating_dtype_stitch(tiny_cnn16, digits16, dtype):
    model = copy.deepcopy(tiny_cnn16).to(dtype)
    report = _stitch_twins(model, digits16)
    assert report["stitch-dm"].details["init"]["relative_error"] < (1e-6 if dtype == torch.float64 else 1e-2)
    assert all(p.dtype == dtype for p in model.parameters())  # the user's model keeps its dtype


@pytest.mark.parametrize("mode", [torch.no_grad, torch.inference_mode], ids=["no_grad", "inference_mode"])
def test_stitching_works_inside_the_callers_grad_mode(tiny_cnn16, digits16, mode):
    twin = copy.deepcopy(tiny_cnn16)
    with mode():
        report = compare(tiny_cnn16, twin, "block2", digits16, STITCH + ["cka-linear"], options=OPTIONS)
        assert not torch.is_grad_enabled()  # the caller's mode, as it was
    for row in report:
        assert row.ok and twin_stitch_score_ok(row.metric, row.score), (row.metric, row.error, row.score)


def test_stitching_works_with_a_float64_default_dtype(tiny_cnn16, digits16):
    saved = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        _stitch_twins(tiny_cnn16, digits16)
        assert torch.get_default_dtype() == torch.float64
    finally:
        torch.set_default_dtype(saved)



@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16], ids=str)
def test_iris_of_a_donor_in_another_dtype_than_its_seeds(dtype):
    """float32 seeds into a float64 donor: the optimiser runs in float64; into a bfloat16 donor: on its float32
    copy."""
    from similarity_plugins.iri import generate_iris
    from tests.helpers.models import tiny_cnn

    model = tiny_cnn().eval()
    seeds = torch.rand(4, 1, 16, 16, generator=torch.Generator().manual_seed(0))
    other = copy.deepcopy(model).to(dtype)
    got = generate_iris(other, "block1", seeds, steps=10, seed=0, precision="float32")
    working = torch.float64 if dtype == torch.float64 else torch.float32
    expected = generate_iris(copy.deepcopy(other).to(working), "block1", seeds.to(working), steps=10, seed=0,
                             precision="float32")
    assert torch.equal(got.inputs, expected.inputs)  # the same optimisation
    assert all(p.dtype == dtype for p in other.parameters())


def test_a_model_built_in_inference_mode_is_refused_naming_the_fix():
    from tests.helpers.models import tiny_cnn

    with torch.inference_mode():
        made_inside = tiny_cnn().eval()
    model = tiny_cnn().eval()
    with pytest.raises(ValueError, match=r"front \(Sequential\) holds inference tensors .*outside inference mode"):
        compare(made_inside, model, "block2", None, "cka-linear")
