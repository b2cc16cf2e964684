"""One permutation applied to a whole block of matrix pairs at once: ``sum_ab A_i[a, b] B_j[p(a), p(b)]`` for
every front matrix ``A_i`` and end matrix ``B_j`` of a grid's block.

A grid's block of I x J cells of a Gram-matrix measure (CKA, RSA) shares its permutations (`grid_best`). Cell by
cell, every permutation gathers an end matrix's rows and columns again for each front matrix; here the J end
matrices are stacked on a last axis, so one gather of ``p``'s rows and columns fetches all J at once (a gather
costs about the same for J values at one place as for one), and each row block of the I stacked front matrices,
read once per batch of permutations, meets them in one small matrix product. Exact in float64 like
`permuted_inner`, whose single-pair case this is.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from .permutation import upper_blocks


def block_bytes(n: int, fronts: int, ends: int) -> float:
    """Bytes `block_permuted_inner` holds besides its inputs: the stacked matrices and the weighted blocks."""
    return 8.0 * n * n * (ends + fronts)


def block_permuted_inner(fronts: list[np.ndarray], ends: list[np.ndarray]) -> Callable[[torch.Tensor], torch.Tensor]:
    """``sum_ab fronts[i][a, b] ends[j][p(a), p(b)]`` for every permutation ``p`` and every pair (i, j).

    Args:
        fronts: I symmetric (n, n) float64 matrices.
        ends: J symmetric (n, n) float64 matrices.

    Returns:
        A function: (K, n) int64 permutations -> (K, I, J) float64 tensor on the CPU. The matrices are stacked
            once, when this is called: the J end matrices on a last axis (``8 n^2 J`` bytes) and the I front ones in
            weighted row blocks (``8 n^2 I`` bytes at most; `block_bytes`). Per permutation: ``n^2 / 2`` gathers of
            J values and ``n^2 I J / 2`` multiply-adds.
    """
    stacked = _stacked(ends)  # (n, n, J)
    count, width = len(fronts), stacked.shape[-1]
    blocks = [(start, stop, weights.reshape(-1, count).T) for start, stop, weights in upper_blocks(_stacked(fronts))]

    def inner(perms: torch.Tensor) -> torch.Tensor:
        out = np.zeros((len(perms), count, width))
        order = perms.cpu().numpy()
        for start, stop, weights in blocks:
            for k, p in enumerate(order):
                gathered = stacked[p[start:stop]].take(p[start:], axis=1)  # (rows, n - start, J)
                out[k] += weights @ gathered.reshape(-1, width)
        return torch.from_numpy(out)

    return inner


def _stacked(matrices: list[np.ndarray]) -> np.ndarray:
    """The (n, n) matrices stacked on a last axis: (n, n, m) float64 (torch's stack: several times NumPy's here)."""
    return torch.stack([torch.as_tensor(np.asarray(m, dtype=np.float64)) for m in matrices], dim=-1).numpy()
