"""Mutual k-nearest-neighbour alignment (Huh et al. 2024, "The Platonic Representation Hypothesis")."""

from __future__ import annotations

from typing import Callable

import torch

from ..utils.arrays import ArrayLike
from .common import Measured, centred, check_positive_int, finish, pair
from .neighbours import Neighbours, match, neighbour_graph

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


def mutual_knn(X: ArrayLike, Y: ArrayLike, topk: int = 10, *, details: bool = False) -> float | Measured:
    """Mutual k-NN alignment: the mean share of each sample's ``topk`` nearest neighbours shared by X and Y.

    Rows are L2-normalised and neighbours are the other samples of highest cosine similarity (Huh et al.
    2024's ``mutual_knn``: the sample itself excluded); the score is ``mean_i |N_X(i) & N_Y(i)| / topk``.
    Candidates tied at the k-th similarity share the places left equally (`similarity_plugins.measures.neighbours`),
    so the score is the expected value under random tie-breaking and does not depend on the order of the samples.
    The n x n similarities are computed in row blocks (about 32 MiB each), so memory is O(n d + block).

    Args:
        X: (n, dx) array or tensor (higher rank flattens after axis 0).
        Y: (n, dy), the same n inputs.
        topk: neighbours per sample, 1 <= topk <= n - 2 (default 10).
        details: return a [`Measured`][Measured] with ``topk``, ``n`` and ``tied_rows`` (rows of X or Y whose
            tied candidates at the k-th similarity outnumbered the places left, so the tie rule shared them).

    Returns:
        The alignment in [0, 1], or a [`Measured`][Measured].

    Raises:
        ValueError: bad input, ``topk`` not an integer in [1, n - 2], an all-zero row, or a constant side.
    """
    x, y = pair(X, Y, "mutual-kNN", min_n=MIN_SAMPLES)
    return mutual_knn_from_nodes(knn_node(x, topk, "X"), knn_node(y, topk, "Y"), details=details)


def knn_node(X: ArrayLike, topk: int = 10, name: str = "X") -> Neighbours:
    """Each sample's ``topk`` nearest other samples by cosine similarity, for reuse across many pairs.

    Args:
        X: (n, d) array or tensor.
        topk: as for [`mutual_knn`][mutual_knn].
        name: the argument in errors.

    Returns:
        [`Neighbours`][similarity_plugins.measures.neighbours.Neighbours]: each sample's neighbour weights (1, or
            the shared weight of candidates tied at the k-th similarity) and the count of rows with ties.
    """
    k = check_positive_int(topk, "topk", "mutual-kNN")
    x, _ = pair(X, X, "mutual-kNN", min_n=MIN_SAMPLES)
    n = x.shape[0]
    if k > n - 2:
        raise ValueError(f"mutual-kNN: topk={k} needs at least {k + 2} samples (with {k + 1}, each sample's {k} "
                         f"neighbours are all the other samples and every pair scores 1) but got n={n}; pass more "
                         f"samples or a smaller topk")
    centred(x, name, "mutual-kNN")  # refuses a constant representation like every measure
    unit_rows(x, name)
    return neighbour_graph(x, k, cosine=True)


def _same_inputs(a: Neighbours, b: Neighbours, what: str) -> None:
    if (a.n, a.k) != (b.n, b.k):
        raise ValueError(f"{what}: X has {a.n} samples and topk={a.k} but Y has {b.n} and topk={b.k}; they must be "
                         "the same inputs and topk")


def mutual_knn_from_nodes(a: Neighbours, b: Neighbours, *, details: bool = False) -> float | Measured:
    """[`mutual_knn`][mutual_knn] from two sides' `knn_node` (the same n inputs and ``topk``)."""
    _same_inputs(a, b, "mutual-kNN")
    score = float(mutual_knn_null(a, b)(torch.arange(a.n)[None])[0])
    return finish(score, {"n": a.n, "topk": a.k, "tied_rows": a.tied + b.tied}, details)


def mutual_knn_null(a: Neighbours, b: Neighbours) -> Callable[[torch.Tensor], torch.Tensor]:
    """The mutual k-NN of ``a``'s samples against ``b``'s with its rows permuted, for a batch of permutations.

    Row ``i`` of the permuted side is ``b``'s row ``p(i)``, so ``b``'s entry (r, c) becomes (p^-1(r), p^-1(c)):
    each permutation costs one lookup of ``b``'s entries among ``a``'s.

    Returns:
        A function: (m, n) int64 permutations -> (m,) float64 scores (the identity gives the score itself).
    """
    keys, wa = a.keys.cpu(), a.weights.cpu()
    rows, cols, wb = b.rows.cpu(), b.cols.cpu(), b.weights.cpu()

    def statistic(perms: torch.Tensor) -> torch.Tensor:
        inverse = torch.argsort(perms, dim=1)
        at, hit = match(keys, inverse[:, rows] * a.n + inverse[:, cols])
        return (wa[at] * wb * hit).sum(dim=1) / (a.n * a.k)

    return statistic
