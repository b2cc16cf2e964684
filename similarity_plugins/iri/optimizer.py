"""The batched IRI optimiser on a plain callable: ``optimize_iris(front_fn, seeds, ...)``.

Every sample carries its own state (step count, Adam moments with their own bias correction, step-size
multiplier, best iterate, best error, done flag). The working batch has a fixed number of slots;
when a sample finishes (error <= ``tol`` or budget spent) its best iterate is written out and the next
pending seed takes its slot, so the batch stays full until the work runs out, after which the batch
shrinks (active slots are kept contiguous, so the front always runs on one dense slice).

A sample's trajectory depends only on its seed, its index in the seed set and the settings, never on the
batch size or on its neighbours (the front must treat samples independently: eval mode, which
``generate_iris`` guarantees). Up to floating-point differences of batched convolutions, the IRIs are the
same for any ``batch_size``.

The update step itself lives in ``update.py`` and runs on an array backend (``backends.py``).
"""

from __future__ import annotations

import math
import os
import time
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import torch

from .backends import Backend, resolve_backend
from .result import IRISet
from .schedule import SCHEDULES, multiplier
from .update import update_kernel

OPTIMIZERS = ("adam", "normgrad")
INITS = ("noise", "shuffle")
# Measured (see benchmarks/bench_iri.py and the iri package docstring): Adam at lr 0.2 with per-sample cosine
# cycles (warm restarts from the best iterate: 300, then 600 steps, capped by the budget) reaches tol 1e-2 in
# far fewer steps than one cosine over the budget on small CNNs (SmallCNN width 32 block3: 261 vs 837 steps
# per sample to a median of 1e-2) and about as fast on ResNet-18 layer4 (700 vs 721); shorter first cycles
# (100) are faster still on small CNNs but miss 1e-2 on ResNet-18 layer4. Adam at lr 0.2 with one cosine
# cycle over the budget beats lr 0.05 by far at deep layers (SmallCNN block3: median 0.08 -> <1e-4).
DEFAULT_LR = {"adam": 0.2, "normgrad": 1.0}
DEFAULT_SCHEDULE = {"adam": "cosine", "normgrad": "step"}
DEFAULT_CYCLE_STEPS = {"adam": 300, "normgrad": 0}
CHECKPOINT_VERSION = 1


@dataclass(frozen=True)
class Settings:
    """Every setting that shapes the result (used for the cache key and saved with the set)."""

    steps: int = 1000
    tol: float = 1e-2
    optimizer: str = "adam"
    lr: float = 0.2
    init: str = "noise"
    seed: int = 0
    schedule: str = "cosine"
    lr_floor: float = 0.0
    stages: int = 4
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    restart_patience: int = 0
    restart_threshold: float = 0.01
    restart_decay: float = 0.5
    cycle_steps: int = 0
    cycle_mult: float = 2.0
    cycle_decay: float = 1.0
    fake_relu: str = "none"

    def as_dict(self) -> dict[str, Any]:
        """The settings as a plain dict (JSON-able; saved with every IRI set)."""
        return dict(self.__dict__)


ADVANCED = ("schedule", "lr_floor", "stages", "beta1", "beta2", "eps", "restart_patience", "restart_threshold",
            "restart_decay", "cycle_steps", "cycle_mult", "cycle_decay")


