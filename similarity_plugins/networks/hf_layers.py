"""The cut points of a transformers model: its embedding output and every block's output, in forward order.

The blocks are the longest ``nn.ModuleList`` of modules of one class (``h``, ``model.layers``,
``encoder.layer``). The embedding output is the last module to finish before the first block starts whose
output is that block's input (``drop`` of GPT-2, ``embed_tokens`` of Llama, ``embeddings`` of BERT and ViT,
``pre_layrnorm`` of CLIP's vision tower): the tensor ``hidden_states[0]`` holds. It is found with one forward
pass on a one-sample dummy input, under ``no_grad`` and in eval mode (the model's flags restored).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from .model_state import frozen


def find_blocks(model: nn.Module) -> tuple[str, nn.ModuleList]:
    """The qualified name and the list of the model's blocks (the longest ModuleList of one module class)."""
    best: tuple[str, nn.ModuleList] | None = None
    for name, module in model.named_modules():
        if isinstance(module, nn.ModuleList) and len(module) and len({type(m) for m in module}) == 1:
            if best is None or len(module) > len(best[1]):
                best = (name, module)
    if best is None:
        raise ValueError(f"{type(model).__name__} has no list of blocks (an nn.ModuleList of one module class); "
                         "name its layers yourself (any named_modules() name)")
    return best


def block_layers(wrapped: Any) -> list[str]:
    """``[embedding output, block 0, ..., block L-1]`` of an `HFModel` (module names of ``named_modules()``)."""
    name, blocks = find_blocks(wrapped)
    names = [f"{name}.{i}" if name else str(i) for i in range(len(blocks))]
    embedding = _embedding_output(wrapped, blocks[0])
    return ([embedding] if embedding else []) + names


def _embedding_output(wrapped: Any, first: nn.Module) -> str | None:
    finished: list[tuple[str, Any]] = []
    started: list[torch.Tensor] = []

    class _Stop(Exception):
        pass

    def pre(_module: nn.Module, args: tuple, kwargs: dict) -> None:
        hidden = args[0] if args else kwargs.get("hidden_states")
        started.append(hidden)
        raise _Stop

    def post_for(name: str):
        def post(_module: nn.Module, _inputs: object, output: object) -> None:
            if not started:
                finished.append((name, output))
        return post

    handles = [first.register_forward_pre_hook(pre, with_kwargs=True)]
    handles += [m.register_forward_hook(post_for(n)) for n, m in wrapped.named_modules() if n]
    try:
        with torch.no_grad(), frozen(wrapped):
            try:
                wrapped.hf_model(**_dummy_inputs(wrapped))
            except _Stop:
                pass
    finally:
        for handle in handles:
            handle.remove()
    if not started or not isinstance(started[0], torch.Tensor):
        return None
    target = started[0]
    for name, output in reversed(finished):
        if isinstance(output, torch.Tensor) and output.shape == target.shape and torch.equal(output, target):
            return name
    return None


def _dummy_inputs(wrapped: Any) -> dict[str, torch.Tensor]:
    device = next(wrapped.parameters()).device
    config = wrapped.hf_model.config
    if wrapped.reads_text:
        ids = torch.ones(1, 4, dtype=torch.long, device=device)
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    size = getattr(config, "image_size", 224)
    size = tuple(size) if isinstance(size, (tuple, list)) else (size, size)
    dtype = next(wrapped.parameters()).dtype
    return {"pixel_values": torch.zeros(1, getattr(config, "num_channels", 3), *size, device=device, dtype=dtype)}
