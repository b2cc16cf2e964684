"""optimizer="auto" at wide pooled cuts (the "wide" presets), wide ResNet cuts and the small CNNs."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from similarity_plugins.iri import generate_iris
from similarity_plugins.iri.presets import (
    COSINE_RESNET_MIN_STRIDE,
    DEEP_POOLED_RELUS,
    EXPANSION,
    PRESETS,
    SHALLOW_RESNET_RELUS,
    WIDE_POOLED_RELUS,
    WIDE_RESNET_MIN_STRIDE,
    Structure,
    choose_preset,
)
from tests.helpers.iri import ResidualBlock

_SETTINGS = ("optimizer", "lr", "cycle_steps", "beta1", "relu_leak", "fold_bn", "cycle_decay", "fake_relu")


def _rule(relu_calls: int, iv: int = 0, ov: int = 0, after: int = 0, stride: int = 0, at_pool: bool = False,
          bn: bool = True) -> str:
    """The Adam preset ``choose_preset`` names for a front of this structure."""
    return choose_preset(Structure(relu_calls=relu_calls, relus_after_last_maxpool=after, input_values=iv,
                                   output_values=ov, stride=stride, ends_at_maxpool=at_pool, batchnorm=bn), "adam")


def _picked(model: nn.Module, layer: str, seeds: torch.Tensor, **options) -> tuple:
    s = generate_iris(model, layer, seeds, steps=5, progress="never", **options).settings
    return tuple(s[name] for name in _SETTINGS)


def test_auto_gives_wide_pooled_cuts_one_cosine_at_adams_lr_with_leaky_gradients():
    wide = PRESETS["wide"]
    assert (wide["cycle_steps"], wide["fold_bn"], wide["relu_leak"], wide["fake_relu"]) == (0, True, 0.1, "none")
    n = WIDE_POOLED_RELUS
    # fronts ending at a max-pool with 6 or 7 ReLU calls whose cut is not 2x compressive
    assert _rule(n, 3072, 2048, at_pool=True) == "wide"            # VGG-11-BN features.21
    assert _rule(7, 3072, 4096, at_pool=True) == "wide"            # VGG-16-BN features.23
    assert _rule(7, 3072, 1537, at_pool=True) == "wide"
    assert _rule(7, 3072, 1536, at_pool=True) == "adam"                        # 2x compressive: Adam's own
    assert _rule(n - 1, 3072, 4096, at_pool=True) == "adam"                    # VGG-11-BN features.14
    assert _rule(n, 3072, 2048, 1, at_pool=True) == "adam"                     # a ReLU after the pool
    assert _rule(n, 3072, 2048, 5, at_pool=True) == "resnet"         # inside a ResNet block: its rule
    assert _rule(n - 2, 1024, 128, at_pool=True) == "adam"                     # SmallCNN block4
    assert _rule(n, at_pool=True) == "adam"                                    # sizes unknown
    assert _rule(n, 3072, 2048) == "adam"                        # a conv after the pool
    torch.manual_seed(0)
    seeds = torch.rand(2, 1, 16, 16)
    layers = []
    for i in range(n):   # 6 Conv-BN-ReLU, then a max-pool: 8x8x8 = 512 values from 256 pixels
        layers += [nn.Conv2d(1 if i == 0 else 8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU()]
    pooled = nn.Sequential(*layers, nn.MaxPool2d(2)).eval()
    assert _picked(pooled, str(3 * n), seeds) == ("adam", 0.2, 0, 0.9, 0.1, True, 1.0, "none")
    iris = generate_iris(pooled, str(3 * n), seeds, steps=5, progress="never")
    assert iris.settings["fake_relu_at"] == []                                      # the leak covers the last too
    assert _picked(pooled, str(3 * n), seeds, tuning={"fake_relu": "last"})[-1] == "last"          # yours wins
    assert _picked(pooled, str(3 * n), seeds, tuning={"fake_relu": "auto"})[-1] == "last"
    assert _picked(pooled, str(3 * n), seeds, cycle_steps=50)[2:] == (50, 0.9, 0.1, True, 1.0, "none")   # only itself
    assert _picked(pooled, str(3 * n), seeds, tuning={"relu_leak": 0.0, "lr": 0.3})[1:5] == (0.3, 0, 0.9, 0.0)
    narrow = nn.Sequential(*layers, nn.MaxPool2d(4)).eval()   # 8x4x4 = 128 values: 2x compressive
    assert _picked(narrow, str(3 * n), seeds) == ("adam", 0.2, 300, 0.9, 0.0, False, 1.0, "last")


def test_auto_gives_deep_pooled_cuts_with_more_values_than_the_input_the_wide_rule():
    """VGG-19-BN's 3rd pool (8 ReLU calls, 4,096 values from 3,072 pixels): one cosine at lr 0.2 ended at 0.103,
    the deep pooled rule's lr 0.05 at 0.137, the plain loop at 0.114."""
    n = DEEP_POOLED_RELUS
    assert _rule(n, 3072, 4096, at_pool=True) == "wide"                      # VGG-19-BN features.26
    assert _rule(n + 4, 3072, 3073, at_pool=True) == "wide"
    assert _rule(n, 3072, 3072, at_pool=True) == "vgg-deep-pool"               # as many: unchanged
    assert _rule(n, 3072, 2048, at_pool=True) == "vgg-deep-pool"               # VGG-16-BN features.33
    assert _rule(n, 3072, 4096) == "vgg-deep-pool"     # a conv after the pool
    assert _rule(n, at_pool=True) == "vgg-deep-pool"                           # sizes unknown
    assert _rule(n, 3072, 4096, at_pool=True, bn=False) == "wide-nobn"
    torch.manual_seed(0)
    layers = []
    for i in range(n):   # 8 Conv-BN-ReLU, then a max-pool: 8x8x8 = 512 values from 256 pixels
        layers += [nn.Conv2d(1 if i == 0 else 8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU()]
    pooled = nn.Sequential(*layers, nn.MaxPool2d(2)).eval()
    assert _picked(pooled, str(3 * n), torch.rand(2, 1, 16, 16)) == ("adam", 0.2, 0, 0.9, 0.1, True, 1.0, "none")


def test_auto_gives_wide_strided_resnet_cuts_one_cosine_and_keeps_heavy_momentum_at_stride_4():
    """One cosine wins at ResNet-50 layer2 (stride 8) but lost 3x at CIFAR-stem ResNet-18 layer3 (stride 4),
    and at ResNet-50 layer1 on natural-image patches (stride 4)."""
    assert WIDE_RESNET_MIN_STRIDE == 8 and EXPANSION == 2
    assert _rule(22, 3072, 8192, 21, 8) == "wide"    # ResNet-50 layer2
    assert _rule(17, 3072, 8192, 17, 8) == "wide"    # CIFAR-stem ResNet-18 layer4
    assert _rule(13, 3072, 16384, 13, 4) == "resnet"   # CIFAR-stem ResNet-18 layer3
    assert _rule(10, 3072, 16384, 9, 4) == "resnet"    # ResNet-50 layer1
    assert _rule(22, 3072, 6143, 21, 8) == "resnet"    # under 2x the input's values
    assert _rule(22, 3072, 6144, 21, 8) == "wide"    # the edge: exactly 2x
    assert _rule(22, 3072, 8192, 21) == "resnet"       # stride unknown
    assert _rule(10, 3072, 2048, 9, 8) == "resnet"     # ResNet-18 layer2: narrower
    torch.manual_seed(0)
    w = 8   # stem (stride 4), 3 residual blocks, 64 channels, then 2x fewer rows: 9 ReLU calls, no max-pool

    def resnet(channels: int) -> nn.Module:
        return nn.Sequential(nn.Conv2d(1, w, 4, stride=4, bias=False), nn.BatchNorm2d(w), nn.ReLU(),
                             *[ResidualBlock(w) for _ in range(3)], nn.Conv2d(w, 64, 1), nn.ReLU(),
                             nn.Conv2d(64, channels, 1, stride=2), nn.ReLU()).eval()

    seeds = torch.rand(2, 1, 16, 16)    # 256 pixels
    heavy, one_cosine = ("adam", 0.2, 300, 0.98, 0.1, True, 0.5, "last"), ("adam", 0.2, 0, 0.9, 0.1, True, 1.0, "none")
    assert _picked(resnet(128), "7", seeds) == heavy          # 64x4x4 = 1,024 values (4x) at stride 4
    assert _picked(resnet(128), "9", seeds) == one_cosine     # 128x2x2 = 512 values (2x) at stride 8
    assert _picked(resnet(96), "9", seeds) == heavy           # 96x2x2 = 384 values (1.5x) at stride 8


def test_auto_gives_deep_resnet_cuts_at_stride_16_one_cosine_with_heavy_momentum():
    """Bottleneck ResNets' layer3 / layer4 at 32x32 (4,096 / 2,048 values at stride 16 / 32): the resnet
    preset's momentum, leak and folding, one cosine instead of its cycles."""
    assert COSINE_RESNET_MIN_STRIDE == 16
    cosine = PRESETS["resnet-cosine"]
    assert (cosine["beta1"], cosine["relu_leak"], cosine["fold_bn"], cosine["cycle_steps"]) == (0.98, 0.1, True, 0)
    assert _rule(40, 3072, 4096, 39, 16) == "resnet-cosine"            # ResNet-50 layer3
    assert _rule(49, 3072, 2048, 48, 32) == "resnet-cosine"            # ResNet-50 layer4
    assert _rule(10, 3072, 2048, 9, 8) == "resnet"      # ResNet-18 layer2: stride 8
    assert _rule(40, 3072, 4096, 39) == "resnet"        # stride unknown
    assert _rule(40, 0, 0, 39, 16) == "resnet"           # sizes unknown
    assert _rule(40, 3072, 1537, 39, 16) == "resnet-cosine"            # the edge: over half ...
    assert _rule(40, 3072, 1536, 39, 16) == "resnet-compressive"   # ... half
    torch.manual_seed(0)
    w = 8   # stem (stride 4), 3 residual blocks, then two stride-2 convolutions: stride 16, no max-pool

    def resnet(channels: int) -> nn.Module:
        return nn.Sequential(nn.Conv2d(1, w, 4, stride=4, bias=False), nn.BatchNorm2d(w), nn.ReLU(),
                             *[ResidualBlock(w) for _ in range(3)], nn.Conv2d(w, 64, 1, stride=2), nn.ReLU(),
                             nn.Conv2d(64, channels, 1, stride=2), nn.ReLU()).eval()

    seeds = torch.rand(2, 1, 16, 16)    # 256 pixels
    one_cosine = ("adam", 0.2, 0, 0.98, 0.1, True, 1.0, "last")
    heavy = ("adam", 0.2, 300, 0.98, 0.1, True, 0.5, "last")
    assert _picked(resnet(192), "9", seeds) == one_cosine                 # 192x1x1 values (0.75x) at stride 16
    assert _picked(resnet(192), "7", seeds) == heavy                      # 64x2x2 = 256 values at stride 8
    assert _picked(resnet(192), "9", seeds, cycle_steps=300)[2:] == (300, 0.98, 0.1, True, 1.0, "last")   # only itself
    assert _picked(resnet(96), "9", seeds)[0] == "lbfgs"                  # 96 values: compressive


def test_auto_gives_shallow_expanding_pooled_cuts_shorter_cycles():
    """VGG's 1st and 2nd pools, SmallCNN block1 / block2: cycles of 150 with BatchNorm folded."""
    assert PRESETS["pool-expanding"] == {**PRESETS["adam"], "cycle_steps": 150, "fold_bn": True} and EXPANSION == 2
    assert _rule(2, 3072, 16384, at_pool=True) == "pool-expanding"       # VGG-16-BN features.6
    assert _rule(4, 3072, 8192, at_pool=True) == "pool-expanding"        # VGG-16-BN features.13
    assert _rule(2, 1024, 2048, at_pool=True) == "pool-expanding"        # the edge: exactly 2x
    assert _rule(2, 1024, 2047, at_pool=True) == "adam"                         # under 2x: Adam's own
    assert _rule(5, 3072, 8192, at_pool=True) == "pool-expanding"        # up to 5 ReLU calls
    assert _rule(2, 3072, 16384, 1, at_pool=True) == "adam"                     # a ReLU after the pool
    assert _rule(1, 3072, 65536, 1, at_pool=True) == "adam"                     # VGG-16-BN features.2
    assert _rule(2, at_pool=True) == "adam"                                     # sizes unknown
    assert _rule(2, 3072, 16384) == "adam"                        # not at a max-pool
    assert _rule(0, 3072, 16384, at_pool=True) == "adam"                                  # no ReLU call at all


@pytest.mark.parametrize("width", [16, 32])
@pytest.mark.parametrize("block", ["block1", "block2", "block3", "block4"])
def test_auto_on_the_small_cnn(block, width):
    """SmallCNN at width 32 (``block3``: the issue's no-regression cut) and 16 (the demo's width): Adam's
    defaults (lr 0.2, cycles of 300, no leak, unfolded) except where the cut has at least twice the input's
    values (block1; block2 at width 32), which gets cycles of 150 with BatchNorm folded."""
    from similarity_plugins.apps.zoo import SmallCNN

    torch.manual_seed(0)
    expanding = block == "block1" or (block == "block2" and width == 32)
    cycles, folded = (150, True) if expanding else (300, False)
    assert _picked(SmallCNN(width=width).eval(), block, torch.rand(2, 1, 32, 32)) == (
        "adam", 0.2, cycles, 0.9, 0.0, folded, 1.0, "last")


def test_fake_relu_auto_is_last_outside_the_wide_pooled_cuts_and_checked_once():
    from similarity_plugins.iri.settings import make_settings

    common = dict(steps=5, tol=1e-2, init="noise", seed=0, preset="adam")
    assert make_settings(**common, ends_at_relu=True).fake_relu == "last"
    assert make_settings(**common, ends_at_relu=False).fake_relu == "none"
    assert make_settings(**{**common, "preset": "wide"}, ends_at_relu=True).fake_relu == "none"
    with pytest.raises(ValueError, match="fake_relu must be one of auto, last, none"):
        make_settings(**common, tuning={"fake_relu": "lst"})
    with pytest.raises(ValueError, match="fake_relu must be"):
        make_settings(**common, tuning={"fake_relu": "all"})
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 4, 3, padding=1), nn.ReLU()).eval()
    seeds = torch.rand(2, 1, 8, 8)
    assert _picked(model, "3", seeds)[-1] == "last"
    assert _picked(model, "3", seeds, optimizer="lbfgs")[-1] == "last"
    assert _picked(model, "3", seeds, tuning={"fake_relu": "none"})[-1] == "none"


