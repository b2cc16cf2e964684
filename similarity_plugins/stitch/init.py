"""Stitch initialisation: least squares (default), identity, random.

Least squares solves ``min_W ||[A, 1] W - B||^2`` in float64, where the rows of ``A`` are A's
activations at cut i (after the planned resize), one row per sample and position ((N*H*W, C_A) for
maps, (N*T, D_A) for tokens), and ``B`` are B's native activations at cut j in the same order.
The minimum-norm solution ``W = pinv([A, 1]) B`` is computed as ``pinv(G) R`` from the Gram matrix
``G = [A,1]^T [A,1]`` and ``R = [A,1]^T B``, accumulated batch by batch, so memory stays
O(C_A^2 + C_A*C_B) however many rows there are (the two are equal: ``pinv(Z) = pinv(Z^T Z) Z^T``).
With ``stitch_bn`` the BatchNorm's running statistics are set to the sample's feature mean and
variance and the solution is expressed in normalised units, so the initial stitch is the same map.
"""

from __future__ import annotations

import torch

from ..networks.parallel import World
from .cache import TrainingCache
from .layer import StitchLayer, fan_in_bound, to_rows


def least_squares_solve(gram: torch.Tensor, cross: torch.Tensor) -> torch.Tensor:
    """Minimum-norm least-squares solution ``pinv(gram) @ cross`` (float64).

    ``gram``: (C+1, C+1) = Z^T Z for the design ``Z = [A, 1]``; ``cross``: (C+1, C_B) = Z^T B.
    Returns (C+1, C_B): the first C rows are ``W^T``, the last row the bias.
    """
    return torch.linalg.pinv(gram, hermitian=True) @ cross


@torch.no_grad()
def least_squares_init(stitch: StitchLayer, cache: TrainingCache, samples: int, generator: torch.Generator,
                       batch_size: int = 256, world: World | None = None) -> dict:
    """Set ``stitch`` to the least-squares map from A's to B's activations on ``samples`` training samples.

    The samples are a random subset drawn with ``generator`` (all of them when fewer). Returns
    ``{"method": "least-squares", "samples": n, "rows": n*P, "relative_error": e}``, where ``e`` is
    ``||[A,1]W - B||^2 / ||B||^2`` over the fitted rows (0 = exact; the DM optimum in closed form).
    With several ranks (``world``), each accumulates the normal equations of its samples (those in
    ``cache.rows``) and one all-reduce sums them, so every rank solves the single-process system.
    """
    n = len(cache)
    idx = torch.randperm(n, generator=generator)[: min(samples, n)].sort().values
    plan = stitch.plan
    c = plan.in_features
    sharded = world is not None and world.distributed
    mine = idx[(idx >= cache.rows.start) & (idx < cache.rows.stop)] if sharded else idx

    def normal_equations() -> torch.Tensor:
        gram = torch.zeros(c + 1, c + 1, dtype=torch.float64)
        cross = torch.zeros(c + 1, plan.out_features, dtype=torch.float64)
        y_sq = torch.zeros(1, dtype=torch.float64)
        target_all = cache.end_cut(mine) if len(mine) else None
        for start in range(0, len(mine), batch_size):
            sel = mine[start:start + batch_size]
            a = stitch.prepare(cache.front(sel).double()).reshape(-1, c)
            b = to_rows(target_all[start:start + batch_size].double(), plan.end_layout).reshape(-1, plan.out_features)
            z = torch.cat([a, torch.ones(len(a), 1, dtype=torch.float64)], dim=1)
            gram += z.T @ z
            cross += z.T @ b
            y_sq += b.pow(2).sum()
        return torch.cat([gram.reshape(-1), cross.reshape(-1), y_sq])

    like = torch.zeros((c + 1) * (c + 1 + plan.out_features) + 1, dtype=torch.float64)
    flat = world.reduce_sum(normal_equations, like, "least-squares init") if sharded else normal_equations()
    gram = flat[:(c + 1) ** 2].reshape(c + 1, c + 1)
    cross = flat[(c + 1) ** 2:-1].reshape(c + 1, plan.out_features)
    y_sq = flat[-1]
    solution = least_squares_solve(gram, cross)
    weight, bias = solution[:c].T, solution[c]  # (C_B, C_A), (C_B,)
    rows = gram[c, c]
    residual = y_sq - 2 * (solution * cross).sum() + (solution * (gram @ solution)).sum()
    rel = float((residual.clamp_min(0) / y_sq.clamp_min(1e-300)).item())
    if stitch.bn is not None:
        mean = gram[c, :c] / rows
        var = (gram.diagonal()[:c] / rows - mean.pow(2)).clamp_min(0)
        scale = torch.sqrt(var + stitch.bn.eps)
        bias = bias + weight @ mean
        weight = weight * scale
        stitch.set_bn_statistics(mean, var)
    stitch.set_affine(weight, bias)
    return {"method": "least-squares", "samples": int(len(idx)), "rows": int(rows.item()), "relative_error": rel}


@torch.no_grad()
def identity_init(stitch: StitchLayer) -> dict:
    """Set the affine map to the identity (zero bias); needs C_A == C_B, else ``ValueError``."""
    plan = stitch.plan
    if plan.in_features != plan.out_features:
        raise ValueError(
            f"init='identity' needs the same number of features on both sides, got {plan.in_features} -> "
            f"{plan.out_features}; use init='least-squares' or init='random'"
        )
    stitch.set_affine(torch.eye(plan.out_features), torch.zeros(plan.out_features))
    return {"method": "identity"}


@torch.no_grad()
def random_init(stitch: StitchLayer, generator: torch.Generator) -> dict:
    """PyTorch's default ``U(-1/sqrt(C_A), 1/sqrt(C_A))`` for weight and bias, drawn from ``generator``."""
    plan = stitch.plan
    bound = fan_in_bound(plan.in_features)
    weight = (torch.rand(plan.out_features, plan.in_features, generator=generator) * 2 - 1) * bound
    bias = (torch.rand(plan.out_features, generator=generator) * 2 - 1) * bound
    stitch.set_affine(weight, bias)
    return {"method": "random"}


def initialise(stitch: StitchLayer, method: str, cache: TrainingCache, generator: torch.Generator,
               samples: int = 2048, batch_size: int = 256, world: World | None = None) -> dict:
    """Initialise ``stitch`` with ``method`` ("least-squares", "identity", "random"); returns a details dict.

    ``world``: several ranks share least squares (see [`least_squares_init`][least_squares_init])."""
    if method == "least-squares":
        return least_squares_init(stitch, cache, samples, generator, batch_size, world=world)
    if method == "identity":
        return identity_init(stitch)
    if method == "random":
        return random_init(stitch, generator)
    raise ValueError(f"unknown init {method!r}; choose least-squares, identity or random")
