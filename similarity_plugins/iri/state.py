"""The state of one optimisation run: the working batch's slots, where each sample starts, its step-size
schedule and the checkpoint that saves and restores all of it.

Slot ``i`` of the working batch holds one sample. Every field is indexed by slot first, so moving a sample
between slots (``Work.move``) and checkpointing the active slots are generic over fields. A sample's start and
schedule are functions of (seed, sample index, its own step count) only, never of the batch it shares.
"""

from __future__ import annotations

import os
import warnings
from typing import Any, Sequence

import numpy as np
import torch

from .settings import Settings

CHECKPOINT_VERSION = 5   # 5: the global index of every sample ("rows"); 4: no Adam phases in L-BFGS, no plateau restarts


class Work:
    """Per-slot state of the working batch.

    ``tensors``: name -> trailing shape, allocated as (capacity, *shape) zeros on ``device``;
    ``host``: name -> (NumPy dtype, fill value), allocated as (capacity,) vectors. Fields are attributes.
    """

    def __init__(self, capacity: int, tensors: dict[str, tuple[int, ...]], host: dict[str, tuple[Any, Any]],
                 device: torch.device, dtype: torch.dtype) -> None:
        self.tensor_names = tuple(tensors)
        self.host_names = tuple(host)
        for name, shape in tensors.items():
            setattr(self, name, torch.zeros(capacity, *shape, device=device, dtype=dtype))
        for name, (np_dtype, fill) in host.items():
            setattr(self, name, np.full(capacity, fill, dtype=np_dtype))
        self.device = device
        self.active = 0

    def move(self, src: np.ndarray, dst: np.ndarray) -> None:
        """Copy slots ``src`` into slots ``dst`` (used to keep active slots contiguous)."""
        if len(src) == 0:
            return
        s = torch.as_tensor(src, device=self.device)
        d = torch.as_tensor(dst, device=self.device)
        for name in self.tensor_names:
            t = getattr(self, name)
            t[d] = t[s]
        for name in self.host_names:
            a = getattr(self, name)
            a[dst] = a[src]

    def state(self) -> dict[str, Any]:
        """The active slots' state as CPU tensors (for a checkpoint)."""
        k = self.active
        out: dict[str, Any] = {"active": k}
        for name in self.tensor_names:
            out[name] = getattr(self, name)[:k].detach().cpu().clone()
        for name in self.host_names:
            out[name] = torch.from_numpy(getattr(self, name)[:k].copy())
        return out

    def load_state(self, state: dict[str, Any]) -> None:
        """Restore what `state` saved (same fields; capacity at least the saved active count)."""
        k = int(state["active"])
        self.active = k
        for name in self.tensor_names:
            t = getattr(self, name)
            t[:k] = state[name].to(t.device, t.dtype)
        for name in self.host_names:
            getattr(self, name)[:k] = state[name].numpy()


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


def cosine(t: np.ndarray, horizon: np.ndarray | int) -> np.ndarray:
    """Step-size multiplier in [0, 1] for samples at step ``t`` of a cosine cycle lasting ``horizon`` steps:
    ``(1 + cos(pi * t / horizon)) / 2``. ``t``: (B,) int, ``horizon``: scalar or (B,) int > 0; returns (B,)
    float64 (host NumPy, so a sample's schedule never depends on its batch)."""
    p = np.clip(np.asarray(t, dtype=np.float64) / np.maximum(np.asarray(horizon, dtype=np.float64), 1.0), 0.0, 1.0)
    return 0.5 * (1.0 + np.cos(np.pi * p))




def save_checkpoint(run: Any) -> None:
    """Save ``run``'s full state (slots, outputs, counters) atomically to ``run.checkpoint_path``."""
    from .store import atomic_save

    state = {
        "version": CHECKPOINT_VERSION, "settings": run.s.as_dict(), "n": run.n, "rows": torch.from_numpy(run.rows.copy()),
        "total": int(run.seeds.shape[0]), "capacity": run.capacity,
        "work": run.w.state(), "next_pending": run.next_pending, "finished": run.finished, "step": run.step,
        "out_x": run.out_x.detach().cpu(), "out_err": torch.from_numpy(run.out_err.copy()),
        "out_steps": torch.from_numpy(run.out_steps.copy()), "evals": run.evals,
        "restarts": run.stepper.restarts, "rejected": getattr(run.stepper, "rejected", 0),
    }
    atomic_save(state, run.checkpoint_path, "iri-checkpoint")


def resume(run: Any) -> bool:
    """Load ``run.checkpoint_path`` into ``run`` if it exists and belongs to the same run; True if resumed."""
    state = read_checkpoint(run.checkpoint_path, run.s, int(run.seeds.shape[0]))
    if state is None:
        return False
    rows = state["rows"].numpy()
    if run.source is None and not np.array_equal(rows, run.rows):
        warnings.warn(f"ignoring checkpoint {run.checkpoint_path}: it belongs to another run", stacklevel=4)
        return False
    if run.source is not None:   # the seeds this rank had taken from the shared counter
        run.rows, run.n = rows.astype(np.int64), len(rows)
        run.out_x = run.out_x.new_empty(run.n, run.dim)
        run.out_err, run.out_steps = np.full(run.n, np.nan), np.zeros(run.n, dtype=np.int64)
    if state["capacity"] != run.capacity:
        warnings.warn(f"resuming with the checkpoint's batch size {state['capacity']} (asked {run.capacity})",
                      stacklevel=4)
        run.capacity = int(state["capacity"])
        run.alloc()
    run.w.load_state(state["work"])
    run.next_pending, run.finished, run.step = state["next_pending"], state["finished"], state["step"]
    run.evals = state.get("evals", 0)
    run.stepper.restarts = state.get("restarts", 0)
    if hasattr(run.stepper, "rejected"):
        run.stepper.rejected = state.get("rejected", 0)
    run.out_x.copy_(state["out_x"].to(run.out_x.device, run.out_x.dtype))
    run.out_err[:] = state["out_err"].numpy()
    run.out_steps[:] = state["out_steps"].numpy()
    return True


def read_checkpoint(path: str | None, settings: Settings, total: int) -> dict | None:
    """The checkpoint at ``path`` when it exists and belongs to a run of ``settings`` over ``total`` seeds
    (warning and None otherwise: a damaged file, another run's or an older version's)."""
    if path is None or not os.path.exists(path):
        return None
    from .store import load_file

    state = load_file(path, "iri-checkpoint")   # a damaged file: None, warned "corrupt"
    if state is None:
        return None
    if (state.get("version") != CHECKPOINT_VERSION or state.get("settings") != settings.as_dict()
            or state.get("total") != total):
        warnings.warn(f"ignoring checkpoint {path}: it belongs to another run", stacklevel=4)
        return None
    return state


def checkpoint_rows(path: str | None, settings: Settings, total: int) -> np.ndarray:
    """The global indices of the seeds held in the checkpoint at ``path`` (empty when it would not resume)."""
    state = read_checkpoint(path, settings, total)
    return np.zeros(0, np.int64) if state is None else state["rows"].numpy().astype(np.int64)