def make_settings(*, steps: int, tol: float, optimizer: str, lr: float | None, init: str, seed: int,
                  fake_relu: bool | str = False, **advanced: Any) -> Settings:
    """Validate the public options and fill per-optimiser defaults; raises ValueError naming the fix."""
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps <= 0:
        raise ValueError(f"steps must be a positive integer (the per-sample step budget), got {steps!r}")
    if not isinstance(tol, (int, float)) or not math.isfinite(tol) or tol <= 0:
        raise ValueError(f"tol must be a positive number (relative representation error, e.g. 1e-2), got {tol!r}")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {optimizer!r}; choose one of {', '.join(OPTIMIZERS)}")
    if init not in INITS:
        raise ValueError(f"unknown init {init!r}; choose 'noise' (0.5 + randn/20) or 'shuffle' (another seed)")
    unknown = sorted(set(advanced) - set(ADVANCED))
    if unknown:
        raise TypeError(f"unknown option(s) {', '.join(unknown)}; advanced options are: {', '.join(ADVANCED)}")
    lr = DEFAULT_LR[optimizer] if lr is None else lr
    if not isinstance(lr, (int, float)) or not math.isfinite(lr) or lr <= 0:
        raise ValueError(f"lr must be a positive number, got {lr!r}")
    advanced.setdefault("schedule", DEFAULT_SCHEDULE[optimizer])
    advanced.setdefault("cycle_steps", DEFAULT_CYCLE_STEPS[optimizer])
    if advanced["schedule"] not in SCHEDULES:
        raise ValueError(f"unknown schedule {advanced['schedule']!r}; choose one of {', '.join(SCHEDULES)}")
    modes = {True: "last", False: "none", None: "none", "last": "last", "all": "all", "none": "none"}
    if not isinstance(fake_relu, (bool, str, type(None))) or fake_relu not in modes:
        raise ValueError(f"fake_relu must be True/'last' (straight-through gradient at the last ReLU before the "
                         f"cut), 'all' (every ReLU) or False/'none'; got {fake_relu!r}")
    _check_advanced(advanced)
    settings = Settings(steps=int(steps), tol=float(tol), optimizer=optimizer, lr=float(lr), init=init,
                        seed=int(seed), fake_relu=modes[fake_relu], **advanced)
    return settings


# name -> (kind, test, what the value must be); checked before a run starts, so a typo fails at once
_ADVANCED_RULES: dict[str, tuple[type, Callable[[float], bool], str]] = {
    "lr_floor": (float, lambda v: 0.0 <= v <= 1.0, "a multiplier in [0, 1]"),
    "stages": (int, lambda v: v >= 1, "an integer >= 1"),
    "beta1": (float, lambda v: 0.0 <= v < 1.0, "in [0, 1)"),
    "beta2": (float, lambda v: 0.0 <= v < 1.0, "in [0, 1)"),
    "eps": (float, lambda v: v > 0.0, "> 0"),
    "restart_patience": (int, lambda v: v >= 0, "an integer >= 0 (0 turns restarts off)"),
    "restart_threshold": (float, lambda v: 0.0 <= v < 1.0, "a relative improvement in [0, 1)"),
    "restart_decay": (float, lambda v: v > 0.0, "a step-size factor > 0"),
    "cycle_steps": (int, lambda v: v >= 0, "an integer >= 0 (0: one cycle over the budget)"),
    "cycle_mult": (float, lambda v: v >= 1.0, "a growth factor >= 1"),
    "cycle_decay": (float, lambda v: v > 0.0, "a step-size factor > 0"),
}


def _check_advanced(advanced: dict[str, Any]) -> None:
    """Raise ValueError naming the option, its value and the valid range for a bad advanced option."""
    for name, (kind, ok, want) in _ADVANCED_RULES.items():
        if name not in advanced:
            continue
        value = advanced[name]
        valid_type = (isinstance(value, (int, np.integer)) if kind is int
                      else isinstance(value, (int, float, np.number)))
        if isinstance(value, bool) or not valid_type or not math.isfinite(float(value)) or not ok(value):
            raise ValueError(f"{name} must be {want}, got {value!r}")
        advanced[name] = kind(value)


# ------------------------------------------------------------------------------------------ init


def _sample_rng(seed: int, index: int) -> np.random.Generator:
    """The random stream of one sample: a function of (seed, sample index) only."""
    return np.random.default_rng(np.random.SeedSequence([int(seed) & 0xFFFFFFFF, int(index)]))


def derangement(n: int, seed: int) -> np.ndarray:
    """A random permutation of ``range(n)`` without fixed points (Sattolo's cycle), fixed by ``seed``."""
    if n < 2:
        raise ValueError(f"init='shuffle' starts each IRI from another seed image, which needs >= 2 seeds; got {n}; "
                         "use init='noise'")
    rng = np.random.default_rng(np.random.SeedSequence([int(seed) & 0xFFFFFFFF, 0x5EED]))
    perm = np.arange(n)
    for i in range(n - 1, 0, -1):
        j = int(rng.integers(0, i))
        perm[i], perm[j] = perm[j], perm[i]
    return perm


