"""Batched activation extraction: eval mode, no gradients, on the model's device.

Activations come back on the CPU as float32 tensors of the layer's own shape: ``(N, C, H, W)`` for
CNN maps and ``(N, T, D)`` for transformer tokens. CKA flattens them with `flatten`
(``(N, C*H*W)`` and ``(N, T*D)``: every position and channel is a feature).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from ..utils.progress import progress_bar
from .data import BadData, iterate_batches
from .networks import SplitNetwork, frozen, model_device


def extract_activations(
    split_net: SplitNetwork,
    data: Dataset | DataLoader,
    *,
    batch_size: int = 256,
    device: torch.device | None = None,
    progress: bool = False,
    desc: str = "activations",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Activations at the cut of ``split_net`` for every sample of ``data``, and the labels.

    Returns ``(A, y)``: A (N, ...) float32 on the CPU, y (N,) int64. Runs only the front, under
    ``no_grad`` and [`frozen`][frozen] (eval mode, flags restored). Raises ``ValueError`` if the
    activations contain NaN or Inf (naming the layer).
    """
    device = device or model_device(split_net.model)
    chunks, labels = [], []
    batches = iterate_batches(data, batch_size)
    with torch.no_grad(), frozen(split_net.model):
        for x, y in progress_bar(batches, progress=progress, desc=desc, leave=False):
            a = split_net.front(x.to(device, non_blocking=True))
            chunks.append(a.detach().to("cpu", torch.float32))
            labels.append(y)
    acts = torch.cat(chunks)
    if not torch.isfinite(acts).all():
        bad = (~torch.isfinite(acts.flatten(1))).any(1).nonzero().flatten()
        raise ValueError(
            f"activations at layer {split_net.layer!r} contain NaN or Inf for {len(bad)} of {len(acts)} samples "
            f"(first: {bad[:5].tolist()}); check the model's weights and inputs"
        )
    return acts, torch.cat(labels)


def flatten(acts: torch.Tensor) -> torch.Tensor:
    """(N, ...) -> (N, prod(...)): CNN maps to (N, C*H*W), tokens to (N, T*D)."""
    return acts.reshape(len(acts), -1)


def model_outputs(model: nn.Module, data: Dataset | DataLoader, *, batch_size: int = 256,
                  device: torch.device | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits (N, classes) float32 on the CPU and labels (N,) of ``model`` on every sample of ``data``."""
    device = device or model_device(model)
    outs, labels = [], []
    with torch.no_grad(), frozen(model):
        for x, y in iterate_batches(data, batch_size):
            outs.append(model(x.to(device)).detach().float().cpu())
            labels.append(y)
    logits, labels = torch.cat(outs), torch.cat(labels)
    if labels.numel() and logits.ndim == 2 and int(labels.max()) >= logits.shape[1]:
        raise BadData(f"the data split has label {int(labels.max())} but the model has {logits.shape[1]} outputs "
                      f"(classes 0 .. {logits.shape[1] - 1}); check the labels and the model's head")
    return logits, labels
