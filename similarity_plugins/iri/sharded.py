"""IRI generation sharded over the ranks of a :class:`~similarity_plugins.core.parallel.World`.

Each rank optimises the contiguous share ``world.shard(N)`` of the seeds (continuous batching within the
share) with ``optimize_iris(..., sample_range=share)``; since a sample's randomness derives from (seed, global
index) and the "shuffle" derangement is over all N seeds, the gathered set is the single-process set (equal
bit for bit when each sample's float operations do not depend on which samples share its batch; CPU kernels
may round 1 ulp differently for other batch compositions). The shares are gathered on every rank in rank
order; rank 0 alone writes the cache file, once, atomically, after the gather; checkpoints are per rank.

``generate_iris`` calls :func:`optimize`, :func:`agreed_hit` and :func:`save_once`; in one process they
reduce to a plain ``optimize_iris`` call, the local cache hit and a plain save.
"""

from __future__ import annotations

import hashlib
from typing import Any, Callable

import torch

from ..core.parallel import World, current_world, module_digest
from .result import IRISet

__all__ = ["optimize", "agreed_hit", "save_once", "rank_checkpoint_path"]


def rank_checkpoint_path(path: str | None, world: World) -> str | None:
    """The checkpoint file of this rank's share: ``path`` in one process, ``path.rank{r}of{W}`` otherwise."""
    if path is None or not world.distributed:
        return path
    return f"{path}.rank{world.rank}of{world.size}"


def agreed_hit(hit: Any, world: World | None = None) -> bool:
    """True when the cache lookup hit on every rank (all ranks then load; otherwise all ranks compute)."""
    world = world or current_world()
    found = hit is not None
    if not world.distributed:
        return found
    return all(world.exchange(lambda: found, "IRI cache lookup"))


def save_once(save: Callable[..., None], *args: Any, world: World | None = None) -> None:
    """``save(*args)`` on rank 0 only; every rank returns once the file is in place (or all raise its error)."""
    world = world or current_world()
    world.exchange(lambda: save(*args) if world.is_main else None, "writing the IRI cache")


def optimize(optimize_iris: Callable[..., IRISet], front_fn: Callable, seeds: torch.Tensor, *,
             model: torch.nn.Module | None = None, checkpoint_path: str | None = None, progress: bool = True,
             world: World | None = None, **kwargs: Any) -> IRISet:
    """``optimize_iris(front_fn, seeds, **kwargs)`` with the seeds sharded over the ranks, gathered on all.

    ``seeds``: (N, ...) all seeds on every rank; ``model``: the model behind ``front_fn``, whose weights
    (with the seeds) must be the same on every rank (checked first: a mismatch raises on every rank).
    Returns the IRISet of all N seeds on every rank (inputs on the seeds' device); ``stats`` adds ``ranks``
    and the per-rank ``rank_wall_s``. A failure on one rank raises the same
    :class:`~similarity_plugins.core.parallel.CollectiveError` on every rank.
    """
    world = world or current_world()
    if not world.distributed:
        return optimize_iris(front_fn, seeds, checkpoint_path=checkpoint_path, progress=progress, **kwargs)
    world.check_same("IRI model weights and seeds", _digest(model, seeds))
    rows = world.shard(len(seeds))

    def local() -> dict | None:
        if len(rows) == 0:  # more ranks than seeds: this rank has no share
            return None
        part = optimize_iris(front_fn, seeds, sample_range=rows, progress=progress and world.is_main,
                             checkpoint_path=rank_checkpoint_path(checkpoint_path, world), **kwargs)
        return {"state": part.to_state(), "stats": dict(part.stats)}

    parts = [p for p in world.exchange(local, "IRI generation") if p is not None]
    return _combine(parts, seeds.device, world.size)


def _digest(model: torch.nn.Module | None, seeds: torch.Tensor) -> tuple[str, str, tuple[int, ...]]:
    weights = module_digest([model]) if model is not None else ""
    data = hashlib.sha256(seeds.detach().contiguous().cpu().numpy().tobytes()).hexdigest()
    return weights, data, tuple(seeds.shape)


def _combine(parts: list[dict], device: torch.device, ranks: int) -> IRISet:
    states = [p["state"] for p in parts]
    stats = [p["stats"] for p in parts]
    cat = lambda name: torch.cat([s[name] for s in states])  # noqa: E731
    summed = {k: sum(int(s.get(k, 0)) for s in stats) for k in ("sample_steps", "restarts")}
    combined_stats = {
        "wall_s": max(float(s.get("wall_s", 0.0)) for s in stats), "rank_wall_s": [s.get("wall_s") for s in stats],
        "batch_steps": max(int(s.get("batch_steps", 0)) for s in stats), **summed, "ranks": ranks,
        "backend": stats[0].get("backend"), "batch_size": stats[0].get("batch_size"),
        "resumed": any(bool(s.get("resumed")) for s in stats),
        "compiled": bool(stats[0].get("compiled", False)),
        "compiled_graphs": sum(int(s.get("compiled_graphs", 0)) for s in stats),
        "compile_s": max(float(s.get("compile_s", 0.0)) for s in stats),
    }
    return IRISet(cat("inputs").to(device), cat("rel_error"), cat("steps"), cat("seed_distance"),
                  dict(states[0]["settings"]), combined_stats)
