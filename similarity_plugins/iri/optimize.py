"""The batched IRI optimiser on a plain callable: ``optimize_iris(front_fn, seeds, settings, options)``.

`Settings` say what the IRIs are (every field shapes the result and is part of the cache key);
`RunOptions` say how the run executes (batch size, backend, device, checkpoints, callbacks). ``run.Run`` is
the loop.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import torch

from ..utils.memory import kept_heap
from .backends import check_compile, resolve_backend
from .precision import choose_precision
from .result import IRISet
from .run import Run
from .settings import RunOptions, Settings
from .state import check_seeds


def optimize_iris(front_fn: Callable[[torch.Tensor], torch.Tensor], seeds: torch.Tensor,
                  settings: Settings | None = None, options: RunOptions | None = None) -> IRISet:
    """Find IRIs for ``seeds`` under ``front_fn``: inputs ``x'`` in [0, 1] with ``front_fn(x') ~= front_fn(x)``.

    Each sample minimises its relative error ``||f(x') - f(x)|| / ||f(x)||`` (flattened activations) from
    ``settings.init`` ("noise": ``0.5 + randn/20`` clipped; "shuffle": another seed of the set, a
    derangement), and stops at ``rel_error <= settings.tol`` or after ``settings.steps`` forward+backward
    evaluations, returning its best iterate. A sample's trajectory depends only on its seed, its index and
    the settings, never on the batch it shares.

    Args:
        front_fn: maps a batch (B, ...) on the run's device to activations (B, ...); it must treat samples
            independently and be differentiable in its input.
        seeds: (N, ...) float in [0, 1], on any device.
        settings: what to run, e.g. ``Settings.of("lbfgs", steps=500, tuning={"lr": 0.5})``
            ([`Settings.of`][similarity_plugins.iri.Settings.of]; None: ``Settings.of()``, the Adam
            preset). ``settings.precision == "auto"`` is resolved here: bfloat16 evaluations far from ``tol`` where
            the device has bfloat16 matrix units and the front does enough work per sample (``precision.py``).
        options: how to run it ([`RunOptions`][similarity_plugins.iri.RunOptions]; None: the defaults).

    Returns:
        An [`IRISet`][IRISet] whose ``settings`` are the resolved ones.

    Raises:
        ValueError: bad settings, or seeds outside [0, 1].
        FloatingPointError: the model yields NaN/inf activations or gradients (naming the samples).
        RuntimeError: ``options.compile`` is set and torch.compile fails (naming the fix).
    """
    settings = settings if settings is not None else Settings.of()
    options = options if options is not None else RunOptions()
    if not isinstance(settings, Settings):
        raise TypeError(f"settings must be an iri Settings (Settings.of(...)), got {type(settings).__name__}")
    if not isinstance(options, RunOptions):
        raise TypeError(f"options must be an iri RunOptions (RunOptions(batch_size=...)), got {type(options).__name__}")
    check_seeds(seeds)
    device = torch.device(options.device) if options.device is not None else seeds.device
    if settings.precision == "auto":
        used, _, grad16 = choose_precision("auto", front_fn, seeds, device)
        settings = dataclasses.replace(settings, precision=used)
        options = dataclasses.replace(options, grad16=options.grad16 and grad16)
    run = Run(front_fn, seeds, settings, dataclasses.replace(options, compile=check_compile(options.compile)),
              resolve_backend(options.backend, device), device)
    with kept_heap():   # every batch step frees and reallocates the same activations: keep the pages
        return run.run()
