"""Per-sample mixed precision in the IRI run: bfloat16 far from the tolerance, float32 errors to finish.

Each slot carries a phase and ``floor``, the relative error of its seed's own activation in bfloat16 against
the float32 target (how close bfloat16 can see). A sample goes through up to three phases:

1. ``BF16``: its evaluations (error and gradient) run under bfloat16 autocast. These errors steer the
   optimiser but never count as converged.
2. ``GRAD16``: its error is a float32 forward of the front, and its gradient is that float32 residual carried
   back through the bfloat16 front. Near the target, a bfloat16 error is mostly bfloat16 noise (it does not
   correlate between two inputs a rounding step apart), so the all-bfloat16 gradient points nowhere in
   particular; the float32 residual through a bfloat16 Jacobian keeps its direction, at the cost of a float32
   forward without the float32 backward. The errors are float32 values, so the convergence test, the returned
   best iterate and its error are as in a float32 run.
3. ``FP32``: every evaluation in float32, as with ``precision="float32"``.

A sample leaves ``BF16`` for ``GRAD16`` as soon as one of three things holds: its bfloat16 error is at most
``precision.switch_at(tol, floor)`` (close); its best bfloat16 error has not fallen by ``STALL_GAIN`` in the
last ``STALL_WINDOW`` steps (stalled: it sits at a bfloat16 error floor that the seed's own floor did not
foresee); or it has used ``LOWP_BUDGET_FRACTION`` of its budget (at the latest after its last-but-one step,
so that every sample has at least one float32 error). Its best error is then tracked afresh in float32. Its
first step there (``CHECK``) also runs in float32 and compares the two gradients: where they point further
apart than ``GRAD16_MIN_COSINE``, the bfloat16 front's Jacobian is not to be trusted and the rest of its run is
plain ``FP32``. A run made with ``grad16=False`` (the probe found the ``GRAD16`` step no faster than float32)
sends samples from ``BF16`` straight to ``FP32``. The optimiser's own state (Adam's moments, the step-size
schedule) carries over every switch; L-BFGS starts a fresh history on leaving ``BF16``, since its line search
compares function values, which must come from one precision.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch

from .precision import GRAD16_MIN_COSINE, LOWP_BUDGET_FRACTION, STALL_GAIN, STALL_WINDOW, lowp, switch_at
from .state import Slots, host_slots

FP32, BF16, GRAD16, CHECK = 0, 1, 2, 3
#: Why a sample left bfloat16: close to tol, stalled in bfloat16, or out of its bfloat16 budget.
SWITCH_REASONS = ("close", "stalled", "budget")


@dataclass(eq=False)
class PrecisionSlots(Slots):
    """The precision phase of each slot."""

    lowp: np.ndarray    # (capacity,) int8 phase: BF16, CHECK, GRAD16 or FP32
    floor: np.ndarray   # (capacity,) float64 relative error of the seed's own activation in bfloat16
    best_low: np.ndarray  # (capacity,) float64 best bfloat16 error at the last gain of STALL_GAIN or more
    gain_at: np.ndarray   # (capacity,) int64 the slot's step count at that gain

    @classmethod
    def allocate(cls, capacity: int) -> PrecisionSlots:
        """Empty state for ``capacity`` slots."""
        return cls(lowp=host_slots(capacity, np.int8, FP32), floor=host_slots(capacity, np.float64, 0.0),
                   best_low=host_slots(capacity, np.float64, np.inf), gain_at=host_slots(capacity, np.int64, 0))


class MixedPrecision:
    """The bfloat16 phases of a run's samples (see the module docstring); ``run`` is the ``run.Run``."""

    slots: PrecisionSlots

    def __init__(self, run: Any, lowp_fn: Callable[[torch.Tensor], torch.Tensor], grad16: bool = True) -> None:
        self.run, self.lowp_fn, self.grad16 = run, lowp_fn, grad16
        self.evals = {BF16: 0, GRAD16: 0}   # sample evaluations all in bfloat16, and with a bfloat16 gradient
        self.switched = dict.fromkeys(SWITCH_REASONS, 0)   # samples that left BF16, by reason
        self.to_float32 = 0                                # samples whose check sent them to FP32
        self.cosines: list[float] = []                     # the checks' cosines
        self.left_at = np.full(run.n, -1, dtype=np.int64)   # per sample: the step it left BF16 at
        self.phase_of = np.full(run.n, BF16, dtype=np.int8)  # per sample: BF16, GRAD16 or FP32 (at the end: its last)
        steps = run.settings.steps
        self.last_steps = min(int(np.ceil(LOWP_BUDGET_FRACTION * steps)), steps)

    def allocate(self, capacity: int) -> None:
        """Fresh per-slot state for ``capacity`` slots (``self.slots``)."""
        self.slots = PrecisionSlots.allocate(capacity)

    def init_slots(self, slots: np.ndarray, seeds: torch.Tensor, act: torch.Tensor) -> None:
        """Start the samples just loaded into ``slots`` in bfloat16, with the floor of their ``seeds`` (B, ...)
        whose float32 activations are ``act`` (B, A)."""
        run, p = self.run, self.slots
        with torch.no_grad(), lowp(run.device):
            low = self.lowp_fn(seeds).reshape(len(slots), -1).float()
        norm = torch.linalg.vector_norm(act, dim=1).clamp_min(torch.finfo(act.dtype).tiny)
        floor = (torch.linalg.vector_norm(low - act, dim=1) / norm).double().cpu().numpy()
        p.floor[slots] = np.where(np.isfinite(floor), floor, np.inf)
        p.lowp[slots] = BF16
        p.best_low[slots] = np.inf
        p.gain_at[slots] = 0

    def any_low(self, k: int) -> bool:
        """True when some of the first ``k`` slots use bfloat16 (for the error or the gradient)."""
        return bool((self.slots.lowp[:k] != FP32).any())

    def evaluate(self, k: int, grad_at: Callable) -> tuple[torch.Tensor, torch.Tensor]:
        """Errors (k,) and input gradients (k, D) of the first ``k`` slots, each in its phase: ``BF16`` under
        autocast through ``lowp_fn``, ``GRAD16`` by `residual_gradient`, ``CHECK`` by `checked_gradient`,
        ``FP32`` through the run's front (``grad_at(fn, rows)``; ``rows`` None: all ``k``)."""
        run, phase = self.run, self.slots.lowp[:k]
        self.evals[BF16] += int((phase == BF16).sum())
        self.evals[GRAD16] += int(((phase == GRAD16) | (phase == CHECK)).sum())
        if (phase == BF16).all():
            with lowp(run.device):
                return grad_at(self.lowp_fn, None)
        if (phase == GRAD16).all():
            return self.residual_gradient(np.arange(k))
        err = torch.empty(k, dtype=run.dtype, device=run.device)
        grad = torch.empty(k, run.dim, dtype=run.dtype, device=run.device)
        for which in (BF16, GRAD16, CHECK, FP32):
            rows = np.flatnonzero(phase == which)
            if len(rows) == 0:
                continue
            if which == BF16:
                with lowp(run.device):
                    e, g = grad_at(self.lowp_fn, rows)
            elif which == GRAD16:
                e, g = self.residual_gradient(rows)
            elif which == CHECK:
                e, g = self.checked_gradient(rows, grad_at)
            else:
                e, g = grad_at(None, rows)
            r = torch.as_tensor(rows, device=run.device)
            err[r], grad[r] = e.to(run.dtype), g.to(run.dtype)
        return err, grad

    def checked_gradient(self, rows: np.ndarray, grad_at: Callable) -> tuple[torch.Tensor, torch.Tensor]:
        """Float32 errors (B,) and gradients (B, D) of the slots ``rows`` at their first step with float32 errors,
        and the verdict on their bfloat16 Jacobian: a slot whose `residual_gradient` points within
        ``GRAD16_MIN_COSINE`` of the float32 gradient goes on in ``GRAD16``, any other in ``FP32``."""
        err, grad = grad_at(None, rows)
        _, low = self.residual_gradient(rows)
        cosine = torch.nn.functional.cosine_similarity(low.to(grad.dtype), grad, dim=1).double().cpu().numpy()
        ok = cosine >= GRAD16_MIN_COSINE
        self.slots.lowp[rows] = np.where(ok, GRAD16, FP32)
        self._grow()
        self.phase_of[self.run.samples.sample[rows]] = np.where(ok, GRAD16, FP32)
        self.cosines.extend(cosine.tolist())
        self.to_float32 += int((~ok).sum())
        return err, grad

    def residual_gradient(self, rows: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """Float32 errors (B,) of the slots ``rows`` and their input gradients (B, D) through the bfloat16 front:
        the error's gradient with respect to the activation, ``(act - target) / (|act - target| |target|)``
        from a float32 forward, carried back through a bfloat16 forward of ``lowp_fn``."""
        run, w = self.run, self.run.samples
        r = torch.as_tensor(rows, device=run.device)
        x, target, tnorm = w.x[r], w.target[r], w.tnorm[r]
        n = x.shape[0]
        xk = x.reshape(n, *run.shape)
        with torch.no_grad():
            act = run.front_fn(xk)
            if not isinstance(act, torch.Tensor):
                raise TypeError(f"front_fn must return a tensor, got {type(act).__name__}")
            diff = act.reshape(n, -1).to(run.dtype) - target
        dist = torch.linalg.vector_norm(diff, dim=1)
        err = dist / tnorm
        d_act = diff / (dist.clamp_min(torch.finfo(run.dtype).tiny) * tnorm)[:, None]
        xg = xk.detach().requires_grad_(True)
        with torch.enable_grad(), lowp(run.device):
            low = self.lowp_fn(xg)
        (grad,) = torch.autograd.grad(low.reshape(n, -1), xg, grad_outputs=d_act.to(low.dtype))
        return err, grad.reshape(n, -1).to(run.dtype).contiguous()

    def counts_as_converged(self, k: int) -> np.ndarray:
        """(k,) bool: slots whose errors are float32 values (only those may stop at ``tol``)."""
        return self.slots.lowp[:k] != BF16

    def after_step(self, k: int, err_h: np.ndarray, done: np.ndarray) -> None:
        """Move the first ``k`` slots that came close enough, stalled or used their bfloat16 share of the budget out
        of ``BF16`` (see the module docstring): to ``CHECK`` (or ``FP32`` without ``grad16``); their best error
        restarts there."""
        run, p, w = self.run, self.slots, self.run.samples
        low = (p.lowp[:k] == BF16) & ~done
        gained = low & (err_h < p.best_low[:k] * (1.0 - STALL_GAIN))
        p.best_low[:k] = np.where(gained, err_h, p.best_low[:k])
        p.gain_at[:k] = np.where(gained, w.t[:k], p.gain_at[:k])
        reasons = {"close": low & (err_h <= switch_at(run.settings.tol, p.floor[:k])),
                   "stalled": low & (w.t[:k] - p.gain_at[:k] >= STALL_WINDOW),
                   "budget": low & (w.t[:k] >= self.last_steps)}
        leaving = np.zeros(k, dtype=bool)
        for reason, hit in reasons.items():   # each sample counted once, under the first reason that holds
            self.switched[reason] += int((hit & ~leaving).sum())
            leaving |= hit
        rows = np.flatnonzero(leaving)
        if len(rows) == 0:
            return
        p.lowp[rows] = CHECK if self.grad16 else FP32
        self._grow()
        self.left_at[w.sample[rows]] = w.t[rows]
        self.phase_of[w.sample[rows]] = GRAD16 if self.grad16 else FP32
        w.best_err[rows] = np.inf
        run.stepper.restart_slots(rows)

    def _grow(self) -> None:
        """Extend the per-sample records to the run's samples (a rank taking seeds from a shared queue gets more
        as it goes)."""
        more = self.run.n - len(self.left_at)
        if more > 0:
            self.left_at = np.concatenate([self.left_at, np.full(more, -1, dtype=np.int64)])
            self.phase_of = np.concatenate([self.phase_of, np.full(more, BF16, dtype=np.int8)])

    def in_low(self, k: int) -> int:
        """How many of the first ``k`` slots run all in bfloat16 now (the progress line shows it)."""
        return int((self.slots.lowp[:k] == BF16).sum())

    def stats(self) -> dict[str, Any]:
        """What the run reports about its precision: sample evaluations all in bfloat16 (``lowp_sample_steps``)
        and with a bfloat16 gradient of a float32 error (``grad16_sample_steps``, checks included); how many
        samples left bfloat16 and why (``lowp_switched_<reason>``), and the median and largest step they did so
        at; the checks' smallest and median cosine, how many sent their sample on in plain float32
        (``float32_fallbacks``), and the phase each sample was in at its end (``finished_in``: counts of
        ``bfloat16``, ``grad16``, ``float32``)."""
        left = self.left_at[self.left_at >= 0]
        cosines = np.asarray(self.cosines)
        finished = {name: int((self.phase_of == phase).sum())
                    for name, phase in (("bfloat16", BF16), ("grad16", GRAD16), ("float32", FP32))}
        return {"lowp_sample_steps": self.evals[BF16], "grad16_sample_steps": self.evals[GRAD16],
                "lowp_switched": sum(self.switched.values()),
                **{f"lowp_switched_{reason}": n for reason, n in self.switched.items()},
                "lowp_left_at_median": float(np.median(left)) if len(left) else None,
                "lowp_left_at_max": int(left.max()) if len(left) else None,
                "grad16_cosine_min": float(cosines.min()) if len(cosines) else None,
                "grad16_cosine_median": float(np.median(cosines)) if len(cosines) else None,
                "float32_fallbacks": self.to_float32, "finished_in": finished}
