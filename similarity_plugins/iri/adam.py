"""Per-sample Adam with per-sample cosine cycles that restart from the best iterate.

The stepper keeps, per slot: Adam's moments ``m``, ``v``, the step count since the moments were last reset
(``t_adam``, for the per-sample bias correction), the current cycle (start and length) and a step-size scale.
A cycle is one cosine from the preset's ``lr`` down to 0 over ``cycle_steps`` of the sample's own steps (0:
one cosine over the whole budget); when it ends, the sample goes back to its best iterate with fresh moments
and starts a cycle ``cycle_mult`` times longer at ``cycle_decay`` times the step size, never past its budget.
A sample that missed ``tol`` in a cycle thereby restarts from where it was best, where the full step size
would only throw it back out. The elementwise update (best-iterate copy, step, box projection) runs on the
array backend as one kernel (``kernels.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .kernels import update_kernel
from .state import Slots, cosine, host_slots, tensor_slots


@dataclass(eq=False)
class AdamSlots(Slots):
    """Adam's per-slot state."""

    m: torch.Tensor           # (capacity, D) first moments
    v: torch.Tensor           # (capacity, D) second moments
    t_adam: np.ndarray        # (capacity,) int64 steps since the moments were last reset (bias correction)
    cycle_start: np.ndarray   # (capacity,) int64 the sample's step at which its current cycle began
    cycle_len: np.ndarray     # (capacity,) int64 the current cycle's length in the sample's steps
    scale: np.ndarray         # (capacity,) float64 step-size scale of the current cycle

    @classmethod
    def allocate(cls, capacity: int, dim: int, device: torch.device, dtype: torch.dtype) -> AdamSlots:
        """Empty state for ``capacity`` slots of ``dim`` pixels."""
        return cls(m=tensor_slots(capacity, (dim,), device, dtype), v=tensor_slots(capacity, (dim,), device, dtype),
                   t_adam=host_slots(capacity, np.int64, 0), cycle_start=host_slots(capacity, np.int64, 0),
                   cycle_len=host_slots(capacity, np.int64, 0), scale=host_slots(capacity, np.float64, 1.0))


class AdamStepper:
    """Adam steps on the evaluated iterate ``x`` (pixel space, projected onto [0, 1])."""

    slots: AdamSlots

    def __init__(self, run: Any) -> None:
        self.run, self.settings = run, run.settings
        s = self.settings
        self.kernel = update_kernel(run.backend, (s.beta1, s.beta2, s.eps))
        self.restarts = 0
        self.rejected = 0   # no line search

    def allocate(self, capacity: int, dim: int) -> None:
        """Fresh per-slot state for ``capacity`` slots of ``dim`` pixels (``self.slots``)."""
        self.slots = AdamSlots.allocate(capacity, dim, self.run.device, self.run.dtype)

    def init_slots(self, slots: np.ndarray, sl: torch.Tensor) -> None:
        """Fresh state for the samples just loaded into ``slots`` (their ``x`` is already the start)."""
        a, s = self.slots, self.settings
        a.m[sl] = 0
        a.v[sl] = 0
        first = s.cycle_steps if s.cycle_steps > 0 else s.steps
        a.t_adam[slots] = 0
        a.cycle_start[slots] = 0
        a.cycle_len[slots] = min(first, s.steps)
        a.scale[slots] = 1.0

    def step(self, k: int, err: torch.Tensor, err_h: np.ndarray, grad: torch.Tensor, improved: np.ndarray,
             done: np.ndarray) -> None:
        """One update of the first ``k`` slots given their errors (k,) and input gradients (k, D)."""
        run, s, a = self.run, self.settings, self.slots
        w, be = run.samples, run.backend
        lr = s.lr * a.scale[:k] * cosine(w.t[:k] - a.cycle_start[:k], np.maximum(a.cycle_len[:k], 1))
        ta = (a.t_adam[:k] + 1).astype(np.float64)
        col = lambda v: be.column(np.ascontiguousarray(v, dtype=run.np_dtype), run.device)  # noqa: E731
        with be.stream(run.device):
            self.kernel(be.view(w.x[:k]), be.view(grad), be.view(a.m[:k]), be.view(a.v[:k]), be.view(w.best[:k]),
                        col(improved), col(lr), col(1.0 - s.beta1 ** ta), col(1.0 - s.beta2 ** ta))
        a.t_adam[:k] += 1

    def after_step(self, k: int, done: np.ndarray) -> None:
        """A sample whose cycle ended goes back to its best iterate with fresh moments and starts the next
        cycle (``cycle_mult`` times longer, never past its budget) at ``cycle_decay`` times the step size."""
        s, a, w = self.settings, self.slots, self.run.samples
        if not s.cycle_steps:
            return
        active = ~done & (w.t[:k] < s.steps)
        rows = np.flatnonzero(active & (w.t[:k] - a.cycle_start[:k] >= a.cycle_len[:k]))
        if len(rows) == 0:
            return
        r = torch.as_tensor(rows, device=w.x.device)
        w.x[r] = w.best[r]
        a.m[r] = 0
        a.v[r] = 0
        a.t_adam[rows] = 0
        self.restarts += len(rows)
        grown = np.ceil(a.cycle_len[rows] * s.cycle_mult).astype(np.int64)
        a.cycle_len[rows] = np.minimum(grown, s.steps - w.t[rows])
        a.cycle_start[rows] = w.t[rows]
        a.scale[rows] *= s.cycle_decay

    def restart_slots(self, rows: np.ndarray) -> None:
        """Nothing to restart when the precision of ``rows`` changes: the moments and the schedule carry over."""
