"""CKNNA: centred kernel nearest-neighbour alignment (Huh et al. 2024, "The Platonic Representation Hypothesis").

CKA restricted to the pairs of samples that are mutual neighbours: with K = X X^T and L = Y Y^T (inner products
of the rows as given) and M the mask of the pairs (i, j) where j is among i's ``topk`` nearest other samples by
inner product in both X and Y,

    CKNNA = HSIC_u(M * K, M * L) / sqrt(HSIC_u(M_X * K, M_X * K) HSIC_u(M_Y * L, M_Y * L))

with HSIC_u the unbiased estimator (Song et al. 2012) exactly as platonic-rep's ``metrics.py`` writes it
(``cknna`` with its defaults ``unbiased=True``, ``distance_agnostic=False``; the trace term pairs ``A_ij`` with
``B_ji``, as its ``hsic_unbiased`` does), but without the ``1e-6`` that code adds to the denominator: that
constant makes the value change with the scale of the features. Candidates tied at the k-th inner product share
the places left (`similarity_plugins.measures.neighbours`), so the masks are the expected masks under random
tie-breaking and the value does not depend on the order of the samples. The masks are not symmetric, so neither
is CKNNA: ``cknna(X, Y)`` and ``cknna(Y, X)`` differ in general.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from ..utils.arrays import ArrayLike
from .common import Measured, centred, check_positive_int, finish, pair
from .neighbours import Neighbours, match, neighbour_graph

#: The unbiased HSIC divides by n (n - 3).
MIN_SAMPLES = 4
#: platonic-rep's ``cknna`` refuses fewer neighbours than this
MIN_TOPK = 2


@dataclass(frozen=True)
class KernelNeighbours:
    """One representation's part of CKNNA: its neighbour graph with the inner products of the entries, where each
    entry's transpose sits among the entries (``-1``: not an entry), and its own ``HSIC_u(M_X * K, M_X * K)``."""

    graph: Neighbours
    transpose: torch.Tensor
    self_hsic: float

    @property
    def nbytes(self) -> int:
        """Bytes held."""
        return self.graph.nbytes + int(self.transpose.numel() * 8)


