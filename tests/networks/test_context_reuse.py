"""`Context.with_test`: the fitted stitches and IRIs of one context serve another test split; nothing computed
on the test split carries over."""

from __future__ import annotations

from torch.utils.data import Subset

from similarity_plugins import Data, compare
from similarity_plugins.networks.context import Context
from similarity_plugins.stitch.service import fitted_stitch

FAST = {"epochs": 1, "batch_size": 64, "max_train": 128}


def test_with_test_keeps_what_depends_on_the_training_split_only(digits32, small_cnn_donors):
    a, b = small_cnn_donors
    ctx = Context(digits32, seed=3, options=FAST)
    stitch = fitted_stitch(ctx, a, b, "block1", "hlm", FAST)
    ctx.activations(a, "block1", "test")
    before = dict(ctx.memo)
    other = Subset(digits32.test, range(40))
    child = ctx.with_test(other)
    assert child.data.train is digits32.train and child.data.test is other
    assert (child.seed, child.options, child.device) == (ctx.seed, ctx.options, ctx.device)
    assert fitted_stitch(child, a, b, "block1", "hlm", FAST) is stitch   # not trained again
    assert not any(isinstance(k, tuple) and k[0] == "activations" for k in child.memo)   # test-split entries stay
    child.activations(a, "block1", "test")
    assert child.activations(a, "block1", "test").shape[0] == 40
    assert ctx.memo.keys() == before.keys() and all(ctx.memo[k] is before[k] for k in before)   # left as it was
    assert ctx.activations(a, "block1", "test").shape[0] == len(digits32.test)


def test_compare_in_a_with_test_context_equals_a_fresh_compare(digits32, small_cnn_donors):
    a, b = small_cnn_donors
    other = Subset(digits32.test, range(60))
    ctx = Context(digits32, seed=2, options=FAST)
    compare(a, b, "block1", digits32, "stitch-hlm", seed=2, options=FAST, context=ctx)
    child = ctx.with_test(other)
    reused = compare(a, b, "block1", child.data, "stitch-hlm", seed=2, options=FAST, context=child)["stitch-hlm"]
    fresh = compare(a, b, "block1", Data(digits32.train, other), "stitch-hlm", seed=2, options=FAST)["stitch-hlm"]
    assert reused.error is None and reused.score == fresh.score
    assert reused.details["agreement"] == fresh.details["agreement"]


def test_activations_read_through_a_loader_are_held_counted_and_read_again_after_an_in_place_write():
    import torch
    from torch import nn

    model, reads = nn.Identity(), []
    ctx = Context(Data())
    ctx.derived_bytes = 10**6

    def read() -> torch.Tensor:
        reads.append(1)
        return torch.arange(12, dtype=torch.float32).reshape(3, 4)

    key = ("activations", id(model), "layer", "test")
    ctx.loaders[key] = read
    first = ctx.activations(model, "layer")
    assert ctx.activations(model, "layer").data_ptr() == first.data_ptr() and len(reads) == 1  # held: read once
    assert ctx._derived[key] == 48  # counted against derived_bytes
    first.mul_(0)  # a metric writes it in place
    assert ctx.drop_changed() and key not in ctx._derived  # forgotten, and no longer counted
    assert ctx.activations(model, "layer")[0, 1] == 1.0 and len(reads) == 2  # read again, as stored
