"""Convolution taps that only ever read padding, cut from a private copy of the front: the same function in
less work.

At 32x32 inputs the deep layers of a ResNet see maps of 1x1 pixels: ``layer4``'s 3x3 convolutions (padding
1) then multiply eight of their nine taps by the zero padding, yet every forward and backward pass reads
all nine (ResNet-18 ``layer4``: three of its four 3x3 convolutions, 7 M of the front's 11 M weights). A
convolution whose outer taps touch no input pixel for any output position computes exactly what the
convolution of its inner taps computes with correspondingly less padding, so the copy gets that one:
1.26-1.33x less time per forward+backward of ResNet-18 / ResNet-34 fronts at ``layer4`` on a CPU (batch
16). The values differ only by rounding (the dropped terms are exact zeros). The crop depends on the
input's spatial size, so it is made for the seeds of one run, on the private copy that
``fold.private_front`` makes.
"""

from __future__ import annotations

import torch
from torch import nn

from .probe import input_shapes

CONVS = (nn.Conv1d, nn.Conv2d, nn.Conv3d)


def live_taps(size: int, kernel: int, stride: int, padding: int, dilation: int) -> tuple[int, int]:
    """The first and last kernel tap (0-based) that reads an input position (not padding) for at least one
    output position, along one spatial axis of ``size`` input positions; (0, kernel - 1) when every tap does
    or when no output exists."""
    outputs = (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1
    live = [tap for tap in range(kernel)
            if any(0 <= o * stride - padding + tap * dilation < size for o in range(max(outputs, 0)))]
    return (live[0], live[-1]) if live else (0, kernel - 1)


def cropped_conv(conv: nn.Module, spatial: tuple[int, ...]) -> nn.Module | None:
    """A convolution equal to ``conv`` (``nn.Conv1d/2d/3d``, zero padding) on inputs of spatial size
    ``spatial`` (e.g. (H, W)) whose kernel keeps only the taps that read input, with the padding reduced to
    match; None when every tap reads input somewhere, when the crop would not keep the output's size, or
    when ``conv`` is a subclass or has hooks (its forward may use the whole kernel: weight standardisation,
    dynamic 'same' padding, weight norm), which are left as they are.

    The new module's weights are copies (same device and dtype) and need no gradient."""
    if type(conv) not in CONVS or conv.padding_mode != "zeros" or isinstance(conv.padding, str):
        return None
    if conv._forward_pre_hooks or conv._forward_hooks:
        return None
    kernel, padding = list(conv.kernel_size), list(conv.padding)
    crop = []
    for axis, size in enumerate(spatial):
        lo, hi = live_taps(size, conv.kernel_size[axis], conv.stride[axis], conv.padding[axis], conv.dilation[axis])
        new_padding = conv.padding[axis] - lo * conv.dilation[axis]
        new_kernel = hi - lo + 1
        before = (size + 2 * conv.padding[axis] - conv.dilation[axis] * (conv.kernel_size[axis] - 1) - 1)
        after = (size + 2 * new_padding - conv.dilation[axis] * (new_kernel - 1) - 1)
        if new_padding < 0 or before // conv.stride[axis] != after // conv.stride[axis]:
            return None
        kernel[axis], padding[axis] = new_kernel, new_padding
        crop.append(slice(lo, hi + 1))
    if tuple(kernel) == tuple(conv.kernel_size):
        return None
    new = type(conv)(conv.in_channels, conv.out_channels, tuple(kernel), stride=conv.stride, padding=tuple(padding),
                     dilation=conv.dilation, groups=conv.groups, bias=conv.bias is not None,
                     device=conv.weight.device, dtype=conv.weight.dtype)
    with torch.no_grad():
        new.weight.copy_(conv.weight[(slice(None), slice(None), *crop)])
        if conv.bias is not None:
            new.bias.copy_(conv.bias)
    new.requires_grad_(False)
    return new.train(conv.training)


def crop_dead_taps(front: nn.Module, example: torch.Tensor) -> list[str]:
    """Replace, in place, every convolution of ``front`` (a private copy: ``fold.private_front``) that reads
    padding with some taps for the input ``example`` (1, ...) by its cropped equivalent (``cropped_conv``);
    returns the names of the replaced modules. A module called on inputs of different sizes is left alone.

    Afterwards ``front`` computes the same function, up to rounding, on inputs of ``example``'s shape
    (any batch size), and is only valid for those."""
    replaced = []
    for name, seen in input_shapes(front, example, lambda m: isinstance(m, CONVS)).items():
        shape, conv = next(iter(seen)), front.get_submodule(name)
        spatial = conv.weight.dim() - 2   # (N, C, *spatial) or unbatched (C, *spatial)
        new = cropped_conv(conv, shape[-spatial:]) if len(seen) == 1 and shape is not None else None
        if new is not None:
            parent, _, attr = name.rpartition(".")
            setattr(front.get_submodule(parent), attr, new)
            replaced.append(name)
    return replaced