def test_fake_relu_auto_is_none_where_a_conv_or_batchnorm_follows_the_last_relu():
    """At a cut after a conv or BatchNorm the last ReLU is inside the front: its straight-through gradient
    points the wrong way (ResNet-18 layer3.1.bn2: no sample converged with it, all in 117 steps without)."""
    from torchvision.models import resnet18

    from similarity_plugins.iri.relu import trace_front
    from similarity_plugins.networks.split import SplitNetwork

    torch.manual_seed(0)
    seeds = torch.rand(2, 1, 8, 8)
    conv = lambda: nn.Conv2d(4, 4, 3, padding=1)  # noqa: E731
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Dropout(), nn.Flatten(),
                          nn.Unflatten(1, (4, 4, 4)), conv(), nn.BatchNorm2d(4), nn.ReLU(), conv()).eval()

    def trace(m: nn.Module, layer: str, x: torch.Tensor):
        return trace_front(m, SplitNetwork(m, layer).front, x)

    ends = {layer: trace(model, layer, seeds).ends_at_relu for layer in map(str, range(10))}
    assert ends == {"0": False, "1": True, "2": True, "3": True, "4": True, "5": False, "6": False, "7": False,
                    "8": True, "9": False}
    assert [_picked(model, layer, seeds)[-1] for layer in ("4", "5", "7", "8", "9")] == [
        "last", "none", "none", "last", "none"]
    assert _picked(model, "7", seeds, tuning={"fake_relu": "last"})[-1] == "last"      # the caller's choice stays theirs
    net = resnet18(num_classes=10).eval()
    x = torch.rand(1, 3, 32, 32)
    assert trace(net, "layer1.0", x).ends_at_relu and trace(net, "layer1", x).ends_at_relu
    assert not trace(net, "layer1.0.bn2", x).ends_at_relu and not trace(net, "layer2.0.conv1", x).ends_at_relu
    assert not trace(net, "layer2.0.downsample", x).ends_at_relu
    assert trace(net, "avgpool", x).ends_at_relu and not trace(net, "fc", x).ends_at_relu
    assert (trace(net, "avgpool", x).cut_values, trace(net, "fc", x).cut_values) == (512, 10)
    inside = generate_iris(net, "layer3.1.bn2", torch.rand(2, 3, 32, 32), steps=3, progress="never")   # L-BFGS
    assert inside.stats["bn_folded"] and inside.settings["fake_relu"] == "none"   # a traced front in the block
    up = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(8), nn.AdaptiveAvgPool2d(3),
                       nn.Flatten(), nn.Linear(36, 5)).eval()
    sizes = [(t.output_values, t.cut_values) for t in (trace(up, str(i), seeds) for i in range(6))]
    assert sizes == [(256, 256), (256, 256), (4, 4), (36, 4), (36, 4), (5, 5)]   # copies are not values
    big = torch.rand(1, 3, 64, 64)   # ResNet-18's avgpool averages layer4's 2x2 there: no straight-through
    assert not trace(net, "avgpool", big).ends_at_relu and trace(net, "layer4", big).ends_at_relu


