"""Where each sample starts, and the checks on the seeds: all functions of (seed, sample index) only."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from .settings import Settings


def sample_rng(seed: int, index: int) -> np.random.Generator:
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
    noise = np.stack([sample_rng(settings.seed, i).standard_normal(shape, dtype=np.float32) for i in indices])
    x = 0.5 + torch.from_numpy(noise).to(dtype=seeds.dtype) / 20.0
    return x.clamp_(0.0, 1.0).to(seeds.device)


def check_seeds(seeds: torch.Tensor) -> None:
    """Raise TypeError/ValueError naming the fix unless ``seeds`` is a finite float batch (N, ...) in [0, 1]."""
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
