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

from typing import Any

import numpy as np
import torch

from .kernels import update_kernel
from .state import cosine


class AdamStepper:
    """Adam steps on the evaluated iterate ``x`` (pixel space, projected onto [0, 1])."""

    def __init__(self, run: Any) -> None:
        self.run, self.s = run, run.s
        self.kernel = update_kernel(run.backend, (self.s.beta1, self.s.beta2, self.s.eps))
        self.restarts = 0

    def fields(self, dim: int) -> tuple[dict, dict]:
        """Extra per-slot fields: (tensors name -> trailing shape, host name -> (dtype, fill))."""
        tensors = {"m": (dim,), "v": (dim,)}
        host = {"t_adam": (np.int64, 0), "cycle_start": (np.int64, 0), "cycle_len": (np.int64, 0),
                "scale": (np.float64, 1.0)}
        return tensors, host

    def init_slots(self, w: Any, slots: np.ndarray, sl: torch.Tensor) -> None:
        """Fresh state for the samples just loaded into ``slots`` (their ``x`` is already the start)."""
        w.m[sl] = 0
        w.v[sl] = 0
        first = self.s.cycle_steps if self.s.cycle_steps > 0 else self.s.steps
        for name, value in (("t_adam", 0), ("cycle_start", 0), ("cycle_len", min(first, self.s.steps)),
                            ("scale", 1.0)):
            getattr(w, name)[slots] = value

    def step(self, k: int, err: torch.Tensor, err_h: np.ndarray, grad: torch.Tensor, improved: np.ndarray,
             done: np.ndarray) -> None:
        """One update of the first ``k`` slots given their errors (k,) and input gradients (k, D)."""
        w, s, run = self.run.w, self.s, self.run
        be = run.backend
        lr = s.lr * w.scale[:k] * cosine(w.t[:k] - w.cycle_start[:k], np.maximum(w.cycle_len[:k], 1))
        ta = (w.t_adam[:k] + 1).astype(np.float64)
        col = lambda a: be.column(np.ascontiguousarray(a, dtype=run.np_dtype), run.device)  # noqa: E731
        with be.stream(run.device):
            self.kernel(be.view(w.x[:k]), be.view(grad), be.view(w.m[:k]), be.view(w.v[:k]), be.view(w.best[:k]),
                        col(improved), col(lr), col(1.0 - s.beta1 ** ta), col(1.0 - s.beta2 ** ta))
        w.t_adam[:k] += 1

    def after_step(self, k: int, done: np.ndarray) -> None:
        """A sample whose cycle ended goes back to its best iterate with fresh moments and starts the next
        cycle (``cycle_mult`` times longer, never past its budget) at ``cycle_decay`` times the step size."""
        w, s = self.run.w, self.s
        if not s.cycle_steps:
            return
        active = ~done & (w.t[:k] < s.steps)
        rows = np.flatnonzero(active & (w.t[:k] - w.cycle_start[:k] >= w.cycle_len[:k]))
        if len(rows) == 0:
            return
        r = torch.as_tensor(rows, device=w.device)
        w.x[r] = w.best[r]
        w.m[r] = 0
        w.v[r] = 0
        w.t_adam[rows] = 0
        self.restarts += len(rows)
        grown = np.ceil(w.cycle_len[rows] * s.cycle_mult).astype(np.int64)
        w.cycle_len[rows] = np.minimum(grown, s.steps - w.t[rows])
        w.cycle_start[rows] = w.t[rows]
        w.scale[rows] *= s.cycle_decay
