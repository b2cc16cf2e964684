"""The donor guard: whatever a metric plugin does to the donors, ``compare`` notices, undoes it and says so.

`DonorGuard` takes one snapshot of each donor when a ``compare`` call starts: a copy of every
parameter and buffer (on its own device), the tensor objects themselves, each module's class, children,
``training`` flag and hooks, and each parameter's ``requires_grad``. After every metric call,
`DonorGuard.check` compares the donors with it (values bit for bit, NaNs included), restores
everything that differs and returns a message naming what changed (which tensor, hook, submodule, dtype,
device or flag). A copy rather than a hash: comparing with a copy is cheaper than hashing the tensors after every metric
(docs/reliability.md has the costs), and a hash could not restore.
Memory: one extra copy of each donor's parameters and buffers, on the donor's device.

What transformers adds to a model during its own forward is not a change (`networks.hf_runtime`): the
output-capturing hooks it installs on a first forward with ``output_hidden_states`` are kept (the model's flag
says they are there; without them it would return no hidden states), and the caches of a dynamic rotary
embedding are restored without a word.

What a metric can change outside the donors (grad mode, the default dtype and device, thread count, the
working directory, ...) is saved and restored by `process.process_state` / `process.restore_process_state`,
the one code path ``score`` uses too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn.modules import module as module_globals

from ..networks.fingerprint import module_settings
from ..networks.hf_runtime import forward_cache, is_capture_hook
from .process import note_restored, restore_process_state

_HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks",
               "_state_dict_hooks", "_load_state_dict_pre_hooks")
_GLOBAL_HOOKS = ("_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks",
                 "_global_backward_pre_hooks")
_INT_VIEW = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """True when two tensors have the same dtype, shape, device and bytes (a NaN equals the same NaN)."""
    if a.dtype != b.dtype or a.shape != b.shape or a.device != b.device:
        return False
    if a.is_floating_point() and a.element_size() in _INT_VIEW and a.is_contiguous() and b.is_contiguous():
        view = _INT_VIEW[a.element_size()]
        return torch.equal(a.view(view), b.view(view))
    return torch.equal(a, b) or bool(torch.isnan(a).logical_and(torch.isnan(b)).logical_or(a == b).all())


@dataclass
class _Tensor:
    owner: nn.Module
    kind: str            # "_parameters" or "_buffers"
    local: str           # the name inside its owner
    obj: torch.Tensor    # the tensor object the donor held
    data: torch.Tensor   # the storage it held (``obj.data`` as it was)
    copy: torch.Tensor   # its values as they were
    requires_grad: bool
    grad: torch.Tensor | None
    cache: bool = False  # a cache that transformers' forward rewrites: restored without a word

    def moved(self) -> bool:
        """True when the tensor object no longer holds the storage it held (``.data`` reassigned)."""
        now = self.obj
        return (now.data_ptr() != self.data.data_ptr() or now.dtype != self.data.dtype or now.device != self.data.device
                or now.shape != self.data.shape)


@dataclass
class _Module:
    module: nn.Module
    training: bool
    children: dict[str, Any]
    hooks: dict[str, dict]
    registry: dict[str, dict]   # the parameter and buffer dicts as they were (name -> tensor object or None)
    attributes: dict[str, Any]  # the plain attributes (stride, eps, ...) as they were
    cached: dict[str, Any]      # the attributes that transformers' forward rewrites as a cache, as they were
    cached_buffers: frozenset[str]  # the names of the buffers it rewrites


class DonorGuard:
    """Snapshot of named donors (``{"front": model, "end": model}``) to check and restore after each metric.

    The same model under two names is watched once. See the module docstring for what is compared.
    """

    def __init__(self, donors: dict[str, nn.Module]) -> None:
        self._donors: dict[str, tuple[dict[str, _Module], dict[str, _Tensor]]] = {}
        seen: set[int] = set()
        for role, model in donors.items():
            if id(model) in seen:
                continue
            seen.add(id(model))
            self._donors[role] = self._snapshot(model)
        self._global_hooks = {name: dict(getattr(module_globals, name, {})) for name in _GLOBAL_HOOKS}

    @staticmethod
    def _snapshot(model: nn.Module) -> tuple[dict[str, _Module], dict[str, _Tensor]]:
        modules: dict[str, _Module] = {}
        tensors: dict[str, _Tensor] = {}
        for mname, m in model.named_modules(remove_duplicate=False):
            cached_buffers, cached_attributes = forward_cache(m)
            modules[mname] = _Module(m, m.training, dict(m._modules), {h: dict(getattr(m, h, {})) for h in _HOOK_DICTS},
                                     {"_parameters": dict(m._parameters), "_buffers": dict(m._buffers)},
                                     module_settings(m), {k: getattr(m, k) for k in cached_attributes},
                                     cached_buffers)
            for kind in ("_parameters", "_buffers"):
                for local, t in getattr(m, kind).items():
                    if t is None:
                        continue
                    name = f"{mname}.{local}" if mname else local
                    tensors.setdefault(name, _Tensor(m, kind, local, t, t.data, t.detach().clone(),
                                                     bool(t.requires_grad), t.grad,
                                                     kind == "_buffers" and local in cached_buffers))
        return modules, tensors

    def check(self) -> str | None:
        """Compare the donors with the snapshot; restore every difference. Returns what changed, or None."""
        changes: list[str] = []
        for role, (modules, tensors) in self._donors.items():
            found = self._restore_modules(modules) + self._restore_tensors(tensors)
            if found:
                more = f" and {len(found) - 6} more" if len(found) > 6 else ""
                changes.append(f"the {role} model: {'; '.join(found[:6])}{more}")
        for name, saved in self._global_hooks.items():
            current = getattr(module_globals, name, None)
            if current is not None and dict(current) != saved:
                current.clear()
                current.update(saved)
                changes.append(f"torch's global module hooks ({name.strip('_')})")
        return "; ".join(changes) or None

    @staticmethod
    def _restore_modules(modules: dict[str, _Module]) -> list[str]:
        found = []
        for name, saved in modules.items():
            m, where = saved.module, name or "(root)"
            if dict(m._modules) != saved.children or any(m._modules[k] is not v for k, v in saved.children.items()):
                found.append(f"submodules of {where} replaced or added ({_diff_keys(m._modules, saved.children)})")
                m._modules.clear()
                m._modules.update(saved.children)
            for kind, before in saved.registry.items():
                now = getattr(m, kind)
                if now.keys() != before.keys() or any(now[k] is not v for k, v in before.items()):
                    if not set(_changed_keys(now, before)) <= saved.cached_buffers:  # a cache: restored silently
                        found.append(f"{kind.strip('_')} of {where} replaced or added ({_diff_keys(now, before)})")
                    now.clear()
                    now.update(before)
            for name, value in saved.cached.items():
                setattr(m, name, value)
            found += _restore_hooks(m, saved.hooks, where)
            if m.training != saved.training:
                m.training = saved.training   # a flag: restored silently (as preserved() always did)
            attributes = module_settings(m)
            if attributes != saved.attributes:
                changed = sorted(k for k in set(attributes) | set(saved.attributes)
                                 if attributes.get(k, _MISSING) != saved.attributes.get(k, _MISSING))
                found.append(f"settings of {where} ({', '.join(changed)})")
                for k in changed:
                    if k in saved.attributes:
                        setattr(m, k, saved.attributes[k])
                    else:
                        delattr(m, k)
        return found

    @staticmethod
    def _restore_tensors(tensors: dict[str, _Tensor]) -> list[str]:
        found = []
        for name, t in tensors.items():
            obj = t.obj
            if t.moved() and t.cache:
                obj.data = t.data
            elif t.moved():
                what = (f"moved to {obj.dtype} on {obj.device} (was {t.copy.dtype} on {t.copy.device})"
                        if obj.dtype != t.copy.dtype or obj.device != t.copy.device else "given new storage")
                found.append(f"{name} {what}")
                obj.data = t.data
            if not same_bits(t.data, t.copy):
                if not t.cache:
                    found.append(f"{name} values changed")
                with torch.no_grad():
                    t.data.copy_(t.copy)
            if obj.requires_grad != t.requires_grad:
                obj.requires_grad_(t.requires_grad)   # a flag: restored silently
            if obj.grad is not t.grad:
                obj.grad = t.grad   # gradients left on the user's parameters: restored silently
        return found


_MISSING = object()


def _restore_hooks(m: nn.Module, saved: dict[str, dict], where: str) -> list[str]:
    """Restore ``m``'s hook dicts to ``saved``, keeping the output-capturing hooks transformers added since (they
    belong to the model from its first forward on); returns what changed besides those."""
    found = []
    for hook, before in saved.items():
        now = getattr(m, hook, None)
        if now is None or dict(now) == before:
            continue
        added = {k: v for k, v in now.items() if k not in before and is_capture_hook(v)}
        if {k: v for k, v in now.items() if k not in added} != before:
            found.append(f"{hook.strip('_').replace('_', ' ')} on {where} ({len(now)} now, {len(before)} before)")
            now.clear()
            now.update(before)
            now.update(added)
    return found


def _changed_keys(now: Any, before: dict) -> list[str]:
    return sorted({k for k in set(now) | set(before) if now.get(k) is not before.get(k)})


def _diff_keys(now: Any, before: dict) -> str:
    return ", ".join(_changed_keys(now, before)) or "same names, new objects"


class DonorModified(RuntimeError):
    """A metric changed a donor (the row's error names the metric and what it changed)."""


def settle(result: Any, guard: DonorGuard, memo: dict, memo_before: set,
           saved: dict[str, Any]) -> tuple[Any, DonorModified | None]:
    """After one metric call: restore the donors and the global torch settings, and judge the row.

    ``result``: the metric's [`SimilarityResult`][similarity_plugins.SimilarityResult]; ``memo``: the context's memo, of which the
    entries added since ``memo_before`` (its keys before the call) are dropped when a donor had changed
    (they may have been computed from the changed donor); ``saved``: `process_state` before the call.
    A changed donor turns the row into an error naming the metric and the change, without a score; a
    changed global setting is restored and noted in ``details["warnings"]``. Returns the row and the
    `DonorModified` its error came from (None when the donors were unchanged).
    """
    changed_globals = restore_process_state(saved)
    problem = guard.check()
    changed = None
    if problem:
        for key in [k for k in memo if k not in memo_before]:
            del memo[key]
        changed = DonorModified(f"metric {result.metric!r} changed {problem}; the donors were restored, this row has "
                                f"no score and what was cached during the call was dropped"
                                + (f" (it had failed with {result.error})" if result.error else ""))
        result.score, result.error, result.error_type = None, f"{DonorModified.__name__}: {changed}", DonorModified.__name__
    return note_restored(result, result.metric, changed_globals), changed
