"""Tracing the front pass, and the "fake ReLU": a straight-through gradient at the last ReLU before the cut.

At a deep layer, many units of the target activation sit in a ReLU's dead zone for the current iterate,
so their error has no gradient and plain Adam stalls around 5-10% relative error. The fake ReLU keeps the
forward value exact (``relu(pre)``) but passes the gradient straight through to ``pre``, as if the ReLU were
the identity: a unit that should be active but is not gets pushed up. Only the last ReLU call before
the cut is changed, so the loss (and hence ``rel_error``) is always the true one.

A ReLU module can run several times per forward (torchvision's ResNet blocks reuse ``self.relu``), so the
target is a (module name, call number) pair found by tracing one front pass. In-place ReLUs overwrite their
input, so the pre-activation is cloned in a forward pre-hook. A MaxPool after the ReLU is fine: the forward
value is exact, and the pool routes the gradient to one element of the window, which the straight-through
gradient then moves.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator

import torch
from torch import nn


@dataclass
class FrontTrace:
    """What one front pass ran: module names entered (in order) and ReLU calls as (name, call number)."""

    modules: list[str] = field(default_factory=list)
    relu_calls: list[tuple[str, int]] = field(default_factory=list)

    @property
    def last_relu(self) -> tuple[str, int] | None:
        """The last ReLU call before the cut, or None when the front has no ``nn.ReLU`` module."""
        return self.relu_calls[-1] if self.relu_calls else None


def trace_front(model: nn.Module, front: Callable[[torch.Tensor], torch.Tensor], example: torch.Tensor) -> FrontTrace:
    """Run ``front(example)`` once (no grad) recording which modules ran and every ReLU call."""
    trace = FrontTrace()
    counts: dict[str, int] = {}
    handles = []
    for name, module in model.named_modules():
        def pre(_m: nn.Module, _inputs: object, name: str = name) -> None:
            trace.modules.append(name)

        handles.append(module.register_forward_pre_hook(pre))
        if isinstance(module, nn.ReLU):
            def post(_m: nn.Module, _inputs: object, _out: object, name: str = name) -> None:
                counts[name] = counts.get(name, 0) + 1
                trace.relu_calls.append((name, counts[name]))

            handles.append(module.register_forward_hook(post, prepend=True))
    try:
        with torch.no_grad():
            front(example)
    finally:
        for h in handles:
            h.remove()
    return trace


def front_tensors(model: nn.Module, trace: FrontTrace) -> list[tuple[str, torch.Tensor]]:
    """(name, tensor) for every parameter and buffer the front can read: the root's own, and those of
    every module that ran in the traced front pass. Used for the cache key."""
    ran = set(trace.modules) | {""}
    out = []
    for mname, module in model.named_modules():
        if mname not in ran:
            continue
        prefix = mname + "." if mname else ""
        for pname, p in module.named_parameters(recurse=False):
            out.append((prefix + pname, p))
        for bname, b in module.named_buffers(recurse=False):
            out.append((prefix + bname, b))
    return out


@contextlib.contextmanager
def straight_through_relu(model: nn.Module, targets: Iterable[tuple[str, int]] | tuple[str, int] | None
                          ) -> Iterator[Callable[[], None]]:
    """Make the given ReLU calls pass gradients straight through (forward values unchanged).

    ``targets``: (module name, call number) pairs (call numbers start at 1), a single pair, or None
    (nothing changes). Yields ``reset()``, which must be called before every forward pass (it restarts
    the call counts). The hooks are removed on exit, leaving the model as it was.
    """
    if targets is None:
        yield lambda: None
        return
    if isinstance(targets, tuple) and len(targets) == 2 and isinstance(targets[0], str):
        targets = [targets]
    calls: dict[str, set[int]] = {}
    for name, call in targets:
        calls.setdefault(name, set()).add(int(call))
    modules = dict(model.named_modules())
    counts: dict[str, int] = {}
    saved: dict[str, torch.Tensor | None] = {}

    def reset() -> None:
        counts.clear()
        saved.clear()

    handles = []
    for name, wanted in calls.items():
        module = modules[name]
        inplace = bool(getattr(module, "inplace", False))

        def pre_hook(_m: nn.Module, inputs: tuple, name: str = name, wanted: set = wanted,
                     inplace: bool = inplace) -> None:
            counts[name] = counts.get(name, 0) + 1
            if inplace and counts[name] in wanted and torch.is_grad_enabled():
                saved[name] = inputs[0].clone()

        def post_hook(_m: nn.Module, inputs: tuple, output: torch.Tensor, name: str = name, wanted: set = wanted,
                      inplace: bool = inplace) -> torch.Tensor | None:
            if counts.get(name) not in wanted or not torch.is_grad_enabled():
                return None
            pre = saved.pop(name, None) if inplace else inputs[0]
            if not isinstance(pre, torch.Tensor) or not pre.requires_grad:
                return None
            # Forward value: exactly the ReLU's output (x + (relu(x) - x) is exact for relu); gradient: identity.
            return pre + (output - pre).detach()

        handles.append(module.register_forward_pre_hook(pre_hook, prepend=True))
        handles.append(module.register_forward_hook(post_hook, prepend=True))
    try:
        yield reset
    finally:
        for h in handles:
            h.remove()
