"""The input shapes some modules of a front see, from one forward pass: what the size-specific rewrites of
the private front copy (``crop.py``, ``pooled_linear.py``) are made for."""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn


def input_shapes(front: nn.Module, example: torch.Tensor,
                 wanted: Callable[[nn.Module], bool]) -> dict[str, set[tuple[int, ...] | None]]:
    """Run ``front(example)`` once without gradients and return, for every submodule for which ``wanted``
    is true and that ran, the set of shapes of its input tensor (positional or the keyword ``input``; None
    when it was not a tensor), one entry per distinct shape, keyed by the module's name."""
    shapes: dict[str, set[tuple[int, ...] | None]] = {}

    def record(args: tuple, kwargs: dict, name: str) -> None:
        x = args[0] if args else kwargs.get("input")
        shapes.setdefault(name, set()).add(tuple(x.shape) if isinstance(x, torch.Tensor) else None)

    hooks = [module.register_forward_pre_hook(lambda m, a, k, name=name: record(a, k, name), with_kwargs=True)
             for name, module in front.named_modules() if wanted(module)]
    try:
        with torch.no_grad():
            front(example)
    finally:
        for hook in hooks:
            hook.remove()
    return shapes
