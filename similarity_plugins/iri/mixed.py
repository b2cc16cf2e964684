"""Per-sample mixed precision in the IRI run: bfloat16 evaluations far from the tolerance, float32 to finish.

Each slot carries a flag ``lowp`` (1: its evaluations run under bfloat16 autocast) and ``floor``, the relative
error of its seed's own activation in bfloat16 against the float32 target: how close bfloat16 can see. A
sample starts in bfloat16; its bfloat16 errors steer the optimiser but never count as converged. It goes on
in float32 (``lowp`` 0) once its bfloat16 error is at most ``precision.switch_at(tol, floor)`` or it has used
``LOWP_BUDGET_FRACTION`` of its budget (at the latest after its last-but-one step, so every sample has at least
one float32 evaluation); from then on its best error is tracked afresh in float32, so the convergence test, the
returned best iterate and its error are float32 values. The optimiser's own
state (Adam's moments, the step-size schedule) carries over the switch; L-BFGS starts a fresh history there,
since its line search compares function values, which must come from one precision.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch

from .precision import LOWP_BUDGET_FRACTION, lowp, switch_at
from .state import Slots, host_slots


@dataclass(eq=False)
class PrecisionSlots(Slots):
    """The precision of each slot."""

    lowp: np.ndarray    # (capacity,) int8 1: the slot's evaluations run under bfloat16 autocast
    floor: np.ndarray   # (capacity,) float64 relative error of the seed's own activation in bfloat16

    @classmethod
    def allocate(cls, capacity: int) -> "PrecisionSlots":
        """Empty state for ``capacity`` slots."""
        return cls(lowp=host_slots(capacity, np.int8, 0), floor=host_slots(capacity, np.float64, 0.0))


class MixedPrecision:
    """The bfloat16 phase of a run's samples (see the module docstring); ``run`` is the ``run.Run``."""

    slots: PrecisionSlots

    def __init__(self, run: Any, lowp_fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
        self.run, self.lowp_fn = run, lowp_fn
        self.lowp_evals = 0    # sample evaluations in bfloat16
        self.switched = 0      # samples that went on in float32 before their budget ran out
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
        """Move the first ``k`` slots that came close enough (or used their bfloat16 share of the budget) to
        float32; their best error restarts there."""
        run, p, w = self.run, self.slots, self.run.samples
        low = (p.lowp[:k] == 1) & ~done
        close = err_h <= switch_at(run.settings.tol, p.floor[:k])
        rows = np.flatnonzero(low & (close | (w.t[:k] >= self.last_steps)))
        if len(rows) == 0:
            return
        p.lowp[rows] = 0
        w.best_err[rows] = np.inf
        self.switched += len(rows)
        run.stepper.restart_slots(rows)

    def stats(self) -> dict[str, Any]:
        """What the run reports about its precision."""
        return {"lowp_sample_steps": self.lowp_evals, "lowp_switched": self.switched}
