"""Batched activation extraction: eval mode, no gradients, on the model's device.

Activations come back on the CPU as float32 tensors of the layer's own shape: ``(N, C, H, W)`` for
CNN maps and ``(N, T, D)`` for transformer tokens. CKA flattens them with `flatten`
(``(N, C*H*W)`` and ``(N, T*D)``: every position and channel is a feature).
"""

from __future__ import annotations

from typing import Iterable, Iterator

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from ..utils.progress import Progress, progress_bar
from .data import BadData, iterate_batches, to_device
from .layer_calls import AmbiguousLayer, called_often
from .length_batches import by_length, in_data_order
from .model_state import as_model_input, frozen, model_device, model_dtype
from .split import SplitNetwork, pick_logits
from .wrapped import WrappedModel


def extract_activations(
    split_net: SplitNetwork,
    data: Dataset | DataLoader,
    *,
    batch_size: int = 256,
    device: torch.device | None = None,
    progress: Progress = "never",
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
    check_finite(acts, split_net.layer)
    return acts, torch.cat(labels)


class _Captured(Exception):
    """Raised by the last capture hook of a batch: every requested layer has produced its output."""


def extract_layers(model: nn.Module, names: list[str], data: Dataset | DataLoader, *, batch_size: int = 256,
                   device: torch.device | None = None, progress: Progress = "never",
                   desc: str = "activations") -> tuple[torch.Tensor, ...]:
    """Activations of ``model`` at every layer of ``names`` in one forward pass per batch, and the labels.

    Args:
        model: the network; forward hooks are added for the pass and removed afterwards (also on error).
        names: module names (``named_modules()``); each must run once per forward pass (``AmbiguousLayer`` for a
            shared module that runs more, counted on the first batch, which runs the whole model). A model
            with a ``layer_activation(output)`` method (a wrapped transformers model) gives each output through it
            (the block's hidden states, pooled per batch); others must output tensors. A model that reads text
            (with ``token_counts``) runs its texts batched by length (`length_batches.by_length`: at most
            ``batch_size * TOKENS_PER_SAMPLE`` (32) padded tokens a batch), and its rows come back in the data's order.
        data: a Dataset or DataLoader of ``(x, y)``.

    Returns:
        ``(A_1, ..., A_k, y)``: each ``A_i`` (N, ...) float32 on the CPU in the layer's own shape, equal bit for bit
            to `extract_activations` at that layer (the same modules run on the same inputs); ``y`` (N,) int64.
            The forward pass stops as soon as the last of the layers has produced its output. Raises ``ValueError``
            for NaN/Inf activations and ``TypeError`` for a layer whose output is not a tensor (naming the layer).
    """
    chunks: dict[str, list[torch.Tensor]] = {n: [] for n in names}
    labels = []
    batches, order = iterate_batches(data, batch_size), None
    if isinstance(model, WrappedModel):
        batches, order = by_length(model, batches, batch_size)
    batches = progress_bar(batches, progress=progress, desc=desc, leave=False)
    for outputs, y in forward_layers(model, names, batches, device=device):
        for n in names:
            chunks[n].append(outputs[n])
        labels.append(y)
    out = in_data_order([*(torch.cat(chunks[n]) for n in names), torch.cat(labels)], order)
    for n, acts in zip(names, out):
        check_finite(acts, n)
    return tuple(out)


def forward_layers(model: nn.Module, names: list[str], batches: Iterable[tuple[torch.Tensor, torch.Tensor]], *,
                   device: torch.device | None = None) -> Iterator[tuple[dict[str, torch.Tensor], torch.Tensor]]:
    """The one batched forward loop: for each ``(x, y)`` of ``batches``, ``({layer: A (B, ...)}, y)``.

    One forward pass per batch under ``no_grad`` and [`frozen`][frozen], stopped as soon as the last of
    ``names`` has produced its output; each ``A`` is float32 on the CPU in the layer's own shape. The hooks
    are removed and the model's flags restored when the loop ends or the caller stops early.
    """
    device, dtype = device or model_device(model), model_dtype(model)
    modules = dict(model.named_modules())
    batch: dict[str, torch.Tensor] = {}
    calls = dict.fromkeys(names, 0)
    first = [True]  # the first batch runs the whole model, counting every layer's calls
    read = model.layer_activation if isinstance(model, WrappedModel) else None

    def hook_for(name: str):
        def hook(_module: nn.Module, _inputs: object, output: object) -> None:
            calls[name] += 1
            if name in batch:
                return
            if read is not None:
                output = read(output)
            if not isinstance(output, torch.Tensor):
                raise TypeError(f"layer {name!r} outputs a {type(output).__name__}, not a tensor; choose a layer "
                                "whose output is a tensor")
            batch[name] = output.detach().to("cpu", torch.float32, copy=True)  # a later in-place op must not reach it
            if len(batch) == len(names) and not first[0]:
                raise _Captured
        return hook

    handles = [modules[n].register_forward_hook(hook_for(n)) for n in names]
    try:
        with torch.no_grad(), frozen(model):
            for x, y in batches:
                batch.clear()
                try:
                    model(as_model_input(to_device(x, device), dtype))
                except _Captured:
                    pass
                except Exception:  # a failure after every layer was captured (a head that does not fit) is not ours
                    if not first[0] or len(batch) < len(names):
                        raise
                missing = [n for n in names if n not in batch]
                if missing:
                    raise RuntimeError(f"layer(s) {', '.join(map(repr, missing))} never ran in the forward pass of "
                                       f"{type(model).__name__}")
                if first[0]:
                    _check_called_once(model, calls)
                    first[0] = False
                yield dict(batch), y
    finally:
        for handle in handles:
            handle.remove()


def _check_called_once(model: nn.Module, calls: dict[str, int]) -> None:
    """`AmbiguousLayer` for the first layer that ran more than once in one forward pass (as ``compare`` refuses it)."""
    from .layer_lists import layers

    for name, count in calls.items():
        if count > 1:
            raise AmbiguousLayer(called_often(model, name, count, [n for n in layers(model) if calls.get(n, 1) <= 1]))


def check_finite(acts: torch.Tensor, layer: str) -> None:
    if torch.isfinite(acts.sum()) or torch.isfinite(acts).all():  # a finite sum has no NaN/Inf terms (one pass)
        return
    bad = (~torch.isfinite(acts.flatten(1))).any(1).nonzero().flatten()
    raise ValueError(
        f"activations at layer {layer!r} contain NaN or Inf for {len(bad)} of {len(acts)} samples "
        f"(first: {bad[:5].tolist()}); check the model's weights and inputs"
    )


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
            out = pick_logits(model(as_model_input(to_device(x, device), model_dtype(model))))
            if not isinstance(out, torch.Tensor):
                raise TypeError(f"{type(model).__name__} returns a {type(out).__name__}; the package reads the logits "
                                "from a tensor, a tuple or list (its first item) or a dict (its 'logits' entry): "
                                "wrap the model so that forward returns the logits")
            outs.append(out.detach().float().cpu())
            labels.append(y)
    logits, labels = torch.cat(outs), torch.cat(labels)
    if labels.numel() and logits.ndim == 2 and int(labels.max()) >= logits.shape[1]:
        raise BadData(f"the data split has label {int(labels.max())} but the model has {logits.shape[1]} outputs "
                      f"(classes 0 .. {logits.shape[1] - 1}); check the labels and the model's head")
    return logits, labels
