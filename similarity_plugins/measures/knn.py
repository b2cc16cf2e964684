"""Mutual k-nearest-neighbour alignment (Huh et al. 2024, "The Platonic Representation Hypothesis")."""

from __future__ import annotations

import torch

from ..utils.arrays import ArrayLike
from .common import Measured, centred, check_positive_int, finish, pair

__all__ = ["mutual_knn"]

# rows of the n x n similarity matrix computed at once: about this many float64 values per block
BLOCK_VALUES = 1 << 22


#: With two samples each one's only neighbour is the other, in both representations: every pair scores 1.
MIN_SAMPLES = 3


def unit_rows(x: torch.Tensor, name: str) -> torch.Tensor:
    """Rows of ``x`` (n, d) scaled to unit L2 norm; ``ValueError`` naming ``name`` for an all-zero row."""
    norms = torch.linalg.vector_norm(x, dim=1)
    zero = int((norms == 0).sum())
    if zero:
        raise ValueError(f"mutual-kNN: {zero} row(s) of {name} are all zero, so their nearest neighbours by "
                         "cosine similarity are undefined; drop those samples")
    return x / norms[:, None]


def neighbour_mask(sim: torch.Tensor, start: int, k: int) -> tuple[torch.Tensor, int]:
    """Boolean (b, n) mask of each row's k most similar other rows, and how many rows had a tie at the cut.

    ``sim`` (b, n) holds rows ``start .. start+b-1`` of the similarity matrix (changed in place: the
    diagonal becomes -inf). Ties at the k-th value go to the lowest column indices (a stable descending sort).
    """
    rows = torch.arange(sim.shape[0], device=sim.device)
    sim[rows, rows + start] = -torch.inf
    kth = torch.topk(sim, k, dim=1, sorted=True).values[:, -1:]
    chosen = sim >= kth
    tied = torch.nonzero(chosen.sum(dim=1) > k).flatten()  # more than k at or above the k-th value: a tie
    if len(tied):  # keep the lowest indices among those equal to the k-th value
        t_sim, t_kth = sim[tied], kth[tied]
        equal = t_sim == t_kth
        need = k - (t_sim > t_kth).sum(dim=1, keepdim=True)
        chosen[tied] = (t_sim > t_kth) | (equal & (torch.cumsum(equal, dim=1) <= need))
    return chosen, int(len(tied))


def mutual_knn(X: ArrayLike, Y: ArrayLike, topk: int = 10, *, details: bool = False) -> float | Measured:
    """Mutual k-NN alignment: the mean share of each sample's ``topk`` nearest neighbours shared by X and Y.

    Rows are L2-normalised and neighbours are the other samples of highest cosine similarity (Huh et al.
    2024's ``mutual_knn``: the sample itself excluded); the score is ``mean_i |N_X(i) & N_Y(i)| / topk``.
    Ties at the k-th similarity are broken towards the lower sample index. The n x n similarities are
    computed in row blocks (about 32 MiB each), so memory is O(n d + block).

    Args:
        X: (n, dx) array or tensor (higher rank flattens after axis 0).
        Y: (n, dy), the same n inputs.
        topk: neighbours per sample, 1 <= topk <= n - 1 (default 10).
        details: return a [`Measured`][Measured] with ``topk``, ``n`` and ``tied_rows`` (rows whose k-th
            similarity was tied in X or Y, so the tie rule chose).

    Returns:
        The alignment in [0, 1], or a [`Measured`][Measured].

    Raises:
        ValueError: bad input, ``topk`` not an integer in [1, n - 2], an all-zero row, or a constant side.
    """
    x, y = pair(X, Y, "mutual-kNN", min_n=MIN_SAMPLES)
    return mutual_knn_from_nodes(knn_node(x, topk, "X"), knn_node(y, topk, "Y"), details=details)


def knn_node(X: ArrayLike, topk: int = 10, name: str = "X") -> tuple[torch.Tensor, int]:
    """Each sample's ``topk`` nearest other samples by cosine similarity, for reuse across many pairs.

    Args:
        X: (n, d) array or tensor.
        topk: as for [`mutual_knn`][mutual_knn].
        name: the argument in errors.

    Returns:
        ``(neighbours, tied)``: (n, topk) int64 sample indices (ascending within a row) and the number of rows
            whose k-th similarity was tied (the tie rule chose). Memory O(n d + block + n topk).
    """
    k = check_positive_int(topk, "topk", "mutual-kNN")
    x, _ = pair(X, X, "mutual-kNN", min_n=MIN_SAMPLES)
    n = x.shape[0]
    if k > n - 2:
        raise ValueError(f"mutual-kNN: topk={k} needs at least {k + 2} samples (with {k + 1}, each sample's {k} "
                         f"neighbours are all the other samples and every pair scores 1) but got n={n}; pass more "
                         f"samples or a smaller topk")
    centred(x, name, "mutual-kNN")  # refuses a constant representation like every measure
    xn = unit_rows(x, name)
    block = max(1, min(n, BLOCK_VALUES // n))
    parts, tied = [], 0
    for start in range(0, n, block):
        chosen, t = neighbour_mask(xn[start:start + block] @ xn.T, start, k)
        parts.append(chosen.nonzero()[:, 1].reshape(-1, k))  # exactly k per row, in column order
        tied += t
    return torch.cat(parts), tied


def mutual_knn_from_nodes(a: tuple[torch.Tensor, int], b: tuple[torch.Tensor, int], *,
                          details: bool = False) -> float | Measured:
    """[`mutual_knn`][mutual_knn] from two sides' `knn_node` (the same n inputs and ``topk``)."""
    (na, ta), (nb, tb) = a, b
    if na.shape != nb.shape:
        raise ValueError(f"mutual-kNN: X has {na.shape[0]} samples but Y has {nb.shape[0]} (or another topk); they "
                         "must be the same inputs")
    n, k = na.shape
    nb = nb.to(na.device)
    rows = max(1, BLOCK_VALUES // (k * k))
    shared = sum(int((na[s:s + rows, :, None] == nb[s:s + rows, None, :]).sum()) for s in range(0, n, rows))
    return finish(shared / (n * k), {"n": n, "topk": k, "tied_rows": ta + tb}, details)
