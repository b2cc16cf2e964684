"""The state of one optimisation run: the working batch's slots, where each sample starts, its step-size
schedule and the checkpoint that saves and restores all of it.

Slot ``i`` of the working batch holds one sample. Every field is indexed by slot first, so moving a sample
between slots (``WorkingBatch.move``) and checkpointing the active slots are generic over fields. A sample's start and
schedule are functions of (seed, sample index, its own step count) only, never of the batch it shares.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from typing import Any, Protocol, Sequence

import numpy as np
import torch

from .settings import Settings

CHECKPOINT_VERSION = 5   # 5: the global index of every sample ("rows"); 4: no Adam phases in L-BFGS, no plateau restarts


def tensor_slots(capacity: int, shape: tuple[int, ...], device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """A per-slot tensor field: (capacity, *shape) zeros on ``device``."""
    return torch.zeros(capacity, *shape, device=device, dtype=dtype)


def host_slots(capacity: int, np_dtype: Any, fill: Any) -> np.ndarray:
    """A per-slot host field: a (capacity,) NumPy vector filled with ``fill``."""
    return np.full(capacity, fill, dtype=np_dtype)


class Slots:
    """A group of per-slot fields: subclasses are dataclasses whose every field is a (capacity, ...) tensor or a
    (capacity,) NumPy vector, indexed by slot first (so moving and checkpointing are generic over the fields)."""

    def arrays(self) -> dict[str, torch.Tensor | np.ndarray]:
        """The fields by name (the checkpoint's keys)."""
        return vars(self)


@dataclass(eq=False)
class SampleSlots(Slots):
    """What every run keeps per slot, whatever its optimiser."""

    x: torch.Tensor          # (capacity, D) the iterate, pixel space
    best: torch.Tensor       # (capacity, D) the best iterate so far
    target: torch.Tensor     # (capacity, A) the seed's flattened activation
    tnorm: torch.Tensor      # (capacity,) its norm
    sample: np.ndarray       # (capacity,) int64 local index of the sample held (-1: empty)
    t: np.ndarray            # (capacity,) int64 the sample's own step count
    best_err: np.ndarray     # (capacity,) float64 its best relative error so far

    @classmethod
    def allocate(cls, capacity: int, dim: int, act_dim: int, device: torch.device, dtype: torch.dtype) -> SampleSlots:
        """Empty slots for ``capacity`` samples of ``dim`` pixels whose activations have ``act_dim`` values."""
        return cls(x=tensor_slots(capacity, (dim,), device, dtype), best=tensor_slots(capacity, (dim,), device, dtype),
                   target=tensor_slots(capacity, (act_dim,), device, dtype), tnorm=tensor_slots(capacity, (), device, dtype),
                   sample=host_slots(capacity, np.int64, -1), t=host_slots(capacity, np.int64, 0),
                   best_err=host_slots(capacity, np.float64, np.inf))


class Stepper(Protocol):
    """An optimiser of the run: owns its per-slot state (``slots``) and turns each evaluation into the next iterate."""

    slots: Slots
    restarts: int    # how often a sample's optimiser state was reset
    rejected: int    # rejected line-search trials (0 for optimisers without one)

    def allocate(self, capacity: int, dim: int) -> None: ...
    def init_slots(self, slots: np.ndarray, sl: torch.Tensor) -> None: ...
    def step(self, k: int, err: torch.Tensor, err_h: np.ndarray, grad: torch.Tensor, improved: np.ndarray,
             done: np.ndarray) -> None: ...
    def after_step(self, k: int, done: np.ndarray) -> None: ...
    def restart_slots(self, rows: np.ndarray) -> None: ...


class WorkingBatch:
    """The slots of a run: its groups of per-slot fields and how many leading slots are active."""

    def __init__(self, groups: Sequence[Slots], device: torch.device) -> None:
        self.groups = tuple(groups)
        self.device = device
        self.active = 0

    def _fields(self) -> list[torch.Tensor | np.ndarray]:
        return [a for group in self.groups for a in group.arrays().values()]

    def move(self, src: np.ndarray, dst: np.ndarray) -> None:
        """Copy slots ``src`` into slots ``dst`` (used to keep active slots contiguous)."""
        if len(src) == 0:
            return
        s = torch.as_tensor(src, device=self.device)
        d = torch.as_tensor(dst, device=self.device)
        for a in self._fields():
            if isinstance(a, torch.Tensor):
                a[d] = a[s]
            else:
                a[dst] = a[src]

    def state(self) -> dict[str, Any]:
        """The active slots' state as CPU tensors (for a checkpoint), keyed by field name."""
        k = self.active
        out: dict[str, Any] = {"active": k}
        for group in self.groups:
            for name, a in group.arrays().items():
                out[name] = (a[:k].detach().cpu().clone() if isinstance(a, torch.Tensor)
                             else torch.from_numpy(a[:k].copy()))
        return out

    def load_state(self, state: dict[str, Any]) -> None:
        """Restore what `state` saved (same fields; capacity at least the saved active count)."""
        k = int(state["active"])
        self.active = k
        for group in self.groups:
            for name, a in group.arrays().items():
                if isinstance(a, torch.Tensor):
                    a[:k] = state[name].to(a.device, a.dtype)
                else:
                    a[:k] = state[name].numpy()


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
        "version": CHECKPOINT_VERSION, "settings": run.settings.as_dict(), "n": run.n, "rows": torch.from_numpy(run.rows.copy()),
        "total": int(run.seeds.shape[0]), "capacity": run.capacity,
        "work": run.work.state(), "next_pending": run.next_pending, "finished": run.finished, "step": run.step,
        "out_x": run.out_x.detach().cpu(), "out_err": torch.from_numpy(run.out_err.copy()),
        "out_steps": torch.from_numpy(run.out_steps.copy()), "evals": run.evals,
        "restarts": run.stepper.restarts, "rejected": run.stepper.rejected,
    }
    atomic_save(state, run.checkpoint_path, "iri-checkpoint")


def resume(run: Any) -> bool:
    """Load ``run.checkpoint_path`` into ``run`` if it exists and belongs to the same run; True if resumed."""
    state = read_checkpoint(run.checkpoint_path, run.settings, int(run.seeds.shape[0]))
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
    run.work.load_state(state["work"])
    run.next_pending, run.finished, run.step = state["next_pending"], state["finished"], state["step"]
    run.evals = state.get("evals", 0)
    run.stepper.restarts = state.get("restarts", 0)
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
