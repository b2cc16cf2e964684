"""What a module computes besides its tensors: its class and its non-tensor configuration, as text for hashes.

Every cache key and digest of a model goes through `module_config` (with the tensor bytes hashed by
`update_tensor_digest`), so two modules with the same weights but a
different BatchNorm ``eps``, conv ``dilation``/``padding`` or pool ``padding``/``ceil_mode`` never share a key.
"""

from __future__ import annotations

import hashlib
from typing import Any, Iterable

import torch
from torch import nn

__all__ = ["module_config", "module_settings", "update_module_configs"]

_PLAIN = (bool, int, float, str, type(None), torch.dtype, torch.device, torch.Size)
_HOOKS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")


def _plain(value: Any) -> bool:
    if isinstance(value, _PLAIN):
        return True
    return isinstance(value, (tuple, list)) and all(_plain(v) for v in value)


def module_settings(module: nn.Module) -> dict[str, Any]:
    """The plain public attributes of ``module`` (``stride``, ``padding``, ``dilation``, ``eps``, ``momentum``,
    ``ceil_mode``, ``inplace``, ...; lists as tuples), without ``training``: what enters ``forward`` besides
    tensors and submodules for torch's layers and for most user modules."""
    out = {}
    for key, value in vars(module).items():
        if key.startswith("_") or key == "training" or not _plain(value):
            continue
        out[key] = tuple(value) if isinstance(value, list) else value
    return out


def _name(obj: Any) -> str:
    kind = obj if isinstance(obj, type) else type(obj)
    if callable(obj) and not isinstance(obj, (type, nn.Module)) and hasattr(obj, "__qualname__"):
        return f"{getattr(obj, '__module__', '')}.{obj.__qualname__}"
    return f"{kind.__module__}.{kind.__qualname__}"


def module_config(module: nn.Module) -> str:
    """One line describing what ``module`` itself computes besides its tensors: its class, ``extra_repr()``,
    its plain settings (`module_settings`), the functions it holds as attributes (activations), its hooks
    and, for a ``torch.fx.GraphModule``, its generated code. Submodules are not included (name each one)."""
    settings = sorted((k, repr(v)) for k, v in module_settings(module).items())
    functions = sorted((k, _name(v)) for k, v in vars(module).items()
                       if not k.startswith("_") and callable(v) and not isinstance(v, (nn.Module, torch.Tensor)))
    hooks = [(h, [_name(f) for f in getattr(module, h, {}).values()]) for h in _HOOKS if getattr(module, h, None)]
    code = module.code if isinstance(module, torch.fx.GraphModule) else ""
    return repr((_name(module), module.extra_repr(), settings, functions, hooks, code))


def update_module_configs(h: hashlib._Hash, named_modules: Iterable[tuple[str, nn.Module]]) -> None:
    """Feed ``(name, module_config(module))`` of every given module, in the given order, into hash ``h``."""
    for name, module in named_modules:
        h.update(f"module|{name}|{module_config(module)}|".encode())
