"""Nearest-neighbour graphs with a tie rule that does not depend on the order of the samples.

Mutual k-NN and CKNNA read, for each sample, its ``k`` most similar other samples. When several candidates tie
at the k-th similarity, any rule that picks some of them by position (the lowest index, whatever a sort returns)
makes the score depend on the order of the samples. Here every tied candidate gets the same share of the places
left: a sample with ``a`` neighbours strictly above the k-th value and ``t`` candidates tied with it gives weight
1 to the ``a`` and ``(k - a) / t`` to each of the ``t`` (the probability that random tie-breaking picks it), so
each row's weights sum to ``k``. Without ties every weight is 1 and the graph is the usual neighbour sets.

Two similarities tie when they differ by less than the float64 rounding of the dot products that compute them
(`tie_tolerance`): samples that are exact copies of each other, or rows along one direction, tie however the
products round.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

# rows of the n x n similarity matrix computed at once: about this many float64 values per block
BLOCK_VALUES = 1 << 22

_EPS = float(torch.finfo(torch.float64).eps)


@dataclass(frozen=True)
class Neighbours:
    """Each sample's neighbour weights, a sparse (n, n) matrix whose rows sum to ``k``.

    Attributes:
        n: the number of samples.
        k: neighbours per sample.
        rows: (E,) int64 row of each entry, ascending.
        cols: (E,) int64 column of each entry, ascending within a row (never the row itself).
        weights: (E,) float64 in (0, 1]: 1 above the k-th similarity, ``(k - a) / t`` for the ``t`` candidates tied
            at it.
        values: (E,) float64 similarities of the entries (kept for kernel measures), or None.
        tied: rows whose tied candidates outnumbered the places left (where a positional rule would have chosen).
    """

    n: int
    k: int
    rows: torch.Tensor
    cols: torch.Tensor
    weights: torch.Tensor
    values: torch.Tensor | None
    tied: int

    @property
    def keys(self) -> torch.Tensor:
        """(E,) int64 ``rows * n + cols``, ascending: one key per entry."""
        return self.rows * self.n + self.cols

    @property
    def nbytes(self) -> int:
        """Bytes held by the entries."""
        parts = (self.rows, self.cols, self.weights) + ((self.values,) if self.values is not None else ())
        return int(sum(p.numel() * p.element_size() for p in parts))


def tie_tolerance(norms: torch.Tensor, top: float, dims: int) -> torch.Tensor:
    """How far apart two computed similarities of one row may be and still count as equal.

    A dot product of two d-dimensional float64 vectors is off by at most about ``d * eps * |a| |b|`` (any
    summation order), and scaling rows to unit norm adds about as much again; two equal similarities computed
    through different products therefore differ by at most twice that.

    Args:
        norms: (b,) the norms of the block's rows (ones for unit rows).
        top: the largest row norm of all the samples (1 for unit rows).
        dims: the number of features d.

    Returns:
        (b, 1) float64 tolerances ``4 (d + 2) eps |x_i| max_j |x_j|``.
    """
    return (4.0 * (dims + 2) * _EPS * top * norms)[:, None]


def _block(sim: torch.Tensor, start: int, k: int, tol: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
    """The weights (b, n) of rows ``start..`` of the similarity matrix ``sim`` (changed in place: the diagonal
    becomes -inf), the mask of their entries, and how many rows had more tied candidates than places."""
    rows = torch.arange(sim.shape[0], device=sim.device)
    sim[rows, rows + start] = -torch.inf
    kth = torch.topk(sim, k, dim=1, sorted=True).values[:, -1:]
    above = sim > kth + tol
    near = (sim >= kth - tol) & ~above
    places = k - above.sum(dim=1, keepdim=True)
    tied = near.sum(dim=1, keepdim=True)
    weights = above.double() + near.double() * (places.double() / tied.double())
    return weights, above | near, int((tied > places).sum())


def neighbour_graph(x: torch.Tensor, k: int, *, cosine: bool = True, keep_values: bool = False) -> Neighbours:
    """The neighbour weights of every sample of ``x``: the ``k`` most similar other samples, ties shared.

    Args:
        x: (n, d) float64 tensor (checked by the caller: finite, no all-zero row when ``cosine``).
        k: neighbours per sample, ``1 <= k <= n - 1``.
        cosine: similarity is the cosine of the rows (Huh et al.'s mutual k-NN) when True, their inner product
            (CKNNA's kernel) when False.
        keep_values: also keep the similarity of each entry (``values``).

    Returns:
        [`Neighbours`][Neighbours] on ``x``'s device. The n x n similarities are computed in row blocks of about
            ``BLOCK_VALUES`` values, so memory is O(n d + block + entries); entries are ``n k`` without ties and
            grow with the tied candidates (a layer where every sample ties holds ``n (n - 1)``).
    """
    n, d = x.shape
    norms = torch.linalg.vector_norm(x, dim=1)
    z = x / norms[:, None] if cosine else x
    scale = torch.ones_like(norms) if cosine else norms
    top = float(scale.max())
    step = max(1, min(n, BLOCK_VALUES // n))
    rows, cols, weights, values, tied = [], [], [], [], 0
    for start in range(0, n, step):
        block = z[start:start + step] @ z.T
        w, mask, t = _block(block, start, k, tie_tolerance(scale[start:start + step], top, d))
        at = mask.nonzero()
        rows.append(at[:, 0] + start)
        cols.append(at[:, 1])
        weights.append(w[mask])
        if keep_values:
            values.append(block[mask])
        tied += t
    return Neighbours(n, k, torch.cat(rows), torch.cat(cols), torch.cat(weights),
                      torch.cat(values) if keep_values else None, tied)


def match(keys: torch.Tensor, query: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Where each of ``query`` (any shape, int64) sits in the ascending ``keys`` (E,), and whether it is there.

    Returns:
        ``(at, hit)``: int64 positions clamped to ``[0, E - 1]`` and a bool mask, both shaped like ``query``.
    """
    at = torch.searchsorted(keys, query).clamp(max=max(0, keys.numel() - 1))
    return at, keys[at] == query
