"""The cut points of a transformers model: its embedding output and every block's output, in forward order.

The blocks are the longest ``nn.ModuleList`` of modules of one class (``h``, ``model.layers``,
``encoder.layer``, ``encoder.block``). The embedding output is the last module to finish before the first block
starts whose output is that block's input (``drop`` of GPT-2, ``embed_tokens`` of Llama, ``embeddings`` of BERT
and ViT, ``pre_layrnorm`` of CLIP's vision tower, ``encoder.embed_tokens`` of a T5 encoder): the tensor ``hidden_states[0]``
holds. Both are found with one forward pass on a one-sample dummy input, under ``no_grad`` and in eval mode (the
model's flags restored), which also counts how often each module runs: a module that runs more than once per
forward pass (a shared dropout) is never listed.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..networks.model_state import frozen


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
    """``[embedding output, block 0, ..., block L-1]`` of an `HFModel` (module names of ``named_modules()``).

    Only modules that run exactly once per forward pass are listed (a module that runs twice, such as T5's
    ``dropout`` after the embedding and again after the final norm, has no one activation); the embedding output
    is left out when no module computes it (OPT adds its position embedding outside any module).

    Raises:
        ValueError: the model has no list of blocks, or none of its blocks runs exactly once (a model that
            shares one block across depth, such as ALBERT).
    """
    name, blocks = find_blocks(wrapped)
    calls, embedding = _one_forward(wrapped, blocks[0])
    names = [f"{name}.{i}" if name else str(i) for i, block in enumerate(blocks) if calls.get(id(block)) == 1]
    if not names:
        raise ValueError(f"the blocks of {type(wrapped.hf_model).__name__} ({name}) do not each run once per "
                         "forward pass (one block shared across depth?); name the layers yourself: any module of "
                         "named_modules() that runs once")
    return ([embedding] if embedding else []) + names


def _one_forward(wrapped: Any, first: nn.Module) -> tuple[dict[int, int], str | None]:
    """One forward pass on a dummy input: how often each module ran (by ``id``) and the embedding output: the
    last module that ran once, finished before ``first`` started, and output exactly ``first``'s input."""
    calls: dict[int, int] = {}
    finished: list[tuple[str, nn.Module, Any]] = []
    started: list[Any] = []

    def pre(_module: nn.Module, args: tuple, kwargs: dict) -> None:
        if not started:
            started.append(args[0] if args else kwargs.get("hidden_states"))

    def post_for(name: str):
        def post(module: nn.Module, _inputs: object, output: object) -> None:
            calls[id(module)] = calls.get(id(module), 0) + 1
            if not started:
                finished.append((name, module, output))
        return post

    handles = [first.register_forward_pre_hook(pre, with_kwargs=True)]
    handles += [m.register_forward_hook(post_for(n)) for n, m in wrapped.named_modules() if n]
    try:
        with torch.no_grad(), frozen(wrapped):
            wrapped.hf_model(**_dummy_inputs(wrapped))
    finally:
        for handle in handles:
            handle.remove()
    target = started[0] if started else None
    for name, module, output in reversed(finished):
        if (isinstance(target, torch.Tensor) and calls[id(module)] == 1 and isinstance(output, torch.Tensor)
                and output.shape == target.shape and torch.equal(output, target)):
            return calls, name
    return calls, None


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
