"""First-order per-sample steps (Adam, normalised gradient) with per-sample schedules and restarts.

The stepper keeps, per slot: Adam moments ``m``, ``v`` (Adam only), the step count since the moments were
last reset (``t_adam``, for the per-sample bias correction), the current schedule cycle and a step-size
multiplier. The elementwise update (best-iterate copy, step, box projection) runs on the array backend as
one kernel (``update.py``).

Step-size adaptation (``lr_adapt`` > 0, a multiplicative hypergradient rule after Baydin et al., 2018): each
sample also keeps its last move ``u`` (pixels) and a gain (1 at the start; the step size is ``lr`` x gain x
the schedule's multiplier x the restart decays). Before a step, its gain is scaled by
``1 + lr_adapt * cos(-g, u)``: up while the new gradient still points along the last move (steps too short),
down when it points back (the step overshot), at most ``LR_ADAPT_MAX``. A sample whose gain falls below
``LR_ADAPT_RESTART_BELOW`` has shrunk its steps while still short of ``tol``: it restarts from its best
iterate with fresh moments at the gain ``LR_ADAPT_RESTART_AT`` (unless a cycle or plateau restart moved it
back there in the same step). Only the sample's own gradient and move count, so its
trajectory stays independent of its batch.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .schedule import multiplier
from .update import update_kernel

LR_ADAPT_MAX = 10.0            # the gain that lr_adapt moves stays at or below this
LR_ADAPT_RESTART_BELOW = 0.05  # ... and a sample whose gain falls below this restarts from its best iterate
LR_ADAPT_RESTART_AT = 0.5      # at this gain (on patches, VGG-16 features.16 with the rules before round 11:
#                                81% converged against 69% without the restart; docs/iri_depth.md)


class FirstOrderStepper:
    """Adam / normgrad steps on the evaluated iterate ``x`` (pixel space, projected onto [0, 1])."""

    def __init__(self, run: Any) -> None:
        self.run, self.s = run, run.s
        self.adam = self.s.optimizer == "adam"
        hyper = (self.s.beta1, self.s.beta2, self.s.eps) if self.adam else ()
        self.kernel = update_kernel(run.backend, self.s.optimizer, hyper)
        self.restarts = 0

    def fields(self, dim: int) -> tuple[dict, dict]:
        """Extra per-slot fields: (tensors name -> trailing shape, host name -> (dtype, fill))."""
        tensors = {"m": (dim,), "v": (dim,)} if self.adam else {}
        host = {"t_adam": (np.int64, 0), "cycle_start": (np.int64, 0), "cycle_len": (np.int64, 0),
                "scale": (np.float64, 1.0), "ref_err": (np.float64, np.inf), "since": (np.int64, 0)}
        if self.s.lr_adapt:   # the step-size adaptation: the sample's last move (pixels) and its gain
            tensors["u"] = (dim,)
            host["gain"] = (np.float64, 1.0)
        return tensors, host

    def init_slots(self, w: Any, slots: np.ndarray, sl: torch.Tensor) -> None:
        """Fresh state for the samples just loaded into ``slots`` (their ``x`` is already the start)."""
        if self.adam:
            w.m[sl] = 0
            w.v[sl] = 0
        if self.s.lr_adapt:
            w.u[sl] = 0
            w.gain[slots] = 1.0
        first = self.s.cycle_steps if self.s.cycle_steps > 0 else self.s.steps
        for name, value in (("t_adam", 0), ("cycle_start", 0), ("cycle_len", min(first, self.s.steps)),
                            ("scale", 1.0), ("ref_err", np.inf), ("since", 0)):
            getattr(w, name)[slots] = value

    def _columns(self, k: int, improved: np.ndarray) -> tuple:
        w, s, run = self.run.w, self.s, self.run
        gain = w.gain[:k] if s.lr_adapt else 1.0
        cycle = multiplier(s.schedule, w.t[:k] - w.cycle_start[:k], np.maximum(w.cycle_len[:k], 1),
                           floor=s.lr_floor, stages=s.stages)
        lr = s.lr * w.scale[:k] * gain * cycle
        col = lambda a: run.backend.column(np.ascontiguousarray(a, dtype=run.np_dtype), run.device)  # noqa: E731
        if self.adam:
            ta = (w.t_adam[:k] + 1).astype(np.float64)
            return col(improved), col(lr), col(1.0 - s.beta1 ** ta), col(1.0 - s.beta2 ** ta)
        return col(improved), col(lr)

    def step(self, k: int, err: torch.Tensor, err_h: np.ndarray, grad: torch.Tensor, improved: np.ndarray,
             done: np.ndarray) -> None:
        """One update of the first ``k`` slots given their errors (k,) and input gradients (k, D)."""
        w, s, be = self.run.w, self.s, self.run.backend
        real = err_h < w.ref_err[:k] * (1.0 - s.restart_threshold)
        w.ref_err[:k] = np.where(real, err_h, w.ref_err[:k])
        w.since[:k] = np.where(real, 0, w.since[:k] + 1)
        if s.lr_adapt:
            self._adapt(k, grad, done)
            before = w.x[:k].clone()
        with be.stream(self.run.device):
            x, g, best = be.view(w.x[:k]), be.view(grad), be.view(w.best[:k])
            if self.adam:
                imp, lr, bc1, bc2 = self._columns(k, improved)
                self.kernel(x, g, be.view(w.m[:k]), be.view(w.v[:k]), best, imp, lr, bc1, bc2)
            else:
                imp, lr = self._columns(k, improved)
                step = lr / be.xp.maximum(be.xp.row_norm(g), 1e-30)
                self.kernel(x, g, best, imp, step)
        w.t_adam[:k] += 1
        if s.lr_adapt:
            torch.sub(w.x[:k], before, out=w.u[:k])

    def _adapt(self, k: int, grad: torch.Tensor, done: np.ndarray) -> None:
        """Scale the gain of the first ``k`` slots (not ``done``) by ``1 + lr_adapt * cos``,
        ``cos`` (k,) being the cosine between the negative gradient ``grad`` (k, D) and the slot's last move
        (0 before its first move); at most ``LR_ADAPT_MAX``."""
        w = self.run.w
        u = w.u[:k]
        norms = torch.linalg.vector_norm(grad, dim=1) * torch.linalg.vector_norm(u, dim=1)
        cos = -(grad * u).sum(dim=1) / norms.clamp_min(torch.finfo(norms.dtype).tiny)
        cos = torch.where(norms > 0, cos, torch.zeros_like(cos)).double().cpu().numpy()
        adapted = np.minimum(w.gain[:k] * (1.0 + self.s.lr_adapt * cos), LR_ADAPT_MAX)
        w.gain[:k] = np.where(done, w.gain[:k], adapted)

    def after_step(self, k: int, done: np.ndarray) -> None:
        """Per-sample restarts (after the step counts moved): see :meth:`_restart_rows` and, with
        ``lr_adapt``, :meth:`_restart_shrunk`."""
        restarted = self._restart_rows(k, done) if self.s.restart_patience or self.s.cycle_steps else None
        if self.s.lr_adapt:
            self._restart_shrunk(k, done, restarted)

    def _restart_shrunk(self, k: int, done: np.ndarray, restarted: np.ndarray | None = None) -> None:
        """A sample still running whose gain fell below ``LR_ADAPT_RESTART_BELOW`` goes back to its best
        iterate with fresh moments at the gain ``LR_ADAPT_RESTART_AT`` (its cycle goes on); one that a cycle
        or plateau restart (``restarted``: a bool mask over the first ``k`` slots) already sent back there
        in this step only gets the new gain."""
        w = self.run.w
        shrunk = ~done & (w.t[:k] < self.s.steps) & (w.gain[:k] < LR_ADAPT_RESTART_BELOW)
        w.gain[:k] = np.where(shrunk, LR_ADAPT_RESTART_AT, w.gain[:k])
        rows = np.flatnonzero(shrunk if restarted is None else shrunk & ~restarted)
        if len(rows):
            self._back_to_best(rows)

    def _back_to_best(self, rows: np.ndarray) -> None:
        """Send ``rows`` back to their best iterate with fresh moments, no last move and a fresh plateau
        count; one restart each."""
        w = self.run.w
        r = torch.as_tensor(rows, device=w.device)
        w.x[r] = w.best[r]
        if self.adam:
            w.m[r] = 0
            w.v[r] = 0
        if self.s.lr_adapt:
            w.u[r] = 0   # the jump back to the best iterate is not a step
        w.t_adam[rows] = 0
        w.since[rows] = 0
        w.ref_err[rows] = w.best_err[rows]
        self.restarts += len(rows)

    def _restart_rows(self, k: int, done: np.ndarray) -> np.ndarray:
        """A sample whose schedule cycle ended (``cycle_steps``) or that is stuck for ``restart_patience``
        steps goes back to its best iterate with fresh Adam moments and starts a new cycle (``cycle_mult``
        times longer, never past its budget) at a step size scaled by ``cycle_decay`` (cycle end) or
        ``restart_decay`` (plateau). Returns the restarted slots as a bool mask over the first ``k``."""
        w, s = self.run.w, self.s
        active = ~done & (w.t[:k] < s.steps)
        ended = active & (w.t[:k] - w.cycle_start[:k] >= w.cycle_len[:k]) if s.cycle_steps else np.zeros(k, bool)
        stuck = active & ~ended & (w.since[:k] >= s.restart_patience) if s.restart_patience else np.zeros(k, bool)
        rows = np.flatnonzero(ended | stuck)
        if len(rows) == 0:
            return ended | stuck
        self._back_to_best(rows)
        remaining = s.steps - w.t[rows]
        grown = np.ceil(w.cycle_len[rows] * s.cycle_mult).astype(np.int64)
        w.cycle_len[rows] = np.where(ended[rows], np.minimum(grown, remaining), remaining)
        w.cycle_start[rows] = w.t[rows]
        w.scale[rows] *= np.where(ended[rows], s.cycle_decay, s.restart_decay)
        return ended | stuck
