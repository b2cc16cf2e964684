"""The batched IRI optimiser on a plain callable: ``optimize_iris(front_fn, seeds, ...)``.

Every sample carries its own state (step count, optimiser state, best iterate, best error, done flag).
The working batch has a fixed number of slots; when a sample finishes (error <= ``tol`` or budget spent)
its best iterate is written out and the next pending seed takes its slot, so the batch stays full until
the work runs out, after which the batch shrinks (active slots are kept contiguous, so the front always
runs on one dense slice).

A sample's trajectory depends only on its seed, its index in the seed set and the settings, never on the
batch size or on its neighbours (the front must treat samples independently: eval mode, which
``generate_iris`` guarantees). Up to floating-point differences of batched convolutions, the IRIs are the
same for any ``batch_size``.

Layout: ``settings.py`` (options, defaults, validation), ``starts.py`` (starting points, seed checks),
``work.py`` (per-slot state), ``run.py`` (the loop, continuous batching), ``checkpoint.py``,
``lbfgs.py`` (the default optimiser), ``first_order.py`` + ``update.py`` (Adam, normgrad) and
``backends.py`` (NumPy / CuPy / torch for the elementwise kernels).
"""

from __future__ import annotations

import os
from typing import Any, Callable

import numpy as np
import torch

from .backends import resolve_backend
from .checkpoint import CHECKPOINT_VERSION
from .compiled import check_compile
from .result import IRISet
from .run import Run
from .settings import (
    ADVANCED,
    DEFAULT_CYCLE_STEPS,
    DEFAULT_LR,
    DEFAULT_OPTIMIZER,
    DEFAULT_SCHEDULE,
    INITS,
    OPTIMIZERS,
    Settings,
    make_settings,
)
from .starts import check_seeds, derangement, initial_inputs, sample_rng

_check_seeds = check_seeds   # the name other modules used before the split
_sample_rng = sample_rng

__all__ = ["ADVANCED", "CHECKPOINT_VERSION", "DEFAULT_CYCLE_STEPS", "DEFAULT_LR", "DEFAULT_OPTIMIZER",
           "DEFAULT_SCHEDULE", "INITS", "OPTIMIZERS", "Settings", "check_seeds", "derangement", "initial_inputs",
           "make_settings", "optimize_iris"]


def _check_run_options(settings: Settings, batch_size: Any, checkpoint_path: Any, checkpoint_every: Any) -> None:
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size <= 0:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    if checkpoint_every is not None and (isinstance(checkpoint_every, bool) or checkpoint_every <= 0
                                         or checkpoint_path is None):
        raise ValueError("checkpoint_every needs a positive step count and a checkpoint path (generate_iris: cache_dir)")
    if settings.optimizer == "lbfgs" and (settings.cycle_steps or settings.restart_patience or settings.lr_adapt):
        raise ValueError("cycle_steps, restart_patience and lr_adapt apply to optimizer='adam' or 'normgrad'; L-BFGS "
                         "restarts and sizes its steps on its own (max_backtracks, its line search); drop them or "
                         "pass optimizer='adam'")


