"""What a module computes besides its tensors: its class and its non-tensor configuration, as text for hashes.

Every cache key and digest of a model goes through `module_config` (with the tensor bytes of
`fingerprinted_tensors` hashed by `update_tensor_digest`), so two modules with the same weights but a
different BatchNorm ``eps``, conv ``dilation``/``padding`` or pool ``padding``/``ceil_mode`` never share a key.
What transformers adds to a model during its own forward (`hf_runtime`: its output-capturing hooks, the caches
of a dynamic rotary embedding) is left out, so a model's digest is the same before and after it first ran.
"""

from __future__ import annotations

import hashlib
from typing import Any, Iterable

import torch
from torch import nn

from .hf_runtime import forward_cache, is_capture_hook

_PLAIN = (bool, int, float, str, type(None), torch.dtype, torch.device, torch.Size)
_HOOKS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")


def _plain(value: Any) -> bool:
    if isinstance(value, _PLAIN):
        return True
    return isinstance(value, (tuple, list)) and all(_plain(v) for v in value)


def module_settings(module: nn.Module) -> dict[str, Any]:
    """The plain public attributes of ``module`` (``stride``, ``padding``, ``dilation``, ``eps``, ``momentum``,
    ``ceil_mode``, ``inplace``, ...; lists as tuples), without ``training`` and the caches that transformers'
    forward rewrites (`hf_runtime.forward_cache`): what enters ``forward`` besides tensors and submodules for
    torch's layers and for most user modules."""
    out = {}
    cached = forward_cache(module)[1]
    for key, value in vars(module).items():
        if key.startswith("_") or key == "training" or key in cached or not _plain(value):
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
    (but not transformers' output-capturing hooks, which record and change nothing) and, for a
    ``torch.fx.GraphModule``, its generated code. Submodules are not included (name each one)."""
    settings = sorted((k, repr(v)) for k, v in module_settings(module).items())
    functions = sorted((k, _name(v)) for k, v in vars(module).items()
                       if not k.startswith("_") and callable(v) and not isinstance(v, (nn.Module, torch.Tensor)))
    hooks = [(h, names) for h in _HOOKS
             if (names := [_name(f) for f in getattr(module, h, {}).values() if not is_capture_hook(f)])]
    code = module.code if isinstance(module, torch.fx.GraphModule) else ""
    return repr((_name(module), module.extra_repr(), settings, functions, hooks, code))


def update_module_configs(h: hashlib._Hash, named_modules: Iterable[tuple[str, nn.Module]]) -> None:
    """Feed ``(name, module_config(module))`` of every given module, in the given order, into hash ``h``."""
    for name, module in named_modules:
        h.update(f"module|{name}|{module_config(module)}|".encode())


def fingerprinted_tensors(module: nn.Module) -> list[tuple[str, torch.Tensor]]:
    """The ``(name, tensor)`` pairs a digest of ``module`` covers: ``named_parameters()`` then ``named_buffers()``
    (each tensor once, in their order), without the buffers that transformers' forward rewrites as a cache
    (`hf_runtime.forward_cache`: a dynamic rotary embedding's ``inv_freq``; its ``original_inv_freq`` stays)."""
    out = list(module.named_parameters())
    seen: set[int] = set()
    for prefix, m in module.named_modules():
        cached = forward_cache(m)[0]
        for local, t in m._buffers.items():
            if t is None or id(t) in seen or local in cached:
                continue
            seen.add(id(t))
            out.append((f"{prefix}.{local}" if prefix else local, t))
    return out
