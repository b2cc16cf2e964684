"""One run of the batched IRI optimiser (``optimize.optimize_iris`` sets it up).

Every sample carries its own state (step count, optimiser state, best iterate, best error). The working batch
has a fixed number of slots; when a sample finishes (error <= ``tol`` or budget spent) its best iterate is
written out and the next pending seed takes its slot, so the batch stays full until the work runs out, after
which it shrinks (active slots are kept contiguous, so the front always runs on one dense slice). A sample's
trajectory depends only on its seed, its index in the seed set and the settings, never on the batch size or
on its neighbours (the front must treat samples independently: eval mode, which ``generate_iris``
guarantees); up to floating-point differences of batched convolutions, the IRIs are the same for any
``batch_size``.

``Run`` owns the slots (``state.WorkingBatch``) and the loop; a stepper (``adam.AdamStepper`` or
``lbfgs.LbfgsStepper``) owns the optimiser's per-slot fields and turns each evaluation into the next
iterate. Each batch step evaluates every active slot once (forward+backward of the front), tracks each
sample's best error, lets the stepper update, and retires samples that reached ``tol`` or their budget,
refilling their slots from the pending seeds.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable

import numpy as np
import torch

from ..utils.progress import progress_bar
from .adam import AdamStepper
from .backends import Backend, compile_failure, compile_front, compiled_graphs
from .lbfgs import LbfgsStepper
from .mixed import MixedPrecision
from .result import IRISet
from .settings import RunOptions, Settings
from .state import SampleSlots, Slots, Stepper, WorkingBatch, derangement, initial_inputs, resume, save_checkpoint


def evaluate(front_fn: Callable, x: torch.Tensor, target: torch.Tensor, tnorm: torch.Tensor) -> torch.Tensor:
    """Relative errors (B,) of ``front_fn(x)`` against flattened targets (B, A) with norms (B,)."""
    act = front_fn(x)
    if not isinstance(act, torch.Tensor):
        raise TypeError(f"front_fn must return a tensor, got {type(act).__name__}")
    act = act.reshape(act.shape[0], -1)
    return torch.linalg.vector_norm(act - target, dim=1) / tnorm


class Run:
    """One optimisation run (see the module docstring)."""

    def __init__(self, front_fn: Callable, seeds: torch.Tensor, settings: Settings, options: RunOptions,
                 backend: Backend, device: torch.device) -> None:
        self.front_fn, self.seeds, self.settings, self.backend, self.device = front_fn, seeds, settings, backend, device
        self.compiled = options.compile
        self.grad_fn = compile_front(front_fn) if options.compile else front_fn   # the fwd+bwd evaluations
        self.graphs = 0   # graphs TorchDynamo compiled during this run's evaluations
        self.source = options.source   # hands out the seeds (global indices) as slots free up; None: all of ``rows``
        rows = options.sample_range if options.sample_range is not None else range(int(seeds.shape[0]))
        if rows.step != 1 or rows.start < 0 or rows.stop > int(seeds.shape[0]) or len(rows) == 0:
            raise ValueError(f"sample_range must be a non-empty contiguous range within 0..{int(seeds.shape[0])}, "
                             f"got {rows}")
        # global index (in ``seeds``) of each local sample: one rank's share under torch.distributed
        self.rows = np.arange(rows.start, rows.stop, dtype=np.int64) if self.source is None else np.zeros(0, np.int64)
        self.n = len(self.rows)
        self.shape = tuple(seeds.shape[1:])
        self.dim = int(np.prod(self.shape))
        self.capacity = min(int(options.batch_size), self.n if self.source is None else int(seeds.shape[0]))
        self.dtype = seeds.dtype
        self.progress, self.callback = options.progress, options.callback
        self.profile = options.profile and device.type == "cuda"
        self.checkpoint_path = os.fspath(options.checkpoint_path) if options.checkpoint_path is not None else None
        self.checkpoint_every = options.checkpoint_every
        self.donors = derangement(int(seeds.shape[0]), settings.seed) if settings.init == "shuffle" else None
        self.np_dtype = np.float64 if self.dtype == torch.float64 else np.float32
        self.stepper: Stepper = LbfgsStepper(self) if settings.optimizer == "lbfgs" else AdamStepper(self)
        # bfloat16 evaluations far from tol (``mixed.py``); None: every evaluation in the front's own dtype
        self.mixed = (MixedPrecision(self, options.lowp_fn or front_fn, options.grad16)
                      if settings.precision == "bfloat16" else None)
        self.out_x = torch.empty(self.n, self.dim, dtype=self.dtype, device=seeds.device)
        self.out_err = np.full(self.n, np.nan)
        self.out_steps = np.zeros(self.n, dtype=np.int64)
        self.next_pending = self.finished = self.step = self.evals = 0
        self.t_front = self.t_update = self.t_manage = self.t_target = self.t_compile = 0.0

    def _sync(self) -> None:
        if self.profile:
            torch.cuda.synchronize(self.device)

    def alloc(self) -> None:
        """Allocate the working batch for ``self.capacity`` slots."""
        with torch.no_grad():
            act_dim = int(self.front_fn(self.seeds[:1].to(self.device)).reshape(1, -1).shape[1])
        self.samples = SampleSlots.allocate(self.capacity, self.dim, act_dim, self.device, self.dtype)
        self.stepper.allocate(self.capacity, self.dim)
        groups: list[Slots] = [self.samples, self.stepper.slots]
        if self.mixed is not None:
            self.mixed.allocate(self.capacity)
            groups.append(self.mixed.slots)
        self.work = WorkingBatch(groups, self.device)

    # -- slots ------------------------------------------------------------------------------------

    def _targets(self, idx: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """The flattened activations (B, A) of the seeds ``idx`` (local indices) and the seeds (B, ...)."""
        seeds = self.seeds[torch.as_tensor(self.rows[idx], device=self.seeds.device)].to(self.device)
        self._sync()
        t0 = time.perf_counter()
        with torch.no_grad():
            act = self.front_fn(seeds)
            if not isinstance(act, torch.Tensor):
                raise TypeError(f"front_fn must return a tensor, got {type(act).__name__}")
            act = act.reshape(len(idx), -1).to(self.dtype)
        self._sync()
        self.t_target += time.perf_counter() - t0
        bad = ~torch.isfinite(act).all(dim=1)
        if bool(bad.any()):
            bad_seeds = self.rows[idx][bad.cpu().numpy()].tolist()
            raise FloatingPointError(f"the model's activation is NaN/inf for seed(s) {bad_seeds}")
        return act, seeds

    def claim(self, k: int) -> None:
        """Take up to ``k`` more seeds from ``self.source`` (the shared counter of the ranks)."""
        new = np.asarray(self.source.claim(k), dtype=np.int64)
        if len(new) == 0:
            return
        self.rows = np.concatenate([self.rows, new])
        self.n = len(self.rows)
        self.out_x = torch.cat([self.out_x, self.out_x.new_empty(len(new), self.dim)])
        self.out_err = np.concatenate([self.out_err, np.full(len(new), np.nan)])
        self.out_steps = np.concatenate([self.out_steps, np.zeros(len(new), dtype=np.int64)])

    def fill(self, slots: np.ndarray) -> int:
        """Load the next pending seeds into ``slots`` (as many as are pending); returns how many."""
        if self.source is not None and self.n - self.next_pending < len(slots):
            self.claim(len(slots) - (self.n - self.next_pending))
        take = min(len(slots), self.n - self.next_pending)
        if take <= 0:
            return 0
        slots = slots[:take]
        idx = np.arange(self.next_pending, self.next_pending + take)
        self.next_pending += take
        w = self.samples
        sl = torch.as_tensor(slots, device=self.device)
        act, seeds = self._targets(idx)
        x0 = initial_inputs(self.seeds, self.rows[idx], self.settings, self.donors).reshape(take, -1).to(self.device)
        w.x[sl] = x0
        w.best[sl] = x0
        w.target[sl] = act
        w.tnorm[sl] = torch.linalg.vector_norm(act, dim=1).clamp_min(torch.finfo(self.dtype).tiny)
        w.sample[slots] = idx
        w.t[slots] = 0
        w.best_err[slots] = np.inf
        self.stepper.init_slots(slots, sl)
        if self.mixed is not None:
            self.mixed.init_slots(slots, seeds, act)
        return take

    def _retire(self, rows: np.ndarray) -> None:
        """Write finished rows out, refill them from the pending seeds, and compact the active slots."""
        w = self.samples
        samples = w.sample[rows]
        r = torch.as_tensor(rows, device=self.device)
        self.out_x[torch.as_tensor(samples, device=self.out_x.device)] = w.best[r].to(self.out_x.device)
        self.out_err[samples] = w.best_err[rows]
        self.out_steps[samples] = w.t[rows]
        self.finished += len(rows)
        w.sample[rows] = -1
        self.fill(rows)
        empty = np.sort(rows[w.sample[rows] < 0])   # no pending work: move the last active rows into the holes
        if len(empty):
            work = self.work
            k = work.active
            keep = np.arange(k)[w.sample[:k] >= 0]
            tail = keep[keep >= k - len(empty)]
            holes = empty[empty < k - len(empty)]
            work.move(tail[: len(holes)], holes)
            work.active = k - len(empty)
            w.sample[work.active:k] = -1

    # -- one step -----------------------------------------------------------------------------------

    def _evaluate(self, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Errors (k,) and their input gradients (k, D) at the active slots' iterates (one fwd+bwd each)."""
        w = self.samples
        if self.mixed is not None and self.mixed.any_low(k):
            err, grad = self.mixed.evaluate(k, lambda fn, rows: self._grad_at(fn, rows, k))
        else:
            err, grad = self._grad_at(None, None, k)
        finite = (torch.isfinite(grad.sum(dim=1)) & torch.isfinite(err)).cpu().numpy()
        if not finite.all():
            bad = sorted(self.rows[w.sample[:k][~finite]].tolist())
            raise FloatingPointError(
                f"the model produced NaN/inf errors or gradients for seed(s) {bad} "
                f"at their step(s) {sorted(set(w.t[:k][~finite].tolist()))}; check the model for operations without "
                "a gradient at these inputs (e.g. sqrt(0), log(0)) or lower lr")
        return err.detach(), grad

    def _grad_at(self, fn: Callable | None, rows: np.ndarray | None, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Errors and input gradients of ``fn`` (None: the run's front) at the slots ``rows`` (None: the first
        ``k``, read in place): ((B,), (B, D)) for B rows."""
        w = self.samples
        if rows is None:
            x, target, tnorm = w.x[:k], w.target[:k], w.tnorm[:k]
        else:
            r = torch.as_tensor(rows, device=self.device)
            x, target, tnorm = w.x[r], w.target[r], w.tnorm[r]
        n = x.shape[0]
        xk = x.reshape(n, *self.shape).detach().requires_grad_(True)
        graphs, t0 = (compiled_graphs(), time.perf_counter()) if self.compiled else (0, 0.0)
        try:
            with torch.enable_grad():
                err = evaluate(fn or self.grad_fn, xk, target, tnorm)
                (grad,) = torch.autograd.grad(err.sum(), xk)
        except Exception as exc:
            failure = compile_failure(exc) if self.compiled else None
            if failure is not None:
                raise failure from exc
            raise
        new_graphs = compiled_graphs() - graphs if self.compiled else 0
        if new_graphs:   # this evaluation compiled: warm-up
            self.graphs += new_graphs
            self.t_compile += time.perf_counter() - t0
        grad = grad.reshape(n, -1)
        if not grad.is_contiguous():
            grad = grad.contiguous()
        return err, grad

    def batch_step(self) -> None:
        """Evaluate every active slot once, update it, retire finished samples."""
        w, s = self.samples, self.settings
        k = self.work.active
        self._sync()
        t0 = time.perf_counter()
        err, grad = self._evaluate(k)
        err_h = err.double().cpu().numpy()
        self._sync()
        t1 = time.perf_counter()
        self.evals += k
        improved = err_h < w.best_err[:k]
        w.best_err[:k] = np.where(improved, err_h, w.best_err[:k])
        converged = w.best_err[:k] <= s.tol
        if self.mixed is not None:   # bfloat16 errors steer, but only float32 ones may stop a sample
            converged &= self.mixed.counts_as_converged(k)
        done = converged | (w.t[:k] >= s.steps)
        self.stepper.step(k, err, err_h, grad, improved, done)
        w.t[:k] += ~done      # finished samples keep the count of steps they used
        if self.mixed is not None:
            self.mixed.after_step(k, err_h, done)
        self._sync()
        t2 = time.perf_counter()
        target_before = self.t_target
        self.stepper.after_step(k, done)
        rows = np.flatnonzero(done)
        if len(rows):
            self._retire(rows)
        self.step += 1
        t3 = time.perf_counter()
        self.t_front += t1 - t0
        self.t_update += t2 - t1
        self.t_manage += t3 - t2 - (self.t_target - target_before)

    # -- driver -------------------------------------------------------------------------------------

    def _info(self, start: float) -> dict:
        return {"step": self.step, "active": self.work.active, "finished": self.finished,
                "pending": self.n - self.next_pending, "median_error": self.median_error(),
                "sample_steps": self.evals, "elapsed_s": time.perf_counter() - start}

    def run(self) -> IRISet:
        """Run to completion (resuming from the checkpoint when there is one) and return the IRIs."""
        start = time.perf_counter()
        self.alloc()
        resumed = resume(self)
        if not resumed:
            self.work.active = self.fill(np.arange(self.capacity))
        total = self.n if self.source is None else None   # a rank taking from the shared queue: open-ended
        bar = progress_bar(progress=self.progress, total=total, desc="IRIs", unit="iri", initial=self.finished,
                           dynamic_ncols=True)
        last_post = 0.0
        try:
            while self.work.active > 0:
                before = self.finished
                self.batch_step()
                if self.checkpoint_every and self.step % self.checkpoint_every == 0 and self.work.active > 0:
                    save_checkpoint(self)
                bar.update(self.finished - before)
                if not bar.disable and time.perf_counter() - last_post > 0.5:
                    self._postfix(bar)
                    last_post = time.perf_counter()
                if self.callback is not None:
                    self.callback(self._info(start))
            if not bar.disable:
                self._postfix(bar)
        finally:
            bar.close()
        if self.checkpoint_path is not None and os.path.exists(self.checkpoint_path):
            os.remove(self.checkpoint_path)
        return self._result(time.perf_counter() - start, resumed)

    def median_error(self) -> float:
        """Median over all N samples of their best error so far (pending samples count as infinite)."""
        errs = self.out_err.copy()
        k = self.work.active
        errs[self.samples.sample[:k]] = self.samples.best_err[:k]
        errs[np.isnan(errs)] = np.inf
        return float(np.median(errs))

    def _postfix(self, bar: Any) -> None:
        done = self.out_err[~np.isnan(self.out_err)]
        k = self.work.active
        current = np.concatenate([done, self.samples.best_err[:k][np.isfinite(self.samples.best_err[:k])]])
        mixed = self.mixed
        low = {} if mixed is None else {"bf16": mixed.in_low(k),
                                        "to_f32": ", ".join(f"{n} {why}" for why, n in mixed.switched.items()),
                                        "f32_fallback": mixed.to_float32}
        bar.set_postfix(converged=int((done <= self.settings.tol).sum()), pending=self.n - self.next_pending,
                        median=f"{np.median(current):.3g}" if len(current) else "-", **low, refresh=False)

    def _result(self, wall: float, resumed: bool) -> IRISet:
        x = self.out_x.reshape(self.n, *self.shape)
        seeds = self.seeds[torch.as_tensor(self.rows, device=self.seeds.device)]
        diff = (x.double() - seeds.to(x.device).double()).reshape(self.n, self.dim)
        dist = diff.pow(2).mean(dim=1).sqrt().cpu()
        stats = {"wall_s": wall, "front_s": self.t_front, "target_s": self.t_target, "update_s": self.t_update,
                 "manage_s": self.t_manage, "batch_steps": self.step, "sample_steps": self.evals,
                 "backend": self.backend.name, "batch_size": self.capacity, "resumed": resumed,
                 "restarts": self.stepper.restarts, "rejected_trials": self.stepper.rejected,
                 "compiled": self.compiled,
                 "compiled_graphs": self.graphs, "compile_s": self.t_compile, "precision": self.settings.precision,
                 **(self.mixed.stats() if self.mixed is not None else {})}
        if self.source is not None:   # which seeds this rank took (the sharded caller places them)
            stats["rows"] = self.rows.copy()
        return IRISet(x, torch.from_numpy(self.out_err.copy()), torch.from_numpy(self.out_steps.copy()), dist,
                      self.settings.as_dict(), stats)
