"""Per-sample mixed precision in the IRI run: bfloat16 evaluations far from the tolerance, float32 to finish.

Each slot carries a flag ``lowp`` (1: its evaluations run under bfloat16 autocast) and ``floor``, the relative
error of its seed's own activation in bfloat16 against the float32 target: how close bfloat16 can see. A
sample starts in bfloat16; its bfloat16 errors steer the optimiser but never count as converged. It goes on
in float32 (``lowp`` 0) as soon as one of three things holds: its bfloat16 error is at most
``precision.switch_at(tol, floor)`` (close: float32 finishes it); its best bfloat16 error has not fallen by
``STALL_GAIN`` in the last ``STALL_WINDOW`` steps (stalled: it sits at a bfloat16 error floor near or above
``tol`` that the seed's own floor did not foresee, and more bfloat16 steps would be wasted); or it has used
``LOWP_BUDGET_FRACTION`` of its budget (at the latest after its last-but-one step, so every sample has at least
one float32 evaluation). From then on its best error is tracked afresh in float32, so the convergence test, the
returned best iterate and its error are float32 values. The optimiser's own
state (Adam's moments, the step-size schedule) carries over the switch; L-BFGS starts a fresh history there,
since its line search compares function values, which must come from one precision.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch

from .precision import LOWP_BUDGET_FRACTION, STALL_GAIN, STALL_WINDOW, lowp, switch_at
from .state import Slots, host_slots

#: Why a sample went on in float32: close to tol, stalled in bfloat16, or out of its bfloat16 budget.
SWITCH_REASONS = ("close", "stalled", "budget")


@dataclass(eq=False)
class PrecisionSlots(Slots):
    """The precision of each slot."""

    lowp: np.ndarray    # (capacity,) int8 1: the slot's evaluations run under bfloat16 autocast
    floor: np.ndarray   # (capacity,) float64 relative error of the seed's own activation in bfloat16
    best_low: np.ndarray  # (capacity,) float64 best bfloat16 error at the last gain of STALL_GAIN or more
    gain_at: np.ndarray   # (capacity,) int64 the slot's step count at that gain

    @classmethod
    def allocate(cls, capacity: int) -> PrecisionSlots:
        """Empty state for ``capacity`` slots."""
        return cls(lowp=host_slots(capacity, np.int8, 0), floor=host_slots(capacity, np.float64, 0.0),
                   best_low=host_slots(capacity, np.float64, np.inf), gain_at=host_slots(capacity, np.int64, 0))


class MixedPrecision:
    """The bfloat16 phase of a run's samples (see the module docstring); ``run`` is the ``run.Run``."""

    slots: PrecisionSlots

    def __init__(self, run: Any, lowp_fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
        self.run, self.lowp_fn = run, lowp_fn
        self.lowp_evals = 0    # sample evaluations in bfloat16
        self.switched = dict.fromkeys(SWITCH_REASONS, 0)   # samples that went on in float32, by reason
        self.left_at = np.full(run.n, -1, dtype=np.int64)   # per sample: the step it went on in float32 at
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
        p.lowp[slots] = 1
        p.best_low[slots] = np.inf
        p.gain_at[slots] = 0

    def any_low(self, k: int) -> bool:
        """True when some of the first ``k`` slots are in bfloat16."""
        return bool(self.slots.lowp[:k].any())

    def evaluate(self, k: int, grad_at: Callable) -> tuple[torch.Tensor, torch.Tensor]:
        """Errors (k,) and input gradients (k, D) of the first ``k`` slots: the bfloat16 ones under autocast
        through ``lowp_fn``, the others in float32 through the run's front (``grad_at(fn, rows)``)."""
        run = self.run
        low = self.slots.lowp[:k] == 1
        self.lowp_evals += int(low.sum())
        if low.all():
            with lowp(run.device):
                return grad_at(self.lowp_fn, None)
        err = torch.empty(k, dtype=run.dtype, device=run.device)
        grad = torch.empty(k, run.dim, dtype=run.dtype, device=run.device)
        for fn, rows, ctx in ((self.lowp_fn, np.flatnonzero(low), lowp), (None, np.flatnonzero(~low), None)):
            if len(rows) == 0:
                continue
            r = torch.as_tensor(rows, device=run.device)
            if ctx is None:
                e, g = grad_at(fn, rows)
            else:
                with ctx(run.device):
                    e, g = grad_at(fn, rows)
            err[r], grad[r] = e.to(run.dtype), g.to(run.dtype)
        return err, grad

    def counts_as_converged(self, k: int) -> np.ndarray:
        """(k,) bool: slots whose errors are float32 values (only those may stop at ``tol``)."""
        return self.slots.lowp[:k] == 0

    def after_step(self, k: int, err_h: np.ndarray, done: np.ndarray) -> None:
        """Move the first ``k`` slots that came close enough, stalled, or used their bfloat16 share of the budget
        to float32 (see the module docstring); their best error restarts there."""
        run, p, w = self.run, self.slots, self.run.samples
        low = (p.lowp[:k] == 1) & ~done
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
        p.lowp[rows] = 0
        self.left_at[w.sample[rows]] = w.t[rows]
        w.best_err[rows] = np.inf
        run.stepper.restart_slots(rows)

    def in_low(self, k: int) -> int:
        """How many of the first ``k`` slots run in bfloat16 now (the progress line shows it)."""
        return int(self.slots.lowp[:k].sum())

    def stats(self) -> dict[str, Any]:
        """What the run reports about its precision: bfloat16 sample evaluations, how many samples went on in
        float32 and why (``lowp_switched_<reason>``), and the median and largest step they did so at."""
        left = self.left_at[self.left_at >= 0]
        return {"lowp_sample_steps": self.lowp_evals, "lowp_switched": sum(self.switched.values()),
                **{f"lowp_switched_{reason}": n for reason, n in self.switched.items()},
                "lowp_left_at_median": float(np.median(left)) if len(left) else None,
                "lowp_left_at_max": int(left.max()) if len(left) else None}