def optimize_iris(front_fn: Callable[[torch.Tensor], torch.Tensor], seeds: torch.Tensor, *, steps: int = 1000,
                  tol: float = 1e-2, optimizer: str = DEFAULT_OPTIMIZER, lr: float | None = None,
                  init: str = "noise", batch_size: int = 128, backend: str = "auto", seed: int = 0,
                  progress: bool = True, device: torch.device | str | None = None,
                  checkpoint_path: str | os.PathLike | None = None, checkpoint_every: int | None = None,
                  callback: Callable[[dict], None] | None = None, profile: bool = False,
                  settings: Settings | None = None, sample_range: range | None = None, compile: bool = False,
                  **advanced: Any) -> IRISet:
    """Find IRIs for ``seeds`` under ``front_fn``: inputs ``x'`` in [0, 1] with ``front_fn(x') ~= front_fn(x)``.

    ``front_fn``: maps a batch (B, ...) on ``device`` to activations (B, ...); it must treat samples
    independently and be differentiable in its input. ``seeds``: (N, ...) float in [0, 1] (any device).
    Each sample minimises its relative error ``||f(x') - f(x)|| / ||f(x)||`` (flattened activations) from
    ``init`` ("noise": ``0.5 + randn/20`` clipped; "shuffle": another seed of the set, a derangement), and
    stops at ``rel_error <= tol`` or after ``steps`` forward+backward evaluations, returning its best iterate.

    ``optimizer``: "adam" (default; lr 0.2, per-sample cosine cycles of 300, 600, ... steps), "lbfgs"
    (per-sample L-BFGS on ``x = sigmoid(z)`` with a per-sample Armijo line search, ``lr`` 1.0 = the full
    quasi-Newton step; faster at deep layers of ResNet-18, fails on small max-pool CNNs: see ``lbfgs.py``
    and docs/iri_depth.md) or "normgrad" (steps of L2 length ``lr`` in pixel units, default 1.0,
    halved over 4 stages). ``batch_size``: slots in the working batch. ``backend``: array library of the
    elementwise update ("auto", "numpy", "torch", "cupy"; L-BFGS's reductions run in torch on ``device``).

    ``checkpoint_path`` + ``checkpoint_every``: save the full optimiser state atomically every that many
    batch steps and resume from the file if it exists (it is removed when the run completes).
    ``callback(info)`` runs after every batch step (``info``: step, active, finished, pending,
    median_error over all samples with pending ones counted as infinite, sample_steps so far, elapsed_s); an
    exception it raises stops the run (the last checkpoint remains). ``profile``: synchronise CUDA
    around timings so ``stats`` splits time exactly. ``sample_range``: optimise only the seeds with these
    (global) indices, e.g. one rank's share; each sample's randomness still derives from (seed, global
    index) and the "shuffle" derangement is over all N seeds, so the shares of a partition, concatenated,
    are the IRIs of one run (the returned set has ``len(sample_range)`` rows). ``compile``: run the
    forward+backward evaluations through ``torch.compile`` (opt-in: a warm-up of seconds to a minute per run,
    IRIs equal to the eager ones up to float rounding; a run option like ``backend``, not part of the cache
    key; ``stats`` gains ``compiled_graphs`` and ``compile_s``; see ``compiled.py``).

    Advanced options (``ADVANCED``; all part of the cache key):
    - L-BFGS: ``history`` (30 curvature pairs per sample; memory: 2 x history x D floats per slot),
      ``armijo`` (1e-4), ``max_backtracks`` (8
      rejected trials in a row before the sample's history is cleared);
    - first-order: ``schedule`` ("cosine" for Adam, "step" for normgrad, "exp", "constant"), ``lr_floor``,
      ``stages``, ``beta1``, ``beta2``, ``eps``; ``cycle_steps`` (> 0: per-sample cosine cycles restarting
      from the best iterate, each ``cycle_mult`` (2.0) times longer at ``cycle_decay`` (1.0) times the step
      size; default 300 for Adam); ``restart_patience`` (0 = off), ``restart_threshold`` (0.01),
      ``restart_decay`` (0.5): plateau restarts; ``lr_adapt`` (0 = off; in [0, 1)): each sample scales its
      step size by ``1 + lr_adapt * cos(-g, last move)`` before every step and restarts from its best
      iterate once that gain is below 0.05 (``first_order.py``; opt-in: measured in docs/iri_depth.md).

    Returns an :class:`IRISet`. Raises ValueError for bad settings or seeds outside [0, 1],
    FloatingPointError naming the samples when the model yields NaN/inf activations or gradients, and
    RuntimeError naming the fix when ``compile=True`` and torch.compile fails.
    """
    if settings is None:
        settings = make_settings(steps=steps, tol=tol, optimizer=optimizer, lr=lr, init=init, seed=seed, **advanced)
    elif advanced:
        raise TypeError("pass either settings= or individual options, not both")
    check_seeds(seeds)
    _check_run_options(settings, batch_size, checkpoint_path, checkpoint_every)
    device = torch.device(device) if device is not None else seeds.device
    be = resolve_backend(backend, device)
    return Run(front_fn, seeds, settings, int(batch_size), be, device, progress, checkpoint_path,
               checkpoint_every, callback, profile, sample_range, compile=check_compile(compile)).run()
