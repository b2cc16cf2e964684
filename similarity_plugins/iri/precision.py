"""Which precision and memory layout the IRI optimiser's evaluations run in, and the rule ``"auto"`` follows.

``precision="float32"`` runs every evaluation of the front in its own dtype, as always. ``"bfloat16"`` runs a
sample's evaluations under bfloat16 autocast (float32 weights, bfloat16 matrix units) while its error is far
from the tolerance and finishes it in float32: the convergence test, the best iterate that is returned and the
reported errors are always values of the front in its own dtype (``run.py`` switches each sample on its own).
``"auto"`` is ``"bfloat16"`` where it pays and ``"float32"`` elsewhere:

- the device has bfloat16 matrix units: CUDA devices that report native bfloat16 support; x86 CPUs with AMX
  (the ``amx_bf16`` flag in ``/proc/cpuinfo``). A CPU whose bfloat16 support is vector dot products only
  (``avx512_bf16``; Arm's ``bf16``) stays in float32: there a bfloat16 step is faster, but a run needs more of
  them near the tolerance, and per converged IRI it paid at one cut of ResNet-18 and lost at the next
  (docs/results/speed.md); and
- the front does enough work per sample for the faster matrix units to outweigh the casts that autocast
  adds: at least `AUTO_MIN_FLOPS` floating-point operations per sample for one forward+backward (counted
  from the convolution and linear layers' shapes on one seed, `step_flops`). The demo's width-16 CNN
  (0.6-3.7 MFLOP per sample) is far below it and stays in float32, where bfloat16 gained little or nothing
  under the measurement's noise; ResNet-18's CIFAR-stem cuts (1.1-1.9 GFLOP) are far above it.

Layout: convolutions on the CPU run bfloat16 fastest in channels_last (docs/results/speed.md), and cuDNN
prefers channels_last for both precisions, so
`memory_format` picks per device and precision for fronts with 2-d convolutions. The optimiser runs a
private copy of the front in that layout; the user's model is never converted.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import math
import platform
import time
from typing import Any, Callable, Iterator, Literal, get_args

import torch
from torch import nn

from ..utils.value_rules import OneOf

Precision = Literal["auto", "float32", "bfloat16"]
PRECISIONS: tuple[str, ...] = get_args(Precision)
#: What a precision must be (the ``precision`` argument, the ``iri_precision`` option).
PRECISION_RULE = OneOf(PRECISIONS, "(auto: bfloat16 where the hardware has it and it pays, then a float32 finish)")
AUTO_MIN_FLOPS = 5e7          # forward+backward FLOPs per sample from which "auto" runs bfloat16 (measured)
SWITCH_TOL_FACTOR = 2.0       # a sample leaves bfloat16 when its bfloat16 error is <= this many times tol ...
SWITCH_FLOOR_FACTOR = 2.0     # ... or this many times its seed's own bfloat16 error, whichever is larger
LOWP_BUDGET_FRACTION = 0.9    # and at the latest when it has used this fraction of its step budget
STALL_WINDOW = 25             # ... or at once when its best bfloat16 error has not fallen by STALL_GAIN (relative)
STALL_GAIN = 0.05             # in the last STALL_WINDOW steps: it sits at its bfloat16 floor, which float32 is not
GRAD16_MIN_COSINE = 0.95      # a sample's bfloat16 gradient of its float32 error must point within this cosine of the
                              # float32 gradient at its first such step, or the sample goes on in plain float32
PROBE_MIN_SPEEDUP = 1.5       # "auto" keeps bfloat16 only where a probe step in it is at least this much faster
GRAD16_MIN_SPEEDUP = 1.1      # samples finish with bfloat16 gradients only where the probe finds such a step (a
                              # float32 forward, a bfloat16 forward and backward) this much faster than float32
PROBE_SAMPLES = 8             # the probe's batch (seeds); PROBE_REPEATS timed steps of each precision, best taken
PROBE_REPEATS = 3
_CPU_FLAGS = ("amx_bf16",)   # bfloat16 matrix units (x86 AMX); see the module docstring


def check_precision(precision: Any) -> str:
    """``precision`` if it is one of `PRECISIONS`; else ValueError naming the valid values."""
    return PRECISION_RULE.check("precision", precision)


@functools.lru_cache(maxsize=1)
def cpu_has_bf16() -> bool:
    """True when this CPU has bfloat16 matrix units (the ``amx_bf16`` flag in ``/proc/cpuinfo``); False
    elsewhere or when the file cannot be read."""
    if platform.system() != "Linux":
        return False
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return any(flag in line.split(":", 1)[1].split() for flag in _CPU_FLAGS)
    except OSError:
        return False
    return False


def device_has_bf16(device: torch.device) -> bool:
    """True when ``device`` (CPU or CUDA) has bfloat16 matrix units (see the module docstring)."""
    if device.type == "cuda":
        try:
            return bool(torch.cuda.is_bf16_supported(including_emulation=False))
        except TypeError:   # older torch without the keyword
            return bool(torch.cuda.is_bf16_supported())
    return device.type == "cpu" and cpu_has_bf16()


def step_flops(front: Callable[[torch.Tensor], torch.Tensor], example: torch.Tensor) -> int:
    """Floating-point operations of one forward+backward of ``front`` (a module, or a function calling
    modules) on ``example`` (1, ...) with the gradient to the input only, as the IRI optimiser runs it: twice
    the multiply-adds of the convolution and linear modules it calls (the gradient to the input costs what
    the forward does), counted from their shapes in one forward pass without gradients; elementwise work is
    not counted. ``torch.utils.flop_counter`` gives the same figure for these modules (the benchmark counts
    with it) but takes seconds to import."""
    total = [0]

    def count(module: nn.Module, args: tuple, out: Any) -> None:
        if not isinstance(out, torch.Tensor):
            return
        if isinstance(module, (nn.Conv1d, nn.Conv2d, nn.Conv3d)):
            per_output = module.in_channels // module.groups * math.prod(module.kernel_size)
        elif isinstance(module, nn.Linear):
            per_output = module.in_features
        else:
            return
        total[0] += 2 * 2 * per_output * out.numel()

    # a global hook, so that a plain function calling modules is counted too (functional calls are not)
    hook = torch.nn.modules.module.register_module_forward_hook(count)
    try:
        with torch.no_grad():
            front(example)
    finally:
        hook.remove()
    return total[0]


def resolve_precision(precision: str, device: torch.device, flops: float | None,
                      probe: Callable[[], float] | None = None) -> tuple[str, str]:
    """The precision a run uses, ``"float32"`` or ``"bfloat16"``, and why (a short text for the settings).

    Args:
        precision: the caller's choice (`PRECISIONS`).
        device: where the run evaluates the front.
        flops: `step_flops` of the front per sample (None: unknown, which "auto" treats as large enough).
        probe: for "auto" where the hardware and ``flops`` allow bfloat16, a measurement: the float32 time of a
            step over its bfloat16 time (`probe_speedup`); below `PROBE_MIN_SPEEDUP` the run stays float32.
            None: no measurement.

    Returns:
        ``(precision, why)``.
    """
    check_precision(precision)
    if precision != "auto":
        return precision, "asked for"
    if not device_has_bf16(device):
        return "float32", f"auto: {device.type} has no bfloat16 matrix units"
    if flops is not None and flops < AUTO_MIN_FLOPS:
        return "float32", f"auto: {flops / 1e6:.3g} MFLOP per sample step < {AUTO_MIN_FLOPS / 1e6:g} (bfloat16 does not pay)"
    why = f"auto: {device.type} has bfloat16 matrix units" + (
        f", {flops / 1e6:.3g} MFLOP per sample step" if flops is not None else "")
    if probe is not None:
        speedup = probe()
        if not speedup >= PROBE_MIN_SPEEDUP:
            return "float32", f"{why}, but a probe step in bfloat16 is only {speedup:.2f}x as fast as in float32 " \
                              f"(< {PROBE_MIN_SPEEDUP:g}x)"
        why += f", a probe step {speedup:.2f}x as fast in bfloat16"
    return "bfloat16", why


def choose_precision(precision: str, front: Callable[[torch.Tensor], torch.Tensor], seeds: torch.Tensor,
                     device: torch.device) -> tuple[str, str, bool]:
    """The precision of a run, why, and how its samples finish: `resolve_precision` with, for ``"auto"`` on a
    device with bfloat16 matrix units, the front's `step_flops` and a probe (`probe_times`), and `grad16_pays`
    of that probe.

    Args:
        precision: the caller's choice (`PRECISIONS`).
        front: the front as the run calls it, in eval mode with frozen parameters (see `probe_times`).
        seeds: (N, ...) seed inputs; the probe runs on the first `PROBE_SAMPLES`.
        device: where the run evaluates the front.

    Returns:
        ``(precision, why, grad16)``: ``"float32"`` or ``"bfloat16"``, a short text, and whether samples that
            leave bfloat16 finish with float32 errors and bfloat16 gradients (``RunOptions.grad16``).
    """
    flops, probe, times = None, None, {}
    if precision == "auto" and device_has_bf16(device):
        flops = step_flops(front, seeds[:1].to(device))

        def probe() -> float:
            times.update(probe_times(front, seeds, device))
            return bfloat16_speedup(times)

    used, why = resolve_precision(precision, device, flops, probe)
    return used, why, grad16_pays(times)


def probe_speedup(front: Callable[[torch.Tensor], torch.Tensor], seeds: torch.Tensor, device: torch.device) -> float:
    """How much faster one IRI evaluation of ``front`` runs in bfloat16 than in float32 on ``device``
    (`bfloat16_speedup` of `probe_times`)."""
    return bfloat16_speedup(probe_times(front, seeds, device))


def bfloat16_speedup(times: dict[str, float]) -> float:
    """A float32 step's time over a bfloat16 step's, from `probe_times`."""
    return times["float32"] / max(times["bfloat16"], 1e-12)


def probe_times(front: Callable[[torch.Tensor], torch.Tensor], seeds: torch.Tensor, device: torch.device
                ) -> dict[str, float]:
    """Seconds of one IRI evaluation of ``front`` on ``device`` in each precision.

    Args:
        front: the front as the run calls it, in eval mode with frozen parameters: a module (each precision
            then runs in its `memory_format`, the bfloat16 one on a private copy, as the run does) or a function.
        seeds: (N, ...) seed inputs; the first `PROBE_SAMPLES` are the probe's batch.
        device: the device to time on.

    Returns:
        ``{"float32": s, "bfloat16": s, "forward32": s}``: the best of `PROBE_REPEATS` times, after one warm-up
            each, of a step (the forward and the gradient to the input, as the optimiser runs it) in float32 and
            under bfloat16 autocast, and of a float32 forward without gradient.
    """
    x = seeds[:PROBE_SAMPLES].to(device)

    def in_layout(precision: str) -> Callable[[torch.Tensor], torch.Tensor]:
        fmt = memory_format(device, precision, front if isinstance(front, nn.Module) else None)
        if fmt == torch.contiguous_format:
            return front
        return laid_out(copy.deepcopy(front).to(memory_format=fmt), fmt)

    def step(fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
        xr = x.clone().requires_grad_(True)
        torch.autograd.grad(fn(xr).float().sum(), xr)

    def forward(fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
        with torch.no_grad():
            fn(x)

    f32, b16 = in_layout("float32"), in_layout("bfloat16")
    return {"float32": _best_time(lambda: step(f32), contextlib.nullcontext, device),
            "bfloat16": _best_time(lambda: step(b16), lambda: lowp(device), device),
            "forward32": _best_time(lambda: forward(f32), contextlib.nullcontext, device)}


def _best_time(work: Callable[[], None], context: Callable[[], Any], device: torch.device) -> float:
    """The best of `PROBE_REPEATS` timings of ``work()`` inside ``context()``, after one warm-up."""
    best = math.inf
    for repeat in range(PROBE_REPEATS + 1):
        _sync(device)
        start = time.perf_counter()
        with context():
            work()
        _sync(device)
        if repeat:
            best = min(best, time.perf_counter() - start)
    return best


def grad16_pays(times: dict[str, float] | None) -> bool:
    """Whether samples that leave bfloat16 should finish with float32 errors and bfloat16 gradients (True) or
    in plain float32: where a probe (`probe_times`) finds that step at least `GRAD16_MIN_SPEEDUP` times as fast
    as a float32 step; without a probe (bfloat16 asked for), True."""
    if not times:
        return True
    return times["float32"] >= GRAD16_MIN_SPEEDUP * (times["forward32"] + times["bfloat16"])


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def memory_format(device: torch.device, precision: str, front: nn.Module | None) -> torch.memory_format:
    """The layout to run ``front`` in for ``precision`` on ``device``: channels_last for a front with 2-d
    convolutions in bfloat16 (CPU and CUDA) and in float32 on CUDA; the default layout otherwise."""
    has_conv = front is not None and any(isinstance(m, nn.Conv2d) for m in front.modules())
    if has_conv and (precision == "bfloat16" or device.type == "cuda"):
        return torch.channels_last
    return torch.contiguous_format


def laid_out(fn: Callable[[torch.Tensor], torch.Tensor], fmt: torch.memory_format) -> Callable:
    """``fn`` taking its 4-d input in layout ``fmt`` (the identity for the default layout)."""
    if fmt == torch.contiguous_format:
        return fn

    def call(x: torch.Tensor) -> torch.Tensor:
        return fn(x.contiguous(memory_format=fmt) if x.dim() == 4 else x)

    return call


@contextlib.contextmanager
def lowp(device: torch.device) -> Iterator[None]:
    """bfloat16 autocast on ``device``; on CUDA also TF32 for the float32 matrix products that autocast leaves
    in float32, unless the caller chose a lower matmul precision already (restored on exit)."""
    before = torch.get_float32_matmul_precision()
    try:
        if device.type == "cuda" and before == "highest":
            torch.set_float32_matmul_precision("high")
        with torch.autocast(device.type, dtype=torch.bfloat16):
            yield
    finally:
        torch.set_float32_matmul_precision(before)


def switch_at(tol: float, floor: Any) -> Any:
    """The bfloat16 error at or below which a sample goes on in float32: the larger of
    ``SWITCH_TOL_FACTOR * tol`` and ``SWITCH_FLOOR_FACTOR * floor`` (``floor``: the relative error of the
    seed's own activation in bfloat16 against float32, per sample)."""
    import numpy as np

    return np.maximum(SWITCH_TOL_FACTOR * tol, SWITCH_FLOOR_FACTOR * np.asarray(floor, dtype=np.float64))
