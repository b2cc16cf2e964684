"""The permutation nulls of a whole block of CKA cells at once, from the nodes' centred Gram matrices.

In a grid with ``permutations=K``, every cell of a block (the front model's layers x the end model's layers)
scores the same K permutations of the end's rows. Each null value is ``<K_i, P L_j P^T> / sqrt(<K_i, K_i>
<L_j, L_j>)`` (`cka.permutation`); `block_permuted_inner` computes the numerators of all I x J cells of a
permutation in one pass over the stacked Gram matrices, so a block costs about as much as a few of its cells
tested one by one. The debiased estimator's U-centred matrices differ from the centred ones by a rank-two term and
a diagonal (`cka.nodes.UCentring`), which a permutation moves with the end's rows: its cross terms are a few
length-n dot products per cell and permutation.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..stats.blocks import block_permuted_inner
from ..stats.designs import PermutationPlan
from ..stats.permutation import batch_size
from .nodes import NodeGram, UCentring


def _permuted_cross_terms(a: UCentring, b: UCentring, perms: torch.Tensor, n: int) -> np.ndarray:
    """``<K~, P L~ P^T> - <Kc, P Lc P^T>`` for each permutation (rows of ``perms``): the terms of `nodes._cross_terms`
    with the end's vectors permuted; (K,) float64."""
    p = perms.numpy()
    v, e, rows, diag = b.u[p], b.d[p], b.row_sums[p], b.diag[p]
    u, d = a.u, a.d
    return (2.0 * (v @ a.row_sums) + e @ a.diag + 2.0 * (rows @ u) + diag @ d + 2.0 * n * (v @ u)
            + 2.0 * u.sum() * b.u.sum() + 2.0 * (e @ u) + 2.0 * (v @ d) + e @ d)


def cka_block_nulls(fronts: list[NodeGram], ends: list[NodeGram], plan: PermutationPlan,
                    debiased: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """CKA of every (front, end) pair of a block and its value under each permutation of ``plan``.

    Args:
        fronts: the I front nodes' `NodeGram` (the same n inputs and kernel).
        ends: the J end nodes' `NodeGram`.
        plan: the permutations of the end's rows (`similarity_plugins.stats.designs.PermutationPlan`).
        debiased: the unbiased HSIC estimator (n >= 4).

    Returns:
        ``(observed, null)``: (I, J) float64 CKA of the unpermuted pairing and (K, I, J) float64 null values,
            computed alike (the observed is the identity permutation through the same sums), equal to
            `cka_permutation_test` cell by cell to float64 rounding.

    Raises:
        ValueError: a degenerate debiased self-similarity (as `cka_from_node_grams`).
    """
    n = fronts[0].gram.shape[0]
    if debiased:
        ua, ub = [f.u_centring() for f in fronts], [e.u_centring() for e in ends]
        for node, name in ((ua, "X"), (ub, "Y")):
            for c in node:
                if c.self_hsic <= c.tol:
                    raise ValueError(f"the debiased self-similarity HSIC({name}, {name}) is zero within rounding "
                                     f"({c.self_hsic:.3g}): {name} is degenerate for the unbiased estimator; use "
                                     "debiased=False")
        own = np.array([c.self_hsic for c in ua]), np.array([c.self_hsic for c in ub])
    else:
        own = np.array([f.self_hsic for f in fronts]), np.array([e.self_hsic for e in ends])
    scale = np.sqrt(own[0])[:, None] * np.sqrt(own[1])[None, :]
    block_inner = block_permuted_inner([f.gram for f in fronts], [e.gram for e in ends])

    def values(perms: torch.Tensor) -> np.ndarray:
        inner = block_inner(perms).numpy()
        if debiased:
            for i, a in enumerate(ua):
                for j, b in enumerate(ub):
                    inner[:, i, j] += _permuted_cross_terms(a, b, perms, n)
        return inner / scale

    observed = values(torch.arange(n)[None])[0]
    batch = batch_size(8.0 * n, plan.k)
    null = np.concatenate([values(p) for p in plan.batches(batch)]) if plan.k else np.empty((0, *scale.shape))
    if not np.isfinite(observed).all() or not math.isfinite(float(np.sum(null))):
        raise ValueError("CKA block permutation test: a product under- or overflowed; test the cells one by one")
    return observed, null
