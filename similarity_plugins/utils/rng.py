"""Random state at the boundary: ``compare`` seeds inside forked generators and leaves the caller's as they were."""

from __future__ import annotations

import contextlib
import numbers
import random
from typing import Any, Iterator

import numpy as np
import torch

#: The share of the rows that `drawn_split` holds out for testing.
TEST_FRACTION = 0.2

#: Seeds are whole numbers in [lo, hi): what every generator seeded from one (torch, NumPy, ``random``) takes.
SEED_RANGE = (-(2**63), 2**63)


def _cuda_devices(device: torch.device | None) -> list[int]:
    """CUDA devices whose generators may be touched: all of them when CUDA is in use, none otherwise."""
    if not torch.cuda.is_available():
        return []
    if (device is not None and device.type == "cuda") or torch.cuda.is_initialized():
        return list(range(torch.cuda.device_count()))
    return []


@contextlib.contextmanager
def isolated_rng(device: torch.device | None = None) -> Iterator[bool]:
    """Run the block with the torch (CPU and, when in use, CUDA), NumPy and ``random`` states saved and
    restored on exit, even when the block raises. Yields whether the CUDA generators are included."""
    python_state = random.getstate()
    numpy_state = np.random.get_state()
    devices = _cuda_devices(device)
    try:
        with torch.random.fork_rng(devices=devices):
            yield bool(devices)
    finally:
        random.setstate(python_state)
        np.random.set_state(numpy_state)


def check_seed(seed: Any, name: str = "seed") -> int:
    """``seed`` as an ``int``: a whole number (Python or NumPy integer, not a bool) in `SEED_RANGE`;
    ``TypeError``/``ValueError`` naming ``name`` otherwise (``2.5``, ``"1"``, ``True``, ``None``, ``2**70``)."""
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise TypeError(f"{name} must be a whole number (an int), got {type(seed).__name__} {seed!r}")
    lo, hi = SEED_RANGE
    if not lo <= int(seed) < hi:
        raise ValueError(f"{name} must lie in [-2**63, 2**63) (a 64-bit integer), got {seed}")
    return int(seed)


def seed_all(seed: int, cuda: bool = False) -> None:
    """Seed torch's CPU generator (and every CUDA one when ``cuda``), NumPy's global and ``random``'s."""
    seed = int(seed)
    if cuda:
        torch.manual_seed(seed)
    else:
        torch.default_generator.manual_seed(seed)
    np.random.seed(seed % 2**32)
    random.seed(seed)


def drawn_split(n: int, seed: int) -> dict[str, torch.Tensor]:
    """The documented split of ``n >= 2`` rows for metrics that need a train split when none is given (``score``,
    ``functional.streamed``): test = the first ``max(1, round(n * TEST_FRACTION))`` entries of
    ``torch.randperm(n)`` seeded with ``seed``, train = the rest, both sorted (int64 index tensors)."""
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(int(seed)))
    n_test = min(n - 1, max(1, round(n * TEST_FRACTION)))
    return {"train": perm[n_test:].sort().values, "test": perm[:n_test].sort().values}
