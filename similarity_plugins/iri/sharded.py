"""IRI generation sharded over the ranks of a [`World`][similarity_plugins.networks.parallel.World].

Seeds are handed out as the ranks' working batches free up (`SeedQueue`: a counter in the group's
store; blocks of the batch size, at most ``min(batch_size, ceil(N / ranks))`` seeds; guided self-scheduling:
each claim takes at most ``ceil(remaining / ranks)`` blocks), so a slow rank takes fewer seeds and no rank
waits long for another; ``optimize_iris`` with ``RunOptions(source=queue)`` runs the usual
continuous batching over whatever the rank claims. Since a sample's randomness derives from (seed, global
index) and the "shuffle" derangement is over all N seeds, the gathered set is the single-process set
whichever rank ran which seed (equal bit for bit when each sample's float operations do not depend on which
samples share its batch; CPU kernels may round 1 ulp differently for other batch compositions). The parts
are gathered on every rank and placed by global index; rank 0 alone writes the cache file, once,
atomically, after the gather.

Checkpoints are per rank (``path.rank{r}of{W}``) and record the global indices the rank had claimed. On a
restart with the same number of ranks, the ranks exchange which seeds their checkpoints hold; each resumes
its own, and the queue hands out only the seeds that no checkpoint holds (those claimed after a rank's last
checkpoint are simply run again).

``generate_iris`` calls `optimize`, `agreed_hit` and `save_once`; in one process they
reduce to a plain ``optimize_iris`` call, the local cache hit and a plain save.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
import uuid
from typing import Any, Callable

import numpy as np
import torch

from ..networks.parallel import World, current_world, module_digest
from .result import IRISet
from .settings import RunOptions, Settings
from .state import checkpoint_rows


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


class SeedQueue:
    """The seeds ``free`` (global indices, the same array on every rank) handed out to ``ranks`` ranks in blocks of
    ``block`` consecutive entries, from the shared counter ``add`` ([`World.counter`][World.counter], counting blocks).

    ``claim(k)`` returns this rank's next seeds: the blocks that cover ``k`` seeds, but at most
    ``ceil(remaining blocks / ranks)`` (guided self-scheduling: no rank hoards the tail while another runs dry).
    With ``block`` the working batch size, a rank's batches hold the same seeds in the same slots as the one
    process's when the samples of a block finish together (a fixed budget), so the set is then bit for bit the
    one-process set.
    """

    def __init__(self, free: np.ndarray, add: Callable[[int], int], ranks: int, block: int = 1) -> None:
        self.free, self.add, self.ranks = np.asarray(free, dtype=np.int64), add, max(1, int(ranks))
        self.block = max(1, int(block))
        self.blocks = -(-len(self.free) // self.block)
        self.out = self.blocks == 0   # every seed handed out: no more store calls
        self.claims = 0               # store round trips this rank made

    def claim(self, k: int) -> np.ndarray:
        """Up to about ``k`` more seeds for this rank (whole blocks; global indices; empty when all are taken)."""
        if self.out or k <= 0:
            return np.zeros(0, np.int64)
        remaining = self.blocks - self.add(0)
        want = min(-(-int(k) // self.block), -(-remaining // self.ranks)) if remaining > 0 else 0
        start = self.add(want) if want > 0 else self.blocks
        self.claims += 2 if want > 0 else 1
        if start + want >= self.blocks:
            self.out = True
        return self.free[start * self.block:(start + want) * self.block]


def optimize(optimize_iris: Callable[..., IRISet], front_fn: Callable, seeds: torch.Tensor, settings: Settings,
             options: RunOptions, *, model: torch.nn.Module | None = None, world: World | None = None) -> IRISet:
    """``optimize_iris(front_fn, seeds, settings, options)`` with the seeds shared out over the ranks
    (`SeedQueue`), gathered on all.

    ``seeds``: (N, ...) all seeds on every rank; ``model``: the model behind ``front_fn``, whose weights
    (with the seeds) must be the same on every rank (checked first: a mismatch raises on every rank).
    Returns the IRISet of all N seeds in seed order on every rank (inputs on the seeds' device); ``stats``
    adds ``ranks``, the per-rank ``rank_wall_s`` and ``rank_seeds`` (how many seeds each rank ran), this rank's
    ``wait_s`` (seconds in the gather: waiting for the slowest rank, and the transfer) and ``claims`` (its store
    round trips). A
    failure on one rank raises the same [`CollectiveError`][similarity_plugins.networks.parallel.CollectiveError] on every rank.
    """
    world = world or current_world()
    if not world.distributed:
        return optimize_iris(front_fn, seeds, settings, options)
    world.check_same("IRI model weights and seeds", _digest(model, seeds))
    mine = rank_checkpoint_path(options.checkpoint_path, world)
    held = world.exchange(lambda: (uuid.uuid4().hex, checkpoint_rows(mine, settings, len(seeds))),
                          "reading the IRI checkpoints")
    taken = np.concatenate([rows for _, rows in held])
    free = np.setdiff1d(np.arange(len(seeds)), taken)
    block = min(int(options.batch_size), -(-len(free) // world.size))   # the one process's batch waves
    queue = SeedQueue(free, world.counter(f"iri/{held[0][0]}"), world.size, block)

    ran = [0.0]

    def local() -> dict:
        start = time.perf_counter()
        mine_options = dataclasses.replace(options, source=queue, progress=options.progress if world.is_main else "never",
                                           checkpoint_path=mine)
        part = optimize_iris(front_fn, seeds, settings, mine_options)
        ran[0] = time.perf_counter() - start
        return {"state": part.to_state(), "stats": dict(part.stats)}

    start = time.perf_counter()
    parts = world.exchange(local, "IRI generation")
    iris = _combine(parts, seeds, world.size)
    iris.stats["wait_s"] = time.perf_counter() - start - ran[0]   # this rank, in the gather: the others' lag
    iris.stats["claims"] = queue.claims
    return iris


def _digest(model: torch.nn.Module | None, seeds: torch.Tensor) -> tuple[str, str, tuple[int, ...]]:
    weights = module_digest([model]) if model is not None else ""
    data = hashlib.sha256(seeds.detach().contiguous().cpu().numpy().tobytes()).hexdigest()
    return weights, data, tuple(seeds.shape)


def _combine(parts: list[dict], seeds: torch.Tensor, ranks: int) -> IRISet:
    """The ranks' parts placed by global index into one set of all ``len(seeds)`` seeds."""
    rows = np.concatenate([p["stats"]["rows"] for p in parts])
    if not np.array_equal(np.sort(rows), np.arange(len(seeds))):   # a bug, never a user error
        raise RuntimeError(f"the ranks' IRI shares do not cover the {len(seeds)} seeds exactly once")
    order = torch.from_numpy(np.argsort(rows, kind="stable"))
    states = [p["state"] for p in parts]
    stats = [p["stats"] for p in parts]
    cat = lambda name: torch.cat([s[name].cpu() for s in states])[order]  # noqa: E731
    summed = {k: sum(int(s.get(k, 0)) for s in stats) for k in ("sample_steps", "restarts")}
    combined_stats = {
        "wall_s": max(float(s.get("wall_s", 0.0)) for s in stats), "rank_wall_s": [s.get("wall_s") for s in stats],
        "rank_seeds": [len(s["rows"]) for s in stats],
        "batch_steps": max(int(s.get("batch_steps", 0)) for s in stats), **summed, "ranks": ranks,
        "backend": stats[0].get("backend"), "batch_size": stats[0].get("batch_size"),
        "resumed": any(bool(s.get("resumed")) for s in stats),
        "compiled": bool(stats[0].get("compiled", False)),
        "compiled_graphs": sum(int(s.get("compiled_graphs", 0)) for s in stats),
        "compile_s": max(float(s.get("compile_s", 0.0)) for s in stats),
    }
    return IRISet(cat("inputs").to(seeds.device), cat("rel_error"), cat("steps"), cat("seed_distance"),
                  dict(states[0]["settings"]), combined_stats)