def _hsic(graph: Neighbours, transpose: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``HSIC_u(A, B)`` (platonic-rep's ``hsic_unbiased``) of matrices held on ``graph``'s entries, zero elsewhere
    and on the diagonal: ``a``, ``b`` (m, E) values of m pairs of matrices; returns (m,) float64."""
    n = graph.n
    valid = transpose >= 0
    trace = (a[:, valid] * b[:, transpose[valid]]).sum(dim=1)  # sum_ij A_ij B_ji
    columns = torch.zeros(a.shape[0], n, dtype=a.dtype).index_add_(1, graph.cols, a)
    rows = torch.zeros(b.shape[0], n, dtype=b.dtype).index_add_(1, graph.rows, b)
    total = trace + a.sum(dim=1) * b.sum(dim=1) / ((n - 1) * (n - 2)) - 2.0 * (columns * rows).sum(dim=1) / (n - 2)
    return total / (n * (n - 3))


def cknna_node(X: ArrayLike, topk: int = 10, name: str = "X") -> KernelNeighbours:
    """One representation's neighbour graph by inner product, with the kernel values CKNNA needs.

    Args:
        X: (n, d) array or tensor (higher rank flattens after axis 0).
        topk: neighbours per sample, 2 <= topk <= n - 1.
        name: the argument in errors.

    Returns:
        `KernelNeighbours` on the CPU (memory O(n topk), more where candidates tie).

    Raises:
        ValueError: bad input, ``topk`` out of range, a constant representation, or one whose neighbours
            carry no kernel variation (``HSIC_u(M_X * K, M_X * K) <= 0``).
    """
    k = check_positive_int(topk, "topk", "CKNNA", minimum=MIN_TOPK)
    x, _ = pair(X, X, "CKNNA", min_n=MIN_SAMPLES)
    n = x.shape[0]
    if k > n - 1:
        raise ValueError(f"CKNNA: topk={k} needs at least {k + 1} samples but got n={n}; pass more samples or a "
                         "smaller topk (topk = n - 1 keeps every pair: the debiased CKA of the inner products)")
    centred(x, name, "CKNNA")  # refuses a constant representation like every measure
    g = neighbour_graph(x, k, cosine=False, keep_values=True)
    g = Neighbours(g.n, g.k, g.rows.cpu(), g.cols.cpu(), g.weights.cpu(), g.values.cpu(), g.tied)
    at, hit = match(g.keys, g.cols * n + g.rows)
    transpose = torch.where(hit, at, torch.full_like(at, -1))
    values = (g.weights * g.values)[None]
    own = float(_hsic(g, transpose, values, values)[0])
    if not own > 0.0:
        raise ValueError(f"CKNNA: {name}'s kernel restricted to its own neighbours has no variation "
                         f"(HSIC_u = {own:.3g} <= 0), so CKNNA is undefined (0/0)")
    return KernelNeighbours(g, transpose, own)


def cknna_null(a: KernelNeighbours, b: KernelNeighbours) -> Callable[[torch.Tensor], torch.Tensor]:
    """CKNNA of ``a``'s samples against ``b``'s with its rows permuted, for a batch of permutations.

    Row ``i`` of the permuted side is ``b``'s row ``p(i)``: ``b``'s entry (r, c) moves to (p^-1(r), p^-1(c)),
    and the mask of mutual neighbours is where it meets one of ``a``'s entries. Each permutation costs one
    lookup of ``b``'s entries among ``a``'s and a few passes over ``a``'s entries.

    Returns:
        A function: (m, n) int64 permutations -> (m,) float64 values (the identity gives CKNNA itself).
    """
    ga, gb = a.graph, b.graph
    keys, size = ga.keys, ga.rows.numel()
    kernel_a = ga.values
    scale = (a.self_hsic * b.self_hsic) ** 0.5

    def statistic(perms: torch.Tensor) -> torch.Tensor:
        m = len(perms)
        inverse = torch.argsort(perms, dim=1)
        at, hit = match(keys, inverse[:, gb.rows] * ga.n + inverse[:, gb.cols])
        weight = ga.weights[at] * gb.weights * hit  # (m, E_b): the expected mask where the two graphs meet
        flat = (torch.arange(m)[:, None] * size + at).reshape(-1)
        left = torch.zeros(m * size, dtype=torch.float64).index_add_(0, flat, (weight * kernel_a[at]).reshape(-1))
        right = torch.zeros(m * size, dtype=torch.float64).index_add_(0, flat, (weight * gb.values).reshape(-1))
        return _hsic(ga, a.transpose, left.reshape(m, size), right.reshape(m, size)) / scale

    return statistic


def cknna_from_nodes(a: KernelNeighbours, b: KernelNeighbours, *, details: bool = False) -> float | Measured:
    """[`cknna`][cknna] from two sides' `cknna_node` (the same n inputs and ``topk``)."""
    if (a.graph.n, a.graph.k) != (b.graph.n, b.graph.k):
        raise ValueError(f"CKNNA: X has {a.graph.n} samples and topk={a.graph.k} but Y has {b.graph.n} and "
                         f"topk={b.graph.k}; they must be the same inputs and topk")
    score = float(cknna_null(a, b)(torch.arange(a.graph.n)[None])[0])
    return finish(score, {"n": a.graph.n, "topk": a.graph.k, "tied_rows": a.graph.tied + b.graph.tied}, details)


def cknna(X: ArrayLike, Y: ArrayLike, topk: int = 10, *, details: bool = False) -> float | Measured:
    """CKNNA: CKA of the inner-product kernels over the pairs of mutual nearest neighbours (Huh et al. 2024).

    platonic-rep's ``AlignmentMetrics.cknna(X, Y, topk)`` (see the module docstring) without the ``1e-6`` of its
    denominator, with ties at the k-th inner product shared and a default ``topk`` that works (10, the value
    platonic-rep's ``measure_alignment.py`` passes; its function's own default, None, fails). Rows are used as
    given: that pipeline L2-normalises them first (pass ``X / ||X||`` row-wise for its numbers).

    Args:
        X: (n, dx) array or tensor (higher rank flattens after axis 0), n >= 4.
        Y: (n, dy), the same n inputs.
        topk: neighbours per sample, 2 <= topk <= n - 1 (default 10).
        details: return a [`Measured`][Measured] with ``n``, ``topk`` and ``tied_rows``.

    Returns:
        CKNNA, at most 1 in magnitude for the usual cases (1 for Y = c X Q, Q orthogonal), or a
            [`Measured`][Measured].

    Raises:
        ValueError: bad input, ``topk`` out of range, a constant side, or a side whose kernel carries no
            variation over its neighbours.
    """
    x, y = pair(X, Y, "CKNNA", min_n=MIN_SAMPLES)
    return cknna_from_nodes(cknna_node(x, topk, "X"), cknna_node(y, topk, "Y"), details=details)