def initial_inputs(seeds: torch.Tensor, indices: Sequence[int], settings: Settings,
                   donors: np.ndarray | None) -> torch.Tensor:
    """Starting points for the samples ``indices``: (len(indices), ...) in [0, 1], on the seeds' device/dtype."""
    shape = tuple(seeds.shape[1:])
    if settings.init == "shuffle":
        assert donors is not None
        return seeds[torch.as_tensor(donors[np.asarray(indices)], device=seeds.device)].clone()
    noise = np.stack([_sample_rng(settings.seed, i).standard_normal(shape, dtype=np.float32) for i in indices])
    x = 0.5 + torch.from_numpy(noise).to(dtype=seeds.dtype) / 20.0
    return x.clamp_(0.0, 1.0).to(seeds.device)


# ----------------------------------------------------------------------------------------- state


class _Work:
    """Working-batch state: (capacity, D) tensors on the compute device plus per-slot host vectors."""

    def __init__(self, capacity: int, dim: int, act_dim: int, device: torch.device, dtype: torch.dtype,
                 adam: bool) -> None:
        z = lambda d: torch.zeros(capacity, d, device=device, dtype=dtype)  # noqa: E731
        self.x, self.best, self.target = z(dim), z(dim), z(act_dim)
        self.m = z(dim) if adam else None
        self.v = z(dim) if adam else None
        self.tnorm = torch.ones(capacity, device=device, dtype=dtype)
        self.sample = np.full(capacity, -1, dtype=np.int64)
        self.t = np.zeros(capacity, dtype=np.int64)          # steps taken (budget count)
        self.t_adam = np.zeros(capacity, dtype=np.int64)     # steps since the moments were last reset
        self.cycle_start = np.zeros(capacity, dtype=np.int64)
        self.cycle_len = np.zeros(capacity, dtype=np.int64)  # length of the current schedule cycle
        self.scale = np.ones(capacity, dtype=np.float64)     # per-sample step-size multiplier (restarts)
        self.best_err = np.full(capacity, np.inf)
        self.ref_err = np.full(capacity, np.inf)             # best error at the last "real" improvement
        self.since = np.zeros(capacity, dtype=np.int64)      # steps since a real improvement
        self.active = 0

    TENSORS = ("x", "best", "target", "m", "v", "tnorm")
    HOST = ("sample", "t", "t_adam", "cycle_start", "cycle_len", "scale", "best_err", "ref_err", "since")

    def move(self, src: np.ndarray, dst: np.ndarray) -> None:
        """Copy slots ``src`` into slots ``dst`` (used to keep active slots contiguous)."""
        if len(src) == 0:
            return
        s = torch.as_tensor(src, device=self.x.device)
        d = torch.as_tensor(dst, device=self.x.device)
        for name in self.TENSORS:
            t = getattr(self, name)
            if t is not None:
                t[d] = t[s]
        for name in self.HOST:
            a = getattr(self, name)
            a[dst] = a[src]

    def state(self) -> dict[str, Any]:
        k = self.active
        out: dict[str, Any] = {"active": k}
        for name in self.TENSORS:
            t = getattr(self, name)
            out[name] = None if t is None else t[:k].detach().cpu().clone()
        for name in self.HOST:
            out[name] = torch.from_numpy(getattr(self, name)[:k].copy())
        return out

    def load_state(self, state: dict[str, Any]) -> None:
        k = int(state["active"])
        self.active = k
        for name in self.TENSORS:
            t = getattr(self, name)
            if t is not None and state[name] is not None:
                t[:k] = state[name].to(t.device, t.dtype)
        for name in self.HOST:
            getattr(self, name)[:k] = state[name].numpy()


# ------------------------------------------------------------------------------------- optimiser


def _rel_error(front_fn: Callable, x: torch.Tensor, target: torch.Tensor, tnorm: torch.Tensor) -> torch.Tensor:
    act = front_fn(x)
    if not isinstance(act, torch.Tensor):
        raise TypeError(f"front_fn must return a tensor, got {type(act).__name__}")
    act = act.reshape(act.shape[0], -1)
    return torch.linalg.vector_norm(act - target, dim=1) / tnorm


