"""A model's state around the library's calls: its flags kept (`preserved`), eval mode without gradients
(`frozen`), its dtype and device, inputs converted to its dtype, and a copy on another device that leaves the
user's model where it is (`on_device`)."""

from __future__ import annotations

import contextlib
import copy
from typing import Any, Iterator

import torch
from torch import nn


@contextlib.contextmanager
def preserved(*models: nn.Module) -> Iterator[None]:
    """Restore every module's ``training`` flag and every parameter's ``requires_grad`` on exit.

    Changes nothing on entry; whatever the body does to the flags is undone (also on error).
    """
    saved_training = [(m, m.training) for model in models for m in model.modules()]
    saved_grad = [(p, p.requires_grad) for model in models for p in model.parameters()]
    try:
        yield
    finally:
        for m, flag in saved_training:
            m.training = flag
        for p, flag in saved_grad:
            p.requires_grad_(flag)


@contextlib.contextmanager
def frozen(*models: nn.Module) -> Iterator[None]:
    """Run models in eval mode with no parameter gradients, restoring every flag afterwards.

    Snapshots each module's ``training`` flag and each parameter's ``requires_grad``, sets
    ``eval()`` and ``requires_grad_(False)``, and restores exactly the snapshot on exit (also on
    error). BatchNorm statistics are untouched because eval mode never updates them. Nesting is safe.
    """
    with preserved(*models):
        for model in models:
            model.eval()
            for p in model.parameters():
                p.requires_grad_(False)
        yield


def model_dtype(model: nn.Module) -> torch.dtype | None:
    """The dtype of a model's first floating-point parameter or buffer (None for a model without any)."""
    for t in (*model.parameters(), *model.buffers()):
        if t.is_floating_point():
            return t.dtype
    return None


def as_model_input(x: Any, dtype: torch.dtype | None) -> Any:
    """A floating-point input in the model's dtype (float32 data into a float64, float16 or bfloat16 model);
    integer inputs (token ids), inputs already in that dtype and text are passed as they are; a dict of views
    (paired data) has each view converted. Differentiable."""
    if isinstance(x, dict):
        return {name: as_model_input(view, dtype) for name, view in x.items()}
    if dtype is None or not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.dtype == dtype:
        return x
    return x.to(dtype)


def model_device(model: nn.Module) -> torch.device:
    """The device of a model's first parameter or buffer (CPU for a model without any)."""
    for t in model.parameters():
        return t.device
    for t in model.buffers():
        return t.device
    return torch.device("cpu")


def on_device(model: nn.Module, device: torch.device | None, role: str) -> nn.Module:
    """The model itself when it is on ``device``; otherwise a copy moved there (the user's is never moved).
    ``ValueError`` naming ``role`` for a model whose tensors are inference tensors."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"{role} must be a torch.nn.Module, got {type(model).__name__}")
    made_in_inference = [name for name, t in (*model.named_parameters(), *model.named_buffers()) if t.is_inference()]
    if made_in_inference:
        raise ValueError(f"{role} ({type(model).__name__}) holds inference tensors ({made_in_inference[0]}, and "
                         f"{len(made_in_inference) - 1} more): it was built or loaded inside torch.inference_mode(), "
                         "and torch allows no flag changes or gradients through them outside it; build or load the "
                         "model outside inference mode (calling compare inside inference mode is fine)")
    if device is None or model_device(model) == device:
        return model
    return copy.deepcopy(model).to(device)
