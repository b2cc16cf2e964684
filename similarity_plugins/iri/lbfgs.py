"""Per-sample L-BFGS for IRIs: every sample has its own curvature history, step and line search.

Parametrisation: pixels ``x = sigmoid(z)``, so the box [0, 1] needs no projection and the problem is
unconstrained in ``z``. Objective per sample: ``phi = rel_error**2`` (smooth at the optimum, whose value,
0, is known). Each batch step evaluates every active sample once (forward+backward at its trial point
``x_t = sigmoid(z + a d)``) and then, per sample:

- the trial is *accepted* when it is the sample's first evaluation or satisfies Armijo's condition
  ``phi_t <= phi + armijo * a * g.d``; the pair ``(s, y) = (z_t - z, g_t - g)`` enters the sample's
  history when ``s.y > 0``, the new direction is the two-loop recursion's ``d = -H g`` (the pairs of the
  sample's last ``history`` evaluations, initial scaling ``s.y / y.y`` of the newest) tried at ``a = lr``
  (1: the quasi-Newton step); with no
  history it is ``d = -g`` at the Polyak step ``a = lr * phi / |g|^2`` (the minimum is 0);
- a rejected trial *backtracks*: ``a`` shrinks to the minimiser of the quadratic through ``phi``, ``g.d``
  and ``phi_t``, clamped to [0.1 a, 0.5 a]; after ``max_backtracks`` rejections in a row, or if ``d`` is
  not a descent direction, the history is cleared and the sample restarts from ``-g``.

Every evaluation is a forward+backward of one sample and counts as one step of the budget, backtracking
included. Nothing couples samples: a sample's trajectory depends only on its own seed, start and settings.

Gradients: with ``generate_iris``, the front's ReLUs pass the gradient slope ``relu_leak`` (0.1) below zero
and the last one passes it straight through (``relu.py``): the forward values, the loss and the line
search's function values stay exact; only the search direction and the slope the line search expects change.

Storage: each slot's pairs sit in a ring of ``history`` positions; batch step ``n`` writes position
``n mod history`` (and expires what was there, ``history`` evaluations old, for every slot), so adding a
pair moves no memory, and the two-loop recursion reads the working batch in place. A sample's pairs are
visited in its own chronological order wherever its ring starts, so the result stays independent of the
batch it shares.

What runs where: the reductions (dot products), the two-loop recursion and the sigmoid run in torch on the
model's device; the elementwise trial update ``z_t = z + a d`` and the best-iterate copy run on the array
backend (NumPy / CuPy / torch), bit-identical on each, since they use only arithmetic.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .kernels import best_copy_kernel, trial_kernel
from .state import Slots, host_slots, tensor_slots

Z_CLAMP = 1e-3  # starting pixels are clamped to [Z_CLAMP, 1 - Z_CLAMP] before the logit
MAX_Z_STEP = 10.0  # no trial step moves a logit by more than this (sigmoid(10) = 1 - 4.5e-5)


def two_loop_ring(g: torch.Tensor, s_hist: torch.Tensor, y_hist: torch.Tensor, rho: torch.Tensor,
                  valid: torch.Tensor, newest: int, gamma: torch.Tensor) -> torch.Tensor:
    """The L-BFGS direction ``-H g`` for each row, every row with its own curvature pairs.

    ``g``: (B, D) gradients; ``s_hist``, ``y_hist``: (B, m, D) pairs in a ring: position ``newest`` holds the
    newest, ``newest - 1`` (mod m) the one before, ...; ``rho``: (B, m) ``1 / s.y``; ``valid``: (B, m) 1.0
    for a row's pairs, 0.0 for empty or expired positions (skipped exactly: they change nothing);
    ``gamma``: (B,) initial scaling ``s.y / y.y`` of the row's newest pair (1 without pairs).
    Returns (B, D). Rows never mix, and the result of a row is independent of where its ring starts.
    """
    m = s_hist.shape[1]
    order = [(newest - j) % m for j in range(m)]                   # newest -> oldest
    used = valid.any(dim=0).cpu().tolist()
    order = [p for p in order if used[p]]
    q = g.clone()
    alpha = torch.zeros_like(rho)
    for p in order:
        alpha[:, p] = rho[:, p] * valid[:, p] * (s_hist[:, p] * q).sum(dim=1)
        q -= alpha[:, p, None] * y_hist[:, p]
    r = gamma[:, None] * q
    for p in reversed(order):
        beta = rho[:, p] * valid[:, p] * (y_hist[:, p] * r).sum(dim=1)
        r += (alpha[:, p] - beta)[:, None] * s_hist[:, p]
    return -r


def _is_prefix(rows: np.ndarray) -> bool:
    """True when the sorted, distinct ``rows`` are 0, 1, ..., n-1 (the usual case: every slot active)."""
    return len(rows) > 0 and rows[0] == 0 and rows[-1] == len(rows) - 1


def _rows(t: torch.Tensor, rows: np.ndarray) -> torch.Tensor:
    """``t[rows]``: a view when ``rows`` is a prefix, else a gathered copy."""
    return t[: len(rows)] if _is_prefix(rows) else t[torch.as_tensor(rows, device=t.device)]


def _put_rows(t: torch.Tensor, rows: np.ndarray, value: torch.Tensor) -> None:
    """``t[rows] = value``, a no-op when ``value`` is already the view `_rows` gave."""
    if not _is_prefix(rows):
        t[torch.as_tensor(rows, device=t.device)] = value
    elif value.data_ptr() != t.data_ptr():
        t[: len(rows)].copy_(value)


@dataclass(eq=False)
class LbfgsSlots(Slots):
    """L-BFGS's per-slot state (D pixels, m = ``history`` ring positions)."""

    z: torch.Tensor        # (capacity, D) logits of the accepted point
    zt: torch.Tensor       # (capacity, D) logits of the trial point
    g: torch.Tensor        # (capacity, D) gradient of phi in z at the accepted point
    d: torch.Tensor        # (capacity, D) search direction
    s_hist: torch.Tensor   # (capacity, m, D) steps of the curvature pairs
    y_hist: torch.Tensor   # (capacity, m, D) gradient changes of the pairs
    rho: torch.Tensor      # (capacity, m) 1 / s.y of each pair
    hvalid: torch.Tensor   # (capacity, m) 1.0 where a ring position holds a pair
    gamma: torch.Tensor    # (capacity,) initial scaling s.y / y.y of the newest pair
    phi: np.ndarray        # (capacity,) float64 objective at the accepted point
    a: np.ndarray          # (capacity,) float64 step length of the trial
    gd: np.ndarray         # (capacity,) float64 directional derivative g.d
    fails: np.ndarray      # (capacity,) int64 rejected trials in a row
    fresh: np.ndarray      # (capacity,) int8 1: the next evaluation is accepted as the start

    @classmethod
    def allocate(cls, capacity: int, dim: int, history: int, device: torch.device, dtype: torch.dtype) -> LbfgsSlots:
        """Empty state for ``capacity`` slots of ``dim`` pixels with ``history`` pairs each."""
        def t(*shape: int) -> torch.Tensor:
            return tensor_slots(capacity, shape, device, dtype)

        return cls(z=t(dim), zt=t(dim), g=t(dim), d=t(dim), s_hist=t(history, dim), y_hist=t(history, dim),
                   rho=t(history), hvalid=t(history), gamma=t(),
                   phi=host_slots(capacity, np.float64, np.inf), a=host_slots(capacity, np.float64, 0.0),
                   gd=host_slots(capacity, np.float64, 0.0), fails=host_slots(capacity, np.int64, 0),
                   fresh=host_slots(capacity, np.int8, 1))


