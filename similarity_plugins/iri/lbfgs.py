"""Per-sample L-BFGS for IRIs: every sample has its own curvature history, step and line search.

Parametrisation: pixels ``x = sigmoid(z)``, so the box [0, 1] needs no projection and the problem is
unconstrained in ``z``. Objective per sample: ``phi = rel_error**2`` (smooth at the optimum, whose value,
0, is known). Each batch step evaluates every active sample once (forward+backward at its trial point
``x_t = sigmoid(z + a d)``) and then, per sample:

- the trial is *accepted* when it is the sample's first evaluation or satisfies Armijo's condition
  ``phi_t <= phi + armijo * a * g.d``; the pair ``(s, y) = (z_t - z, g_t - g)`` enters the sample's
  history when ``s.y > 0``, the new direction is the two-loop recursion's ``d = -H g`` (history
  ``history`` pairs, initial scaling ``s.y / y.y``) tried at ``a = lr`` (1: the quasi-Newton step); with no
  history it is ``d = -g`` at the Polyak step ``a = lr * phi / |g|^2`` (the minimum is 0);
- a rejected trial *backtracks*: ``a`` shrinks to the minimiser of the quadratic through ``phi``, ``g.d``
  and ``phi_t``, clamped to [0.1 a, 0.5 a]; after ``max_backtracks`` rejections in a row, or if ``d`` is
  not a descent direction, the history is cleared and the sample restarts from ``-g``.

Every evaluation is a forward+backward of one sample and counts as one step of the budget, backtracking
included. Nothing couples samples: a sample's trajectory depends only on its own seed, start and settings.

What runs where: the reductions (dot products), the two-loop recursion and the sigmoid run in torch on the
model's device; the elementwise trial update ``z_t = z + a d`` and the best-iterate copy run on the array
backend (NumPy / CuPy / torch), bit-identical on each, since they use only arithmetic.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .update import best_copy_kernel, trial_kernel

Z_CLAMP = 1e-3  # starting pixels are clamped to [Z_CLAMP, 1 - Z_CLAMP] before the logit


def two_loop(g: torch.Tensor, s_hist: torch.Tensor, y_hist: torch.Tensor, rho: torch.Tensor,
             count: torch.Tensor) -> torch.Tensor:
    """The L-BFGS direction ``-H g`` for each row, every row with its own history.

    ``g``: (B, D) gradients; ``s_hist``, ``y_hist``: (B, m, D) curvature pairs, newest last; ``rho``: (B, m)
    ``1 / s.y``; ``count``: (B,) int, how many of the newest pairs are valid (0 gives ``-g``).
    Returns (B, D).
    """
    m = s_hist.shape[1]
    valid = (torch.arange(m, device=g.device)[None, :] >= (m - count)[:, None]).to(g.dtype)
    q = g.clone()
    alpha = torch.zeros_like(rho)
    for j in range(m - 1, -1, -1):
        alpha[:, j] = rho[:, j] * valid[:, j] * (s_hist[:, j] * q).sum(dim=1)
        q -= alpha[:, j, None] * y_hist[:, j]
    sy = (s_hist[:, -1] * y_hist[:, -1]).sum(dim=1)
    yy = (y_hist[:, -1] * y_hist[:, -1]).sum(dim=1)
    gamma = torch.where(count > 0, sy / yy.clamp_min(torch.finfo(g.dtype).tiny), torch.ones_like(sy))
    r = gamma[:, None] * q
    for j in range(m):
        beta = rho[:, j] * valid[:, j] * (y_hist[:, j] * r).sum(dim=1)
        r += (alpha[:, j] - beta)[:, None] * s_hist[:, j]
    return -r


class LbfgsStepper:
    """Per-sample L-BFGS with a per-sample Armijo backtracking line search (see the module docstring)."""

    def __init__(self, run: Any) -> None:
        self.run, self.s = run, run.s
        self.trial = trial_kernel(run.backend)
        self.best_copy = best_copy_kernel(run.backend)
        self.restarts = 0
        self.rejected = 0

    def fields(self, dim: int) -> tuple[dict, dict]:
        """Extra per-slot fields: (tensors name -> trailing shape, host name -> (dtype, fill))."""
        m = self.s.history
        tensors = {"z": (dim,), "zt": (dim,), "g": (dim,), "d": (dim,), "s_hist": (m, dim), "y_hist": (m, dim),
                   "rho": (m,)}
        host = {"phi": (np.float64, np.inf), "a": (np.float64, 0.0), "gd": (np.float64, 0.0),
                "count": (np.int64, 0), "fails": (np.int64, 0), "fresh": (np.int8, 1)}
        return tensors, host

    def init_slots(self, w: Any, slots: np.ndarray, sl: torch.Tensor) -> None:
        """Fresh state for the samples just loaded into ``slots``: ``z = logit(x0)``, evaluated first as is."""
        x0 = w.x[sl].clamp(Z_CLAMP, 1.0 - Z_CLAMP)
        w.z[sl] = torch.logit(x0)
        w.zt[sl] = w.z[sl]
        w.x[sl] = torch.sigmoid(w.zt[sl])
        for name in ("g", "d", "s_hist", "y_hist", "rho"):
            getattr(w, name)[sl] = 0
        for name, value in (("phi", np.inf), ("a", 0.0), ("gd", 0.0), ("count", 0), ("fails", 0), ("fresh", 1)):
            getattr(w, name)[slots] = value

    def step(self, k: int, err: torch.Tensor, err_h: np.ndarray, grad: torch.Tensor, improved: np.ndarray,
             done: np.ndarray) -> None:
        """Consume the evaluation at the trial points of the first ``k`` slots; set their next trial points.

        ``err``: (k,) relative errors; ``grad``: (k, D) gradients of ``err`` in pixel space."""
        w, s, run = self.run.w, self.s, self.run
        be = run.backend
        with be.stream(run.device):
            imp = be.column(np.ascontiguousarray(improved, dtype=run.np_dtype), run.device)
            self.best_copy(be.view(w.x[:k]), be.view(w.best[:k]), imp)
        live = ~done
        if not live.any():
            return
        phi_t = err_h ** 2
        fresh = w.fresh[:k] == 1
        ok = phi_t <= w.phi[:k] + s.armijo * w.a[:k] * w.gd[:k]
        accept = np.flatnonzero(live & (fresh | ok))
        reject = np.flatnonzero(live & ~fresh & ~ok)
        if len(accept):
            xk = w.x[:k]
            g_t = (2.0 * err.detach()[:, None]) * grad * (xk * (1.0 - xk))   # d phi / d z
            self._accept(accept, phi_t, g_t, fresh)
        if len(reject):
            self._backtrack(reject, phi_t)
        rows = np.concatenate([accept, reject])
        r = torch.as_tensor(rows, device=w.device)
        zt, z, d = w.zt[r], w.z[r], w.d[r]
        with be.stream(run.device):
            self.trial(be.view(zt), be.view(z), be.view(d),
                       be.column(np.ascontiguousarray(w.a[rows], dtype=run.np_dtype), run.device))
        w.zt[r] = zt
        w.x[r] = torch.sigmoid(zt)

    def _accept(self, rows: np.ndarray, phi_t: np.ndarray, g_t: torch.Tensor, fresh: np.ndarray) -> None:
        """Move accepted rows to their trial point, update their histories and pick new directions."""
        w, s = self.run.w, self.s
        r = torch.as_tensor(rows, device=w.device)
        g_new = g_t[r]
        old = rows[~fresh[rows]]
        if len(old):
            ro = torch.as_tensor(old, device=w.device)
            sv = w.zt[ro] - w.z[ro]
            yv = g_t[ro] - w.g[ro]
            sy = (sv * yv).sum(dim=1)
            keep = (sy > 1e-10 * (yv * yv).sum(dim=1).sqrt() * (sv * sv).sum(dim=1).sqrt()).cpu().numpy()
            if keep.any():
                kr = ro[torch.as_tensor(keep, device=w.device)]
                w.s_hist[kr] = torch.cat([w.s_hist[kr, 1:], sv[keep][:, None]], dim=1)
                w.y_hist[kr] = torch.cat([w.y_hist[kr, 1:], yv[keep][:, None]], dim=1)
                w.rho[kr] = torch.cat([w.rho[kr, 1:], (1.0 / sy[keep])[:, None]], dim=1)
                w.count[old[keep]] = np.minimum(w.count[old[keep]] + 1, s.history)
        w.z[r] = w.zt[r]
        w.g[r] = g_new
        w.phi[rows] = phi_t[rows]
        w.fresh[rows] = 0
        w.fails[rows] = 0
        count = torch.as_tensor(w.count[rows], device=w.device)
        d = two_loop(g_new, w.s_hist[r], w.y_hist[r], w.rho[r], count)
        gd = (g_new * d).sum(dim=1).double().cpu().numpy()
        bad = ~(gd < 0) & (w.count[rows] > 0)
        if bad.any():   # not a descent direction: forget the history
            w.count[rows[bad]] = 0
            d[torch.as_tensor(bad, device=w.device)] = -g_new[torch.as_tensor(bad, device=w.device)]
            self.restarts += int(bad.sum())
        w.d[r] = d
        gg = (g_new * g_new).sum(dim=1).double().cpu().numpy()
        w.gd[rows] = np.where(w.count[rows] > 0, gd, -gg)
        polyak = s.lr * phi_t[rows] / np.maximum(gg, 1e-300)
        w.a[rows] = np.where(w.count[rows] > 0, s.lr, polyak)

    def _backtrack(self, rows: np.ndarray, phi_t: np.ndarray) -> None:
        """Shrink the step of rejected rows (safeguarded quadratic interpolation); reset hopeless ones."""
        w, s = self.run.w, self.s
        self.rejected += len(rows)
        a, gd, phi = w.a[rows], w.gd[rows], w.phi[rows]
        curv = phi_t[rows] - phi - a * gd
        with np.errstate(divide="ignore", invalid="ignore"):
            quad = np.where(curv > 0, -gd * a * a / (2.0 * curv), 0.5 * a)
        quad = np.where(np.isfinite(quad), quad, 0.5 * a)
        w.a[rows] = np.clip(quad, 0.1 * a, 0.5 * a)
        w.fails[rows] += 1
        hopeless = rows[w.fails[rows] > s.max_backtracks]
        if len(hopeless):
            hr = torch.as_tensor(hopeless, device=w.device)
            g = w.g[hr]
            gg = (g * g).sum(dim=1).double().cpu().numpy()
            w.d[hr] = -g
            w.count[hopeless] = 0
            w.fails[hopeless] = 0
            w.gd[hopeless] = -gg
            w.a[hopeless] = s.lr * w.phi[hopeless] / np.maximum(gg, 1e-300) * 0.1
            self.restarts += len(hopeless)

    def after_step(self, k: int, done: np.ndarray) -> None:
        """Nothing: L-BFGS has no schedule cycles."""
