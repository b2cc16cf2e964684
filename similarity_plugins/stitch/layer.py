"""The stitch layer ``T_theta``: an affine map from A's activation space at the cut to B's.

Activations have one of three *layouts* (per-sample shapes):

- ``map``: ``(C, H, W)`` CNN feature maps, ``H*W`` positions of ``C`` features;
- ``tokens``: ``(T, D)`` transformer residual stream (CLS token included), ``T`` positions of ``D``;
- ``vector``: ``(D,)`` one position of ``D`` features (e.g. after flatten).

The stitch maps every position's feature vector with the same affine map (C_A -> C_B): a 1x1
convolution with bias for map -> map, a token-wise ``nn.Linear`` otherwise. Optional BatchNorm
over A's features comes before it. Between two maps of different spatial sizes, A's map is first
resized to B's with bilinear interpolation (``align_corners=False``); the plan records it. Any
other pairing needs the same number of positions on both sides (a ``(C, H, W)`` map pairs with
``(H*W, D)`` tokens in row-major order); otherwise [`plan_stitch`][plan_stitch] raises
[`StitchShapeError`][StitchShapeError] saying why.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


class StitchShapeError(ValueError):
    """The activations at the two cuts cannot be stitched (layouts or position counts differ)."""


def layout_of(shape: tuple[int, ...]) -> str:
    """``"map"`` for (C, H, W), ``"tokens"`` for (T, D), ``"vector"`` for (D,) per-sample shapes."""
    layout = {3: "map", 2: "tokens", 1: "vector"}.get(len(shape))
    if layout is None:
        raise StitchShapeError(
            f"cannot stitch activations of per-sample shape {tuple(shape)}: expected (C, H, W) maps, "
            "(T, D) tokens or (D,) vectors; choose another layer"
        )
    return layout


def _positions(shape: tuple[int, ...]) -> int:
    if len(shape) == 3:
        return shape[1] * shape[2]
    return shape[0] if len(shape) == 2 else 1


def _features(shape: tuple[int, ...]) -> int:
    return shape[0] if len(shape) in (1, 3) else shape[1]


@dataclass(frozen=True)
class StitchPlan:
    """How to stitch: per-sample shapes of A's activation (``front_shape``) and B's (``end_shape``),
    their layouts, feature counts (``in_features`` C_A, ``out_features`` C_B), positions per sample,
    and ``resize`` (B's (H, W) when A's map is resized to it, else ``None``)."""

    front_shape: tuple[int, ...]
    end_shape: tuple[int, ...]
    front_layout: str
    end_layout: str
    in_features: int
    out_features: int
    positions: int
    resize: tuple[int, int] | None

    @property
    def conv(self) -> bool:
        """True when the stitch is a 1x1 convolution (map -> map)."""
        return self.front_layout == "map" and self.end_layout == "map"

    def describe(self) -> str:
        """One line, e.g. ``"map (64, 8, 8) -> map (128, 4, 4), bilinear resize 8x8 -> 4x4, 1x1 conv"``."""
        text = f"{self.front_layout} {self.front_shape} -> {self.end_layout} {self.end_shape}"
        if self.resize:
            text += f", bilinear resize {self.front_shape[1]}x{self.front_shape[2]} -> {self.resize[0]}x{self.resize[1]}"
        return text + (", 1x1 conv" if self.conv else ", position-wise linear")


def plan_stitch(front_shape: tuple[int, ...], end_shape: tuple[int, ...]) -> StitchPlan:
    """Decide how to stitch per-sample shapes ``front_shape`` (A at cut i) to ``end_shape`` (B at cut j).

    Raises [`StitchShapeError`][StitchShapeError] (a ``ValueError``) when the positions cannot be matched, e.g.
    a token count mismatch or a CNN map against a ViT's tokens with a class token.
    """
    front_shape, end_shape = tuple(int(s) for s in front_shape), tuple(int(s) for s in end_shape)
    fl, el = layout_of(front_shape), layout_of(end_shape)
    resize = None
    if fl == "map" and el == "map":
        if front_shape[1:] != end_shape[1:]:
            resize = (end_shape[1], end_shape[2])
        positions = end_shape[1] * end_shape[2]
    else:
        pa, pb = _positions(front_shape), _positions(end_shape)
        if pa != pb:
            raise StitchShapeError(_mismatch_message(front_shape, end_shape, fl, el, pa, pb))
        positions = pa
    return StitchPlan(front_shape, end_shape, fl, el, _features(front_shape), _features(end_shape), positions, resize)


def _mismatch_message(fs: tuple, es: tuple, fl: str, el: str, pa: int, pb: int) -> str:
    what = {"map": "spatial positions", "tokens": "tokens", "vector": "position"}
    base = (f"cannot stitch front activations {fl} {fs} ({pa} {what[fl]}) to end activations {el} {es} "
            f"({pb} {what[el]}): a position-wise stitch needs the same number of positions on both sides")
    if fl == el == "tokens":
        return (f"token count mismatch: the front has {pa} tokens per sample, the end expects {pb}; "
                "token-wise stitching needs equal counts (use the same image size and patch size, and the "
                "same class/register tokens, in both models)")
    if {fl, el} == {"map", "tokens"}:
        tokens = pa if fl == "tokens" else pb
        spatial = pb if fl == "tokens" else pa
        if tokens > spatial and tokens - spatial <= 8:
            base += (f"; the {tokens - spatial} extra token(s) look like class/register tokens, which have "
                     "no position in a CNN map")
        return base + "; choose layers whose CNN map has H*W equal to the transformer's token count"
    return base + "; choose another layer pair"


def to_rows(a: torch.Tensor, layout: str) -> torch.Tensor:
    """Activations (N, ...) -> (N, P, C): one row of features per position.

    map (N, C, H, W) -> (N, H*W, C) row-major; tokens (N, T, D) unchanged; vector (N, D) -> (N, 1, D).
    """
    if layout == "map":
        return a.flatten(2).transpose(1, 2)
    if layout == "tokens":
        return a
    return a.unsqueeze(1)


def _from_rows(rows: torch.Tensor, layout: str, shape: tuple[int, ...]) -> torch.Tensor:
    if layout == "map":
        return rows.transpose(1, 2).reshape(len(rows), *shape)
    if layout == "tokens":
        return rows
    return rows.squeeze(1)


class StitchLayer(nn.Module):
    """``T_theta``: [bilinear resize] -> [BatchNorm over A's features] -> affine map C_A -> C_B.

    ``forward(a)``: ``a`` is A's activation batch, (N, *plan.front_shape); returns (N, *plan.end_shape)
    in B's activation space at the end cut. ``self.affine`` is ``nn.Conv2d(C_A, C_B, 1)`` for
    map -> map, else ``nn.Linear(C_A, C_B)`` applied to every position; ``self.bn`` is
    ``nn.BatchNorm2d``/``nn.BatchNorm1d`` over A's features or ``None``.
    """

    def __init__(self, plan: StitchPlan, bn: bool = False) -> None:
        super().__init__()
        self.plan = plan
        c_in, c_out = plan.in_features, plan.out_features
        if plan.conv:
            self.bn = nn.BatchNorm2d(c_in) if bn else None
            self.affine: nn.Module = nn.Conv2d(c_in, c_out, kernel_size=1, bias=True)
        else:
            self.bn = nn.BatchNorm1d(c_in) if bn else None
            self.affine = nn.Linear(c_in, c_out, bias=True)

    @property
    def weight_matrix(self) -> torch.Tensor:
        """The affine map's weight as a (C_B, C_A) matrix (a view)."""
        w = self.affine.weight
        return w.view(w.shape[0], w.shape[1])

    def prepare(self, a: torch.Tensor) -> torch.Tensor:
        """The input stage without BatchNorm: A's batch (N, *front_shape) resized if planned, as rows
        (N, P, C_A) where P is B's number of positions."""
        if self.plan.resize is not None:
            a = F.interpolate(a, size=self.plan.resize, mode="bilinear", align_corners=False)
        return to_rows(a, self.plan.front_layout)

    def forward(self, a: torch.Tensor) -> torch.Tensor:
        """(N, *front_shape) -> (N, *end_shape); see the class docstring."""
        plan = self.plan
        if plan.conv:
            if plan.resize is not None:
                a = F.interpolate(a, size=plan.resize, mode="bilinear", align_corners=False)
            if self.bn is not None:
                a = self.bn(a)
            return self.affine(a)
        rows = self.prepare(a)
        if self.bn is not None:
            n, p, c = rows.shape
            rows = self.bn(rows.reshape(n * p, c)).reshape(n, p, c)
        return _from_rows(self.affine(rows), plan.end_layout, plan.end_shape)

    @torch.no_grad()
    def set_affine(self, weight: torch.Tensor, bias: torch.Tensor) -> None:
        """Set the affine map from a (C_B, C_A) ``weight`` and a (C_B,) ``bias`` (any float dtype)."""
        self.affine.weight.copy_(weight.reshape(self.affine.weight.shape).to(self.affine.weight))
        self.affine.bias.copy_(bias.to(self.affine.bias))

    @torch.no_grad()
    def set_bn_statistics(self, mean: torch.Tensor, var: torch.Tensor) -> None:
        """Set BatchNorm running ``mean`` and ``var`` (C_A,) and reset its affine to identity (no-op without BN)."""
        if self.bn is None:
            return
        self.bn.running_mean.copy_(mean.to(self.bn.running_mean))
        self.bn.running_var.copy_(var.to(self.bn.running_var))
        self.bn.weight.fill_(1.0)
        self.bn.bias.zero_()

    def extra_repr(self) -> str:
        return self.plan.describe()


def fan_in_bound(in_features: int) -> float:
    """PyTorch's default uniform bound ``1/sqrt(fan_in)`` for a linear layer's weight and bias."""
    return 1.0 / math.sqrt(max(1, in_features))
