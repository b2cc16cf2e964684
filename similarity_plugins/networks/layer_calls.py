"""Reading a layer's output with a forward hook (for models that torch.fx cannot trace), and counting its calls.

A layer that runs more than once in one forward pass has no single activation: `AmbiguousLayer`.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class AmbiguousLayer(ValueError):
    """A layer (module) that runs more than once in one forward pass: which of its outputs is meant is ambiguous."""


def called_often(model: nn.Module, layer: str, calls: int, others: list[str]) -> str:
    """The message of `AmbiguousLayer`: ``layer`` runs ``calls`` times; ``others`` are layers to offer."""
    return (f"layer {layer!r} of {type(model).__name__} is called {calls} times in one forward pass (a shared module), "
            f"so its activation is ambiguous; cut at a module that runs once, such as: {', '.join(others)}")


def count_calls(model: nn.Module, layer: str, x: torch.Tensor) -> int:
    """How many times ``layer`` runs in ``model(x[:1])`` (one whole forward pass, under no_grad)."""
    count = [0]

    def hook(_module: nn.Module, _inputs: object, _output: object) -> None:
        count[0] += 1

    handle = dict(model.named_modules())[layer].register_forward_hook(hook)
    try:
        with torch.no_grad():
            model(x[:1])
    finally:
        handle.remove()
    return count[0]


class _Stop(Exception):
    def __init__(self, value: object) -> None:
        self.value = value


def front_by_hook(model: nn.Module, layer: str, x: Any, *, keywords: bool = False) -> object:
    """Run ``model(x)`` (``model(**x)`` with ``keywords``: a dict of keyword arguments) until ``layer`` has
    produced its output, then stop and return it."""

    def hook(_module: nn.Module, _inputs: object, output: object) -> None:
        raise _Stop(output)

    handle = dict(model.named_modules())[layer].register_forward_hook(hook)
    try:
        model(**x) if keywords else model(x)
    except _Stop as stop:
        return stop.value
    finally:
        handle.remove()
    raise RuntimeError(f"layer {layer!r} was never called in the forward pass of {type(model).__name__}")
