"""The process-wide state a metric plugin can change, saved before each metric call and put back after it.

``compare``, the grids and ``score`` make every metric call between `process_state` and
`restore_process_state`, so a plugin that changes a setting of the whole process cannot change what the later
metrics (or the caller) compute: torch's grad mode, default dtype and default device, anomaly detection,
deterministic algorithms, float32 matmul precision, flushing of subnormal floats and the cuDNN flags, the
number of intra-op threads, NumPy's floating-point error handling, the warnings filters, the environment
variables, the working directory and the file creation mask (umask). Whatever changed is put back and named,
and the row says so in its warnings. Warnings filters that a module adds when it is first imported during the
call (SciPy does) are kept and not blamed on the metric: they would be there had the module been imported
before. The random generators are forked around each metric by `isolated_rng`.
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from typing import Any, Callable

import numpy as np
import torch


def _cwd() -> str | None:
    try:
        return os.getcwd()
    except OSError:  # the folder was removed under us: nothing to go back to
        return None


def _set_cwd(path: str | None) -> None:
    if path is not None:
        os.chdir(path)


def _set_environ(saved: dict[str, str]) -> None:
    for key in [k for k in os.environ if k not in saved]:
        del os.environ[key]
    for key, value in saved.items():
        if os.environ.get(key) != value:
            os.environ[key] = value


def _set_default_device(device: torch.device) -> None:
    torch.set_default_device(None if device == torch.device("cpu") else device)


def _set_cudnn(flags: tuple[bool, bool, bool]) -> None:
    cudnn = torch.backends.cudnn
    cudnn.allow_tf32, cudnn.benchmark, cudnn.deterministic = flags


def _set_deterministic(flags: tuple[bool, bool]) -> None:
    torch.use_deterministic_algorithms(flags[0], warn_only=flags[1])


def _umask() -> int:
    mask = os.umask(0o022)  # the only way to read it is to set it; put back at once
    os.umask(mask)
    return mask


def _flushes_subnormals() -> bool:
    """Whether torch flushes subnormal floats to zero (``torch.set_flush_denormal``, which has no getter)."""
    return bool((torch.full((1,), 1e-40, dtype=torch.float32, device="cpu") * 1.0).item() == 0.0)


def _set_filters(filters: list) -> None:
    warnings.filters[:] = filters
    warnings._filters_mutated() if hasattr(warnings, "_filters_mutated") else None  # noqa: SLF001 - drop its cache


# name: (read the setting, put it back)
_SETTINGS: dict[str, tuple[Callable[[], Any], Callable[[Any], None]]] = {
    "grad mode": (torch.is_grad_enabled, torch.set_grad_enabled),
    "default dtype": (torch.get_default_dtype, torch.set_default_dtype),
    "default device": (torch.get_default_device, _set_default_device),
    "anomaly detection": (torch.is_anomaly_enabled, torch.set_anomaly_enabled),
    "deterministic algorithms": (lambda: (torch.are_deterministic_algorithms_enabled(),
                                          torch.is_deterministic_algorithms_warn_only_enabled()), _set_deterministic),
    "float32 matmul precision": (torch.get_float32_matmul_precision, torch.set_float32_matmul_precision),
    "cuDNN flags": (lambda: (torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark,
                             torch.backends.cudnn.deterministic), _set_cudnn),
    "thread count": (torch.get_num_threads, torch.set_num_threads),
    "NumPy error handling (np.seterr)": (np.geterr, lambda saved: np.seterr(**saved)),
    "warnings filters": (lambda: list(warnings.filters), _set_filters),
    "environment variables": (lambda: dict(os.environ), _set_environ),
    "working directory": (_cwd, _set_cwd),
    "file creation mask (umask)": (_umask, os.umask),
    "flushing of subnormal floats": (_flushes_subnormals, torch.set_flush_denormal),
}
_MODULES = "modules"  # the number of imported modules, to tell an import's warnings filters from a metric's


def process_state() -> dict[str, Any]:
    """A snapshot of every process-wide setting `restore_process_state` puts back (the module docstring lists them)."""
    return {**{name: read() for name, (read, _) in _SETTINGS.items()}, _MODULES: len(sys.modules)}


def _filters_added_by_imports(saved: dict[str, Any], now: list) -> bool:
    """Whether the warnings filters ``now`` are the saved ones with filters added in front while modules were
    first imported (``filterwarnings`` inserts at the front; an import adds what it adds once per process)."""
    before = saved["warnings filters"]
    return (len(sys.modules) > saved[_MODULES] and len(now) > len(before)
            and now[len(now) - len(before):] == before)


def _describe(name: str, before: Any, after: Any) -> str:
    if name == "environment variables":
        keys = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
        return f"{name} ({', '.join(keys[:5])}{', ...' if len(keys) > 5 else ''})"
    if name == "warnings filters":
        return name
    return f"{name} ({after!r}, was {before!r})"


def restore_process_state(saved: dict[str, Any]) -> list[str]:
    """Put back what `process_state` saved; returns what had changed, each with its new and old value."""
    now = process_state()
    changed = []
    for name, (_, put_back) in _SETTINGS.items():
        if name == "warnings filters" and _filters_added_by_imports(saved, now[name]):
            continue
        if now[name] != saved[name]:
            changed.append(_describe(name, saved[name], now[name]))
            put_back(saved[name])
    return changed


def note_restored(result: Any, metric: str, changed: list[str]) -> Any:
    """Add to a row's ``details["warnings"]`` that ``metric`` changed the process settings ``changed`` (restored)."""
    if changed:
        result.details.setdefault("warnings", []).append(
            f"metric {metric!r} changed the process's {'; '.join(changed)}; restored for the later metrics "
            "(a plugin should leave process-wide settings as it found them)")
    return result


def outside_inference_mode() -> contextlib.AbstractContextManager:
    """Leave the caller's ``torch.inference_mode()`` for a metric call (the tensors a metric caches must stay usable
    after it), and do nothing otherwise: torch's guard would also undo a grad-mode change the metric made, before
    `restore_process_state` could name it."""
    return torch.inference_mode(False) if torch.is_inference_mode_enabled() else contextlib.nullcontext()