class LbfgsStepper:
    """Per-sample L-BFGS with a per-sample Armijo backtracking line search (see the module docstring)."""

    slots: LbfgsSlots

    def __init__(self, run: Any) -> None:
        self.run, self.settings = run, run.settings
        self.trial = trial_kernel(run.backend)
        self.best_copy = best_copy_kernel(run.backend)
        self.restarts = 0     # L-BFGS histories cleared (no descent direction, or too many rejections)
        self.rejected = 0     # rejected line-search trials

    def allocate(self, capacity: int, dim: int) -> None:
        """Fresh per-slot state for ``capacity`` slots of ``dim`` pixels (``self.slots``)."""
        self.slots = LbfgsSlots.allocate(capacity, dim, self.settings.history, self.run.device, self.run.dtype)

    def init_slots(self, slots: np.ndarray, sl: torch.Tensor) -> None:
        """Fresh state for the samples just loaded into ``slots``: ``z = logit(x0)``, evaluated first as is."""
        w, q = self.run.samples, self.slots
        x0 = w.x[sl].clamp(Z_CLAMP, 1.0 - Z_CLAMP)
        q.z[sl] = torch.logit(x0)
        q.zt[sl] = q.z[sl]
        w.x[sl] = torch.sigmoid(q.zt[sl])
        for field in (q.g, q.d, q.s_hist, q.y_hist, q.rho, q.hvalid):
            field[sl] = 0
        q.gamma[sl] = 1
        q.phi[slots] = np.inf
        q.a[slots] = 0.0
        q.gd[slots] = 0.0
        q.fails[slots] = 0
        q.fresh[slots] = 1

    def step(self, k: int, err: torch.Tensor, err_h: np.ndarray, grad: torch.Tensor, improved: np.ndarray,
             done: np.ndarray) -> None:
        """Consume the evaluation at the trial points of the first ``k`` slots; set their next trial points.

        ``err``: (k,) relative errors; ``grad``: (k, D) gradients of ``err`` in pixel space."""
        w, q, s, run = self.run.samples, self.slots, self.settings, self.run
        be = run.backend
        with be.stream(run.device):
            imp = be.column(np.ascontiguousarray(improved, dtype=run.np_dtype), run.device)
            self.best_copy(be.view(w.x[:k]), be.view(w.best[:k]), imp)
        self.pos = run.step % s.history   # this batch step's ring position: its old pairs are history steps old
        q.hvalid[:k, self.pos] = 0
        live = ~done
        if not live.any():
            return
        phi_t = err_h ** 2
        fresh = q.fresh[:k] == 1
        ok = phi_t <= q.phi[:k] + s.armijo * q.a[:k] * q.gd[:k]
        accept = np.flatnonzero(live & (fresh | ok))
        reject = np.flatnonzero(live & ~fresh & ~ok)
        if len(accept):
            xk = w.x[:k]
            g_t = (2.0 * err.detach()[:, None]) * grad * (xk * (1.0 - xk))   # d phi / d z
            self._accept(accept, phi_t, g_t, fresh)
        if len(reject):
            self._backtrack(reject, phi_t)
        rows = np.sort(np.concatenate([accept, reject]))
        zt, z, d = _rows(q.zt, rows), _rows(q.z, rows), _rows(q.d, rows)
        with be.stream(run.device):
            self.trial(be.view(zt), be.view(z), be.view(d),
                       be.column(np.ascontiguousarray(q.a[rows], dtype=run.np_dtype), run.device))
        _put_rows(q.zt, rows, zt)
        _put_rows(w.x, rows, torch.sigmoid(zt))

    def _accept(self, rows: np.ndarray, phi_t: np.ndarray, g_t: torch.Tensor, fresh: np.ndarray) -> None:
        """Move accepted rows to their trial point, update their histories and pick new directions."""
        q, s = self.slots, self.settings
        r = torch.as_tensor(rows, device=self.run.device)
        g_new = _rows(g_t, rows)
        old = rows[~fresh[rows]]
        if len(old):
            ro = torch.as_tensor(old, device=self.run.device)
            sv = q.zt[ro] - q.z[ro]
            yv = g_t[ro] - q.g[ro]
            sy = (sv * yv).sum(dim=1)
            yy = (yv * yv).sum(dim=1)
            keep = (sy > 1e-10 * yy.sqrt() * (sv * sv).sum(dim=1).sqrt()).cpu().numpy()
            if keep.any():   # the pair goes into this step's ring position
                kt = torch.as_tensor(keep, device=self.run.device)
                kr = ro[kt]
                q.s_hist[kr, self.pos] = sv[kt]
                q.y_hist[kr, self.pos] = yv[kt]
                q.rho[kr, self.pos] = 1.0 / sy[kt]
                q.hvalid[kr, self.pos] = 1
                q.gamma[kr] = sy[kt] / yy[kt].clamp_min(torch.finfo(yy.dtype).tiny)
        q.z[r] = q.zt[r]
        q.g[r] = g_new
        q.phi[rows] = phi_t[rows]
        q.fresh[rows] = 0
        q.fails[rows] = 0
        valid = _rows(q.hvalid, rows)
        has_pairs = valid.any(dim=1)
        gamma = torch.where(has_pairs, _rows(q.gamma, rows), torch.ones_like(_rows(q.gamma, rows)))
        d = two_loop_ring(g_new, _rows(q.s_hist, rows), _rows(q.y_hist, rows), _rows(q.rho, rows), valid,
                          self.pos, gamma)
        has_pairs = has_pairs.cpu().numpy()
        gd = (g_new * d).sum(dim=1).double().cpu().numpy()
        bad = ~(gd < 0) & has_pairs
        if bad.any():   # not a descent direction: forget the history
            self._forget(rows[bad])
            has_pairs &= ~bad
            d[torch.as_tensor(bad, device=self.run.device)] = -g_new[torch.as_tensor(bad, device=self.run.device)]
            self.restarts += int(bad.sum())
        q.d[r] = d
        gg = (g_new * g_new).sum(dim=1).double().cpu().numpy()
        q.gd[rows] = np.where(has_pairs, gd, -gg)
        polyak = np.where(gg > 0, s.lr * phi_t[rows] / np.maximum(gg, 1e-300), 0.0)  # no gradient: stay
        q.a[rows] = np.minimum(np.where(has_pairs, s.lr, polyak), self._cap(d))

    def _forget(self, rows: np.ndarray) -> None:
        """Clear the curvature history of ``rows`` (their next direction is ``-g``)."""
        q = self.slots
        q.hvalid[torch.as_tensor(rows, device=self.run.device)] = 0

    @staticmethod
    def _cap(d: torch.Tensor) -> np.ndarray:
        """Largest step per row that moves no logit by more than ``MAX_Z_STEP``: (B,) float64."""
        peak = d.abs().amax(dim=1).double().cpu().numpy()
        return np.where(peak > 0, MAX_Z_STEP / np.maximum(peak, 1e-300), 0.0)

    def _backtrack(self, rows: np.ndarray, phi_t: np.ndarray) -> None:
        """Shrink the step of rejected rows (safeguarded quadratic interpolation); reset hopeless ones."""
        q, s = self.slots, self.settings
        self.rejected += len(rows)
        a, gd, phi = q.a[rows], q.gd[rows], q.phi[rows]
        curv = phi_t[rows] - phi - a * gd
        with np.errstate(divide="ignore", invalid="ignore"):
            quad = np.where(curv > 0, -gd * a * a / (2.0 * curv), 0.5 * a)
        quad = np.where(np.isfinite(quad), quad, 0.5 * a)
        q.a[rows] = np.clip(quad, 0.1 * a, 0.5 * a)
        q.fails[rows] += 1
        hopeless = rows[q.fails[rows] > s.max_backtracks]
        if len(hopeless):
            hr = torch.as_tensor(hopeless, device=self.run.device)
            g = q.g[hr]
            gg = (g * g).sum(dim=1).double().cpu().numpy()
            q.d[hr] = -g
            self._forget(hopeless)
            q.fails[hopeless] = 0
            q.gd[hopeless] = -gg
            polyak = np.where(gg > 0, s.lr * q.phi[hopeless] / np.maximum(gg, 1e-300) * 0.1, 0.0)
            q.a[hopeless] = np.minimum(polyak, self._cap(-g))
            self.restarts += len(hopeless)

    def restart_slots(self, rows: np.ndarray) -> None:
        """Start ``rows`` afresh where they are (their next evaluation is accepted, the history cleared): used
        when their function values change precision (``mixed.py``), since the line search compares them."""
        q = self.slots
        self._forget(rows)
        q.fresh[rows] = 1
        q.fails[rows] = 0

    def after_step(self, k: int, done: np.ndarray) -> None:
        """Nothing to do between steps: L-BFGS restarts and sizes its steps inside `step`."""
