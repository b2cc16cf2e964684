"""Orthogonal Procrustes / normalised Bures similarity (Williams et al. 2021's shape metric with alpha = 1)."""

from __future__ import annotations

import math

import torch

from ..utils.arrays import ArrayLike
from .common import Measured, centred, compress_columns, finish, pair

#: With two samples the centred sides are one line each and every pair scores 1: three is the least that means anything.
MIN_SAMPLES = 3
TINY = float(torch.finfo(torch.float64).tiny)


def procrustes(X: ArrayLike, Y: ArrayLike, *, details: bool = False) -> float | Measured:
    """Normalised Bures similarity ``||Xc^T Yc||_* / (||Xc||_F ||Yc||_F)`` of the centred activations.

    This is ``max_Q <Xc, Yc Q> / (||Xc|| ||Yc||)`` over orthogonal Q (the orthogonal Procrustes problem
    after centring and scaling to unit norm), so it is invariant to translation, orthogonal maps and
    isotropic scaling of either side; ``arccos`` of it is Williams et al.'s angular shape distance
    (alpha = 1). One (dx, dy) GEMM and its singular values; with d > n a side is first reduced to n columns
    with the same row inner products (`compress_columns`).

    Args:
        X: (n, dx) array or tensor (higher rank flattens after axis 0).
        Y: (n, dy), the same n inputs.
        details: return a [`Measured`][Measured] with ``angular_distance`` (radians, in [0, pi/2]) and ``n``.

    Returns:
        The similarity in [0, 1] (float), or a [`Measured`][Measured].

    Raises:
        ValueError: bad input (NaN/Inf, rows that differ, fewer than `MIN_SAMPLES` samples) or a constant side.
    """
    x, y = pair(X, Y, "Procrustes", min_n=MIN_SAMPLES)
    return procrustes_from_nodes(procrustes_node(x, "X"), procrustes_node(y, "Y"), details=details)


def procrustes_node(X: ArrayLike, name: str = "X") -> tuple[torch.Tensor, float]:
    """What Procrustes derives from one side, for reuse across many pairs (a grid's node).

    Args:
        X: (n, d) array or tensor.
        name: the argument in errors.

    Returns:
        ``(xc, sum_sq)``: the centred rows with at most n columns (`compress_columns`: the same row inner
            products), float64 (n, min(n, d)), and their squared Frobenius norm.
    """
    x, _ = pair(X, X, "Procrustes", min_n=MIN_SAMPLES)
    xc, sum_sq = centred(x, name, "Procrustes")
    if sum_sq < TINY:  # the rows differ, but their squared spread underflows float64
        raise ValueError(f"Procrustes: {name} is too small for float64 (max |value| = {float(x.abs().max()):.3g}):"
                         f" its squared deviations underflow; rescale it (Procrustes is invariant to isotropic "
                         f"scaling)")
    return compress_columns(xc), sum_sq


def procrustes_from_nodes(a: tuple[torch.Tensor, float], b: tuple[torch.Tensor, float], *,
                          details: bool = False) -> float | Measured:
    """[`procrustes`][procrustes] from two sides' `procrustes_node` (the same n inputs)."""
    (xc, sx), (yc, sy) = a, b
    if xc.shape[0] != yc.shape[0]:
        raise ValueError(f"Procrustes: X has {xc.shape[0]} samples but Y has {yc.shape[0]}; they must be the same "
                         "inputs")
    nuclear = float(torch.linalg.svdvals(xc.T @ yc).sum())
    score = min(1.0, max(0.0, nuclear / (math.sqrt(sx) * math.sqrt(sy))))
    return finish(score, {"n": int(xc.shape[0]), "angular_distance": math.acos(score)}, details)