def test_no_straight_through_gradient_after_a_batchnorm_converges_where_it_would_not(trained):
    model, seeds = trained   # the tiny CNN's second block: conv, BatchNorm, ReLU, max-pool; cut at its BatchNorm
    common = dict(steps=200, tol=1e-2, progress="never")
    auto = generate_iris(model, "1.1", seeds[:8], **common)
    last = generate_iris(model, "1.1", seeds[:8], tuning={"fake_relu": "last"}, **common)
    assert auto.settings["fake_relu"] == "none" and auto.settings["fake_relu_at"] == []
    assert auto.summary["median_error"] < 0.5 * last.summary["median_error"], (auto.summary, last.summary)


def test_the_trace_rounds_the_stride_and_knows_where_the_front_ends():
    from similarity_plugins.iri.relu import trace_front
    from similarity_plugins.networks.split import SplitNetwork

    model = nn.Sequential(nn.Conv2d(1, 4, 3, stride=2, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Sequential(nn.Conv2d(4, 8, 3, stride=2, padding=1), nn.MaxPool2d(1)),
                          nn.Conv2d(8, 8, 1)).eval()

    def trace(layer: str, size: int):
        return trace_front(model, SplitNetwork(model, layer).front, torch.rand(1, 1, size, size))

    assert trace("3", 28).stride == 8 and trace("3", 32).stride == 8     # 28 -> 4 rows: 7, rounded to 8
    assert trace("2", 28).stride == 4 and trace("2", 30).stride == 4     # 30 -> 8 rows (3.75)
    assert trace("2", 28).ends_at_maxpool and trace("3", 28).ends_at_maxpool   # a block that ends at its pool
    assert not trace("4", 28).ends_at_maxpool and not trace("1", 28).ends_at_maxpool
    flat = nn.Sequential(nn.Flatten(), nn.Linear(16, 4)).eval()
    assert trace_front(flat, SplitNetwork(flat, "1").front, torch.rand(1, 16)).stride == 0   # no rows


def test_auto_gives_shallow_resnet_cuts_the_heavy_momentum_adam():
    """ResNet-18 layer1 (4 ReLU calls after the stem's pool, 5 in all) and a CIFAR-stem layer1 (5, no pool) run
    the resnet preset; VGG-19 mid-block cuts (4 after a pool, 11 in all) keep the pooled rules."""
    assert SHALLOW_RESNET_RELUS == 4
    assert _rule(5, 3072, 4096, 4) == "resnet"           # ResNet-18 layer1
    assert _rule(5, 3072, 65536, 5, 1) == "resnet"       # CIFAR-stem layer1
    assert _rule(3, 3072, 4096, 3) == "adam"                       # ResNet-50 layer1.0
    assert _rule(11, 3072, 4096, 4) == "vgg-deep-pool"   # VGG-19-BN features.32
    torch.manual_seed(0)
    w = 8   # stem with a max-pool, then 2 residual blocks: 4 ReLU calls after the pool, 5 in all
    model = nn.Sequential(nn.Conv2d(1, w, 3, padding=1, bias=False), nn.BatchNorm2d(w), nn.ReLU(), nn.MaxPool2d(2),
                          *[ResidualBlock(w) for _ in range(2)]).eval()
    assert _picked(model, "5", torch.rand(2, 1, 16, 16)) == ("adam", 0.2, 300, 0.98, 0.1, True, 0.5, "last")
    assert _picked(model, "4", torch.rand(2, 1, 16, 16)) == ("adam", 0.2, 300, 0.9, 0.0, False, 1.0, "last")