def _check_seeds(seeds: torch.Tensor) -> None:
    if not isinstance(seeds, torch.Tensor):
        raise TypeError(f"seeds must be a tensor (N, ...), got {type(seeds).__name__}")
    if seeds.ndim < 2 or seeds.shape[0] == 0:
        raise ValueError(f"seeds must be a non-empty batch (N, ...), got shape {tuple(seeds.shape)}")
    if not seeds.is_floating_point():
        raise TypeError(f"seeds must be floating point in [0, 1], got dtype {seeds.dtype}")
    if not bool(torch.isfinite(seeds).all()):
        raise ValueError("seeds contain NaN or infinite values; IRIs need finite inputs in [0, 1]")
    lo, hi = float(seeds.min()), float(seeds.max())
    if lo < 0.0 or hi > 1.0:
        raise ValueError(f"seeds must lie in [0, 1] (pixel space; normalisation belongs inside the model), "
                         f"got values in [{lo:.4g}, {hi:.4g}]; rescale them, e.g. x / 255 or (x - x.min()) / (x.max() - x.min())")


def optimize_iris(front_fn: Callable[[torch.Tensor], torch.Tensor], seeds: torch.Tensor, *, steps: int = 1000,
                  tol: float = 1e-2, optimizer: str = "adam", lr: float | None = None, init: str = "noise",
                  batch_size: int = 128, backend: str = "auto", seed: int = 0, progress: bool = True,
                  device: torch.device | str | None = None, checkpoint_path: str | os.PathLike | None = None,
                  checkpoint_every: int | None = None, callback: Callable[[dict], None] | None = None,
                  profile: bool = False, settings: Settings | None = None, sample_range: range | None = None,
                  **advanced: Any) -> IRISet:
    """Find IRIs for ``seeds`` under ``front_fn``: inputs ``x'`` in [0, 1] with ``front_fn(x') ~= front_fn(x)``.

    ``front_fn``: maps a batch (B, ...) on ``device`` to activations (B, ...); it must treat samples
    independently and be differentiable in its input. ``seeds``: (N, ...) float in [0, 1] (any device).
    Each sample minimises its relative error ``||f(x') - f(x)|| / ||f(x)||`` (flattened activations) from
    ``init`` ("noise": ``0.5 + randn/20`` clipped; "shuffle": another seed of the set, a derangement)
    with ``optimizer`` ("adam", default lr 0.2, per-sample cosine cycles of 300, 600, ... steps;
    "normgrad": normalised-gradient steps of L2 length ``lr`` in pixel units, default 1.0, halved over 4
    stages), stopping at ``rel_error <= tol``
    or after ``steps`` steps, and returns its best iterate. ``batch_size``: slots in the working batch.
    ``backend``: array library of the update step ("auto", "numpy", "torch", "cupy").

    ``checkpoint_path`` + ``checkpoint_every``: save the full optimiser state atomically every that many
    batch steps and resume from the file if it exists (it is removed when the run completes).
    ``callback(info)`` runs after every batch step (``info``: step, active, finished, pending,
    median_error over all samples with pending ones counted as infinite, sample_steps so far, elapsed_s); an
    exception it raises stops the run (the last checkpoint remains). ``profile``: synchronise CUDA
    around timings so ``stats`` splits time exactly. ``sample_range``: optimise only the seeds with these
    (global) indices, e.g. one rank's share; each sample's randomness still derives from (seed, global
    index) and the "shuffle" derangement is over all N seeds, so the shares of a partition, concatenated,
    are the IRIs of one run (the returned set has ``len(sample_range)`` rows).

    Advanced options (``ADVANCED``; all part of the cache key):
    - ``schedule``: "cosine" (Adam's default), "exp", "step" (normgrad's default: halved over ``stages``
      stages, default 4) or "constant"; ``lr_floor``: final multiplier of "cosine"/"exp" (default 0);
    - ``beta1``, ``beta2``, ``eps``: Adam's (0.9, 0.999, 1e-8);
    - ``cycle_steps``: > 0 runs per-sample cosine cycles (warm restarts from the best iterate with fresh
      moments) of ``cycle_steps`` steps, each ``cycle_mult`` (2.0) times longer, at a step size times
      ``cycle_decay`` (1.0), never past the budget; default 300 for Adam, 0 (one cycle over the budget)
      for normgrad;
    - ``restart_patience`` (0 = off), ``restart_threshold`` (0.01), ``restart_decay`` (0.5): a sample whose
      best error has not improved by ``restart_threshold`` (relative) for that many steps restarts from its
      best iterate with fresh moments and ``restart_decay`` times the step size.

    Returns an :class:`IRISet`. Raises ValueError for bad settings or seeds outside [0, 1] and
    FloatingPointError naming the samples when the model yields NaN/inf activations or gradients.
    """
    if settings is None:
        settings = make_settings(steps=steps, tol=tol, optimizer=optimizer, lr=lr, init=init, seed=seed, **advanced)
    elif advanced:
        raise TypeError("pass either settings= or individual options, not both")
    _check_seeds(seeds)
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size <= 0:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    if checkpoint_every is not None and (checkpoint_every <= 0 or checkpoint_path is None):
        raise ValueError("checkpoint_every needs a positive step count and a checkpoint path (generate_iris: cache_dir)")
    device = torch.device(device) if device is not None else seeds.device
    be = resolve_backend(backend, device)
    return _Run(front_fn, seeds, settings, int(batch_size), be, device, progress, checkpoint_path,
                checkpoint_every, callback, profile, sample_range).run()


