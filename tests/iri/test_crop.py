"""Convolution taps that only read padding are cut from the private front copy (``iri/front.py``)."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch import nn

from similarity_plugins.iri import generate_iris
from similarity_plugins.iri.front import crop_dead_taps, cropped_conv, folded_front, live_taps
from tests.helpers.iri import checked_torchvision_iris, torchvision_cut


@pytest.mark.parametrize("size,kernel,stride,padding,dilation,expected", [
    (1, 3, 1, 1, 1, (1, 1)),    # ResNet layer4 at 32x32: only the centre tap reads the 1x1 map
    (2, 3, 2, 1, 1, (1, 2)),    # layer4.0.conv1: stride 2 from 2x2 to 1x1
    (2, 3, 1, 1, 1, (0, 2)),    # VGG conv5 at 2x2: every tap reads a pixel for some output
    (5, 3, 1, 0, 1, (0, 2)),
    (1, 5, 1, 2, 1, (2, 2)),
    (2, 3, 1, 2, 2, (1, 1)),    # dilated: the outer taps land on padding
])
def test_live_taps(size, kernel, stride, padding, dilation, expected):
    assert live_taps(size, kernel, stride, padding, dilation) == expected


def _configs():
    for dims, size, kernel, stride, padding, dilation, groups in itertools.product(
            (1, 2, 3), (1, 2, 3), (1, 3, 5), (1, 2), (0, 1, 2, 3), (1, 2), (1, 2)):
        if size + 2 * padding - dilation * (kernel - 1) - 1 >= 0:
            yield dims, size, kernel, stride, padding, dilation, groups


def test_cropped_conv_is_the_same_function_wherever_it_crops():
    torch.manual_seed(0)
    crops = 0
    for dims, size, kernel, stride, padding, dilation, groups in _configs():
        conv = [nn.Conv1d, nn.Conv2d, nn.Conv3d][dims - 1](4, 6, kernel, stride=stride, padding=padding,
                                                            dilation=dilation, groups=groups, bias=groups == 1)
        x = torch.randn(3, 4, *[size] * dims)
        new = cropped_conv(conv, (size,) * dims)
        if new is None:
            continue
        crops += 1
        assert type(new) is type(conv) and new.weight.numel() < conv.weight.numel()
        assert not any(p.requires_grad for p in new.parameters())
        with torch.no_grad():
            ref, out = conv(x), new(x)
        assert out.shape == ref.shape, (dims, size, kernel, stride, padding, dilation)
        torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)
    assert crops > 100   # the grid holds many cropping cases


def test_cropped_conv_leaves_full_and_non_zero_padded_convs():
    assert cropped_conv(nn.Conv2d(2, 2, 3, padding=1), (4, 4)) is None
    assert cropped_conv(nn.Conv2d(2, 2, 3, padding=1, padding_mode="reflect"), (1, 1)) is None
    assert cropped_conv(nn.Conv2d(2, 2, 3, padding="same"), (1, 1)) is None
    new = cropped_conv(nn.Conv2d(2, 5, 3, padding=1), (1, 3))   # only the height is cropped
    assert new.kernel_size == (1, 3) and new.padding == (0, 1)


class _StandardisedConv(nn.Conv2d):
    """A convolution whose forward standardises its whole kernel (as timm's StdConv2d): not croppable."""

    def forward(self, x):
        w = self.weight
        w = (w - w.mean(dim=(1, 2, 3), keepdim=True)) / (w.std(dim=(1, 2, 3), keepdim=True) + 1e-5)
        return self._conv_forward(x, w, self.bias)


def test_subclassed_or_hooked_convolutions_are_left_alone():
    assert cropped_conv(_StandardisedConv(2, 2, 3, padding=1), (1, 1)) is None
    hooked = nn.Conv2d(2, 2, 3, padding=1)
    hooked.register_forward_pre_hook(lambda m, args: None)
    assert cropped_conv(hooked, (1, 1)) is None
    model = nn.Sequential(_StandardisedConv(2, 3, 3, padding=1), nn.Conv2d(3, 3, 3, padding=1)).eval()
    x = torch.rand(2, 2, 1, 1)
    with torch.no_grad():
        ref = model(x)
        assert crop_dead_taps(model, x[:1]) == ["1"]
        torch.testing.assert_close(model(x), ref)


class _TwoSizes(nn.Module):
    """One convolution called on a 1x1 and on a 3x3 map."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 2, 3, padding=1)
        self.single = nn.Conv2d(2, 2, 3, padding=1)

    def forward(self, x):
        small = self.single(self.conv(x[..., :1, :1]))
        return self.conv(x).sum() + small.sum()


def test_crop_dead_taps_skips_a_module_called_at_two_sizes():
    model = _TwoSizes().eval()
    assert crop_dead_taps(model, torch.rand(1, 2, 3, 3)) == ["single"]
    assert model.conv.kernel_size == (3, 3) and model.single.kernel_size == (1, 1)


def test_resnet18_layer4_front_is_cropped_at_32_pixels_only():
    model, split, x, front, ref = torchvision_cut("resnet18", "layer4", (4, 3, 32, 32))
    names = crop_dead_taps(front, x[:1])
    assert sorted(names) == ["layer4.0.conv1", "layer4.0.conv2", "layer4.1.conv1", "layer4.1.conv2"]
    assert front.get_submodule("layer4.0.conv1").kernel_size == (2, 2)
    assert front.get_submodule("layer4.1.conv2").kernel_size == (1, 1)
    with torch.no_grad():
        torch.testing.assert_close(front(x), ref, rtol=1e-4, atol=1e-5 * float(ref.abs().max()))
    assert model.layer4[1].conv2.kernel_size == (3, 3)   # the model is not touched
    assert crop_dead_taps(folded_front(split.front_graph), torch.rand(1, 3, 64, 64)) == []   # 2x2 maps: no dead taps


def test_generate_iris_runs_the_cropped_front_and_reports_true_errors():
    model, seeds, iris = checked_torchvision_iris("resnet18", "layer4")
    assert iris.settings["optimizer"] == "lbfgs" and iris.stats["bn_folded"]
    assert len(iris.stats["convs_cropped"]) == 4
    plain = generate_iris(model, "layer4", seeds, steps=3, progress="never", tuning={"fold_bn": False})
    assert plain.stats["convs_cropped"] == []


class _KeywordAndUnbatched(nn.Module):
    """Convolutions called as ``conv(input=x)`` and on an unbatched (C, H, W) tensor."""

    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(2, 3, 3, padding=1)
        self.b = nn.Conv2d(2, 3, 3, padding=1)

    def forward(self, x):
        return self.a(input=x).sum() + self.b(x[0, :, :, :1]).sum()


def test_crop_dead_taps_reads_keyword_and_unbatched_inputs():
    """A keyword input is seen (it used to raise IndexError); an unbatched input's size is its last two
    axes, not axes 2: (it used to crop the height of a (2, 5, 1) map as if it were 1)."""
    model = _KeywordAndUnbatched().eval()
    x = torch.rand(1, 2, 1, 1)
    assert crop_dead_taps(model, x) == ["a", "b"]   # both see 1x1 maps
    model = _KeywordAndUnbatched().eval()
    x = torch.rand(1, 2, 5, 4)
    with torch.no_grad():
        ref = model(x)
        assert crop_dead_taps(model, x) == ["b"]   # b: (2, 5, 1) -> only the width is cropped
        assert model.b.kernel_size == (3, 1)
        torch.testing.assert_close(model(x), ref)