class _Run:
    """One optimisation run (split out so the loop's pieces stay small)."""

    def __init__(self, front_fn: Callable, seeds: torch.Tensor, settings: Settings, batch_size: int, backend: Backend,
                 device: torch.device, progress: bool, checkpoint_path: Any, checkpoint_every: int | None,
                 callback: Callable | None, profile: bool, sample_range: range | None = None) -> None:
        self.front_fn, self.seeds, self.s, self.backend, self.device = front_fn, seeds, settings, backend, device
        rows = sample_range if sample_range is not None else range(int(seeds.shape[0]))
        if rows.step != 1 or rows.start < 0 or rows.stop > int(seeds.shape[0]) or len(rows) == 0:
            raise ValueError(f"sample_range must be a non-empty contiguous range within 0..{int(seeds.shape[0])}, got {rows}")
        self.offset = rows.start  # global index of local sample 0
        self.n = len(rows)
        self.shape = tuple(seeds.shape[1:])
        self.dim = int(np.prod(self.shape))
        self.capacity = min(batch_size, self.n)
        self.dtype = seeds.dtype
        self.progress, self.callback, self.profile = progress, callback, profile and device.type == "cuda"
        self.checkpoint_path = os.fspath(checkpoint_path) if checkpoint_path is not None else None
        self.checkpoint_every = checkpoint_every
        self.donors = derangement(int(seeds.shape[0]), settings.seed) if settings.init == "shuffle" else None
        self.kernel = update_kernel(backend, settings.optimizer, (settings.beta1, settings.beta2, settings.eps)
                                    if settings.optimizer == "adam" else ())
        self.np_dtype = np.float64 if self.dtype == torch.float64 else np.float32
        # outputs (on the seeds' device)
        self.out_x = torch.empty(self.n, self.dim, dtype=self.dtype, device=seeds.device)
        self.out_err = np.full(self.n, np.nan)
        self.out_steps = np.zeros(self.n, dtype=np.int64)
        self.next_pending = 0
        self.finished = 0
        self.step = 0
        self.t_front = self.t_update = self.t_manage = self.t_target = 0.0
        self.evals = 0
        self.restarts = 0

    # -- slots ------------------------------------------------------------------------------------

    def _sync(self) -> None:
        if self.profile:
            torch.cuda.synchronize(self.device)

    def _fill(self, slots: np.ndarray) -> None:
        """Load the next pending seeds into ``slots`` (as many as are pending)."""
        take = min(len(slots), self.n - self.next_pending)
        if take <= 0:
            return
        slots = slots[:take]
        idx = np.arange(self.next_pending, self.next_pending + take)
        self.next_pending += take
        w = self.w
        sl = torch.as_tensor(slots, device=self.device)
        seeds = self.seeds[torch.as_tensor(idx + self.offset, device=self.seeds.device)].to(self.device)
        self._sync()
        t0 = time.perf_counter()
        with torch.no_grad():
            act = self.front_fn(seeds)
            if not isinstance(act, torch.Tensor):
                raise TypeError(f"front_fn must return a tensor, got {type(act).__name__}")
            act = act.reshape(take, -1).to(self.dtype)
        self._sync()
        self.t_target += time.perf_counter() - t0
        bad = ~torch.isfinite(act).all(dim=1)
        if bool(bad.any()):
            bad_seeds = (idx + self.offset)[bad.cpu().numpy()].tolist()
            raise FloatingPointError(f"the model's activation is NaN/inf for seed(s) {bad_seeds}")
        x0 = initial_inputs(self.seeds, idx + self.offset, self.s, self.donors).reshape(take, -1).to(self.device)
        w.x[sl] = x0
        w.best[sl] = x0
        w.target[sl] = act
        w.tnorm[sl] = torch.linalg.vector_norm(act, dim=1).clamp_min(torch.finfo(self.dtype).tiny)
        if w.m is not None:
            w.m[sl] = 0
            w.v[sl] = 0
        w.sample[slots] = idx
        first = self.s.cycle_steps if self.s.cycle_steps > 0 else self.s.steps
        for name, value in (("t", 0), ("t_adam", 0), ("cycle_start", 0), ("cycle_len", min(first, self.s.steps)),
                            ("scale", 1.0), ("best_err", np.inf), ("ref_err", np.inf), ("since", 0)):
            getattr(w, name)[slots] = value

    def _retire(self, rows: np.ndarray) -> None:
        """Write finished rows out, refill them from the pending seeds, and compact the active slots."""
        w = self.w
        samples = w.sample[rows]
        r = torch.as_tensor(rows, device=self.device)
        self.out_x[torch.as_tensor(samples, device=self.out_x.device)] = w.best[r].to(self.out_x.device)
        self.out_err[samples] = w.best_err[rows]
        self.out_steps[samples] = w.t[rows]
        self.finished += len(rows)
        w.sample[rows] = -1
        self._fill(rows)
        # slots still empty (no pending work): move the last active rows into them
        empty = np.sort(rows[w.sample[rows] < 0])
        if len(empty):
            k = w.active
            keep = np.arange(k)[w.sample[:k] >= 0]
            tail = keep[keep >= k - len(empty)]                   # active rows in the region being vacated
            holes = empty[empty < k - len(empty)]                 # holes below that region
            w.move(tail[: len(holes)], holes)
            w.active = k - len(empty)
            w.sample[w.active:k] = -1

    # -- one step -----------------------------------------------------------------------------------

    def _columns(self, k: int, improved: np.ndarray) -> tuple:
        w, s = self.w, self.s
        lr = s.lr * w.scale[:k] * multiplier(s.schedule, w.t[:k] - w.cycle_start[:k], np.maximum(w.cycle_len[:k], 1),
                                             floor=s.lr_floor, stages=s.stages)
        col = lambda a: self.backend.column(np.ascontiguousarray(a, dtype=self.np_dtype), self.device)  # noqa: E731
        if s.optimizer == "adam":
            ta = (w.t_adam[:k] + 1).astype(np.float64)
            return col(improved), col(lr), col(1.0 - s.beta1 ** ta), col(1.0 - s.beta2 ** ta)
        return col(improved), col(lr)

    def _step(self) -> None:
        w, s, be = self.w, self.s, self.backend
        k = w.active
        self._sync()
        t0 = time.perf_counter()
        xk = w.x[:k].reshape(k, *self.shape).detach().requires_grad_(True)
        with torch.enable_grad():
            err = _rel_error(self.front_fn, xk, w.target[:k], w.tnorm[:k])
            (grad,) = torch.autograd.grad(err.sum(), xk)
        grad = grad.reshape(k, -1)
        if not grad.is_contiguous():
            grad = grad.contiguous()
        finite = torch.isfinite(grad.sum(dim=1)) & torch.isfinite(err)
        err_h = err.detach().double().cpu().numpy()
        self._sync()
        t1 = time.perf_counter()
        if not bool(finite.all()):
            bad = w.sample[:k][~finite.cpu().numpy()] + self.offset
            raise FloatingPointError(
                f"the model produced NaN/inf errors or gradients for seed(s) {sorted(bad.tolist())} at their step(s) "
                f"{sorted(set(w.t[:k][~finite.cpu().numpy()].tolist()))}; check the model for operations without a "
                "gradient at these inputs (e.g. sqrt(0), log(0)) or lower lr")
        self.evals += k
        improved = err_h < w.best_err[:k]
        real = err_h < w.ref_err[:k] * (1.0 - s.restart_threshold)
        w.best_err[:k] = np.where(improved, err_h, w.best_err[:k])
        w.ref_err[:k] = np.where(real, err_h, w.ref_err[:k])
        w.since[:k] = np.where(real, 0, w.since[:k] + 1)
        done = (w.best_err[:k] <= s.tol) | (w.t[:k] >= s.steps)
        with be.stream(self.device):
            x, g, best = be.view(w.x[:k]), be.view(grad), be.view(w.best[:k])
            if s.optimizer == "adam":
                imp, lr, bc1, bc2 = self._columns(k, improved)
                self.kernel(x, g, be.view(w.m[:k]), be.view(w.v[:k]), best, imp, lr, bc1, bc2)
            else:
                imp, lr = self._columns(k, improved)
                step = lr / be.xp.maximum(be.xp.row_norm(g), 1e-30)
                self.kernel(x, g, best, imp, step)
        w.t[:k] += ~done      # finished samples keep the count of steps they used
        w.t_adam[:k] += 1
        self._sync()
        t2 = time.perf_counter()
        target_before = self.t_target
        if s.restart_patience or s.cycle_steps:
            self._restarts(k, done)
        rows = np.flatnonzero(done)
        if len(rows):
            self._retire(rows)
        self.step += 1
        t3 = time.perf_counter()
        self.t_front += t1 - t0
        self.t_update += t2 - t1
        self.t_manage += t3 - t2 - (self.t_target - target_before)

    def _restarts(self, k: int, done: np.ndarray) -> None:
        """Per-sample restarts: a sample whose schedule cycle ended (``cycle_steps``) or that is stuck for
        ``restart_patience`` steps goes back to its best iterate with fresh Adam moments and starts a new
        cycle (``cycle_mult`` times longer, never past its budget) at a step size scaled by ``cycle_decay``
        (cycle end) or ``restart_decay`` (plateau)."""
        w, s = self.w, self.s
        active = ~done & (w.t[:k] < s.steps)
        ended = active & (w.t[:k] - w.cycle_start[:k] >= w.cycle_len[:k]) if s.cycle_steps else np.zeros(k, bool)
        stuck = active & ~ended & (w.since[:k] >= s.restart_patience) if s.restart_patience else np.zeros(k, bool)
        rows = np.flatnonzero(ended | stuck)
        if len(rows) == 0:
            return
        r = torch.as_tensor(rows, device=self.device)
        w.x[r] = w.best[r]
        if w.m is not None:
            w.m[r] = 0
            w.v[r] = 0
        w.t_adam[rows] = 0
        remaining = s.steps - w.t[rows]
        grown = np.ceil(w.cycle_len[rows] * s.cycle_mult).astype(np.int64)
        w.cycle_len[rows] = np.where(ended[rows], np.minimum(grown, remaining), remaining)
        w.cycle_start[rows] = w.t[rows]
        w.scale[rows] *= np.where(ended[rows], s.cycle_decay, s.restart_decay)
        w.since[rows] = 0
        w.ref_err[rows] = w.best_err[rows]
        self.restarts += len(rows)

    # -- checkpoints --------------------------------------------------------------------------------

    def _save_checkpoint(self) -> None:
        from .cache import atomic_save

        state = {
            "version": CHECKPOINT_VERSION, "settings": self.s.as_dict(), "n": self.n, "capacity": self.capacity,
            "offset": self.offset,
            "work": self.w.state(), "next_pending": self.next_pending, "finished": self.finished, "step": self.step,
            "out_x": self.out_x.detach().cpu(), "out_err": torch.from_numpy(self.out_err.copy()),
            "out_steps": torch.from_numpy(self.out_steps.copy()), "evals": self.evals, "restarts": self.restarts,
        }
        atomic_save(state, self.checkpoint_path)

    def _try_resume(self) -> bool:
        if self.checkpoint_path is None or not os.path.exists(self.checkpoint_path):
            return False
        from .cache import load_file

        state = load_file(self.checkpoint_path)
        if (state is None or state.get("version") != CHECKPOINT_VERSION or state.get("settings") != self.s.as_dict()
                or state.get("n") != self.n or state.get("offset", 0) != self.offset):
            warnings.warn(f"ignoring checkpoint {self.checkpoint_path}: it belongs to another run", stacklevel=3)
            return False
        if state["capacity"] != self.capacity:
            warnings.warn(f"resuming with the checkpoint's batch size {state['capacity']} (asked {self.capacity})",
                          stacklevel=3)
            self.capacity = int(state["capacity"])
            self._alloc()
        self.w.load_state(state["work"])
        self.next_pending, self.finished, self.step = state["next_pending"], state["finished"], state["step"]
        self.evals = state.get("evals", 0)
        self.restarts = state.get("restarts", 0)
        self.out_x.copy_(state["out_x"].to(self.out_x.device, self.out_x.dtype))
        self.out_err[:] = state["out_err"].numpy()
        self.out_steps[:] = state["out_steps"].numpy()
        return True

    # -- driver -------------------------------------------------------------------------------------

    def _alloc(self) -> None:
        probe = self.seeds[:1].to(self.device)
        with torch.no_grad():
            act_dim = int(self.front_fn(probe).reshape(1, -1).shape[1])
        self.w = _Work(self.capacity, self.dim, act_dim, self.device, self.dtype, self.s.optimizer == "adam")

    def run(self) -> IRISet:
        from tqdm.auto import tqdm

        start = time.perf_counter()
        self._alloc()
        resumed = self._try_resume()
        if not resumed:
            self.w.active = self.capacity
            self._fill(np.arange(self.capacity))
        bar = tqdm(total=self.n, disable=not self.progress, desc="IRIs", unit="iri", initial=self.finished,
                   dynamic_ncols=True)
        last_post = 0.0
        try:
            while self.w.active > 0:
                before = self.finished
                self._step()
                if self.checkpoint_every and self.step % self.checkpoint_every == 0 and self.w.active > 0:
                    self._save_checkpoint()
                if self.finished != before:
                    bar.update(self.finished - before)
                now = time.perf_counter()
                if self.progress and now - last_post > 0.5:
                    self._postfix(bar)
                    last_post = now
                if self.callback is not None:
                    self.callback({"step": self.step, "active": self.w.active, "finished": self.finished,
                                   "pending": self.n - self.next_pending, "median_error": self.median_error(),
                                   "sample_steps": self.evals, "elapsed_s": time.perf_counter() - start})
            if self.progress:
                self._postfix(bar)
        finally:
            bar.close()
        if self.checkpoint_path is not None and os.path.exists(self.checkpoint_path):
            os.remove(self.checkpoint_path)
        return self._result(time.perf_counter() - start, resumed)

    def median_error(self) -> float:
        """Median over all N samples of their best error so far (pending samples count as infinite)."""
        errs = self.out_err.copy()
        k = self.w.active
        errs[self.w.sample[:k]] = self.w.best_err[:k]
        errs[np.isnan(errs)] = np.inf
        return float(np.median(errs))

    def _postfix(self, bar: Any) -> None:
        done = self.out_err[~np.isnan(self.out_err)]
        k = self.w.active
        current = np.concatenate([done, self.w.best_err[:k][np.isfinite(self.w.best_err[:k])]])
        bar.set_postfix(converged=int((done <= self.s.tol).sum()), pending=self.n - self.next_pending,
                        median=f"{np.median(current):.3g}" if len(current) else "-", refresh=False)

    def _result(self, wall: float, resumed: bool) -> IRISet:
        x = self.out_x.reshape(self.n, *self.shape)
        seeds = self.seeds[self.offset:self.offset + self.n]
        diff = (x.double() - seeds.to(x.device).double()).reshape(self.n, -1)
        dist = diff.pow(2).mean(dim=1).sqrt().cpu()
        stats = {"wall_s": wall, "front_s": self.t_front, "target_s": self.t_target, "update_s": self.t_update,
                 "manage_s": self.t_manage,
                 "batch_steps": self.step, "sample_steps": self.evals, "backend": self.backend.name,
                 "batch_size": self.capacity, "resumed": resumed, "restarts": self.restarts}
        return IRISet(x, torch.from_numpy(self.out_err.copy()), torch.from_numpy(self.out_steps.copy()), dist,
                      self.s.as_dict(), stats)
