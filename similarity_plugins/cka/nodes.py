"""CKA through per-representation centred Gram matrices, for grids where one representation meets many others.

[`cka`][cka] works pair by pair. In a grid every node (one model's activations at one layer) is in many cells,
so the n x n work is split: `node_gram` builds one representation's centred Gram matrix once (float64, the
same steps as [`cka`][functional.cka]'s Gram path: column-centred rows, one symmetric rank-k product, the
RBF kernel where asked, the centring), and `cka_from_node_grams` finishes a cell with one inner product of two
such matrices. Both estimators share the one matrix: the U-centred matrix of the debiased estimator differs
from the centred one by a rank-two term and a diagonal,

    K~ = Kc + u 1^T + 1 u^T + diag(d)        (u, d: length-n vectors; `UCentring`),

so ``<K~, L~>`` is ``<Kc, Lc>`` plus a few length-n dot products. The values equal [`cka`][cka] to float64
rounding.

Cost per node: one ``n^2 d / 2`` rank-k product and a few passes over ``n^2`` entries; per cell: one pass
over ``n^2`` entries. Memory: ``8 n^2`` bytes per node, whichever estimators a grid asks for.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..utils.arrays import ArrayLike, as_samples, raise_if_constant, to_numpy
from .grams import center_inplace, check_threshold, gram_rows, rbf_inplace
from .hsic import DEGENERATE_RTOL, finish_cka, fro2
from .inputs import centered_float64, check_debiased_n

_BLOCK_BYTES = 1 << 20  # row blocks of the U-centred matrix materialised at once for its self inner product


@dataclass(frozen=True)
class UCentring:
    """What the debiased estimator adds to a node's centred Gram matrix ``Kc``: ``K~ = Kc + u 1^T + 1 u^T +
    diag(d)``, with ``row_sums = Kc 1`` and ``diag = diag(Kc)`` for the cross terms; ``self_hsic`` is
    ``<K~, K~>``, ``tol`` the rounding floor below which it counts as zero. All vectors (n,) float64."""

    u: np.ndarray
    d: np.ndarray
    row_sums: np.ndarray
    diag: np.ndarray
    self_hsic: float
    tol: float


@dataclass
class NodeGram:
    """One representation's centred Gram matrix and the terms a CKA cell needs from it.

    ``gram``: (n, n) float64, centred (Kornblith's ``center_gram``); ``self_hsic``: ``<gram, gram>``;
    ``scale``: ``<K, K>`` of the uncentred kernel matrix (sets the debiased rounding floor); ``kernel``:
    ``"linear"`` or ``"rbf"``. `u_centring` gives the debiased estimator's terms (computed once, on first use).
    """

    gram: np.ndarray
    self_hsic: float
    scale: float
    kernel: str
    _u: UCentring | None = field(default=None, repr=False)

    @property
    def nbytes(self) -> int:
        """Bytes held (the Gram matrix and the debiased estimator's vectors)."""
        return int(self.gram.nbytes) + (0 if self._u is None else 4 * self._u.u.nbytes)

    def u_centring(self) -> UCentring:
        """The debiased estimator's terms; raises ``ValueError`` for fewer than 4 samples."""
        if self._u is None:
            self._u = _u_centring(self.gram, self.scale)
        return self._u


def _u_centring(kc: np.ndarray, scale: float) -> UCentring:
    """Kornblith's unbiased ``center_gram`` of ``kc`` as vectors: zero the diagonal, remove the row and column
    means over ``n - 2``, zero the diagonal again; the same steps as `center_inplace`, without a second matrix."""
    n = kc.shape[0]
    check_debiased_n(n, True)
    diag = kc.diagonal().copy()
    row_sums = np.sum(kc, 0, dtype=np.float64)
    means = (row_sums - diag) / (n - 2)
    means -= np.sum(means) / (2 * (n - 1))
    u, d = -means, 2.0 * means - diag
    return UCentring(u, d, row_sums, diag, _u_self_hsic(kc, u), (DEGENERATE_RTOL * n) ** 2 * scale)


def _u_self_hsic(kc: np.ndarray, u: np.ndarray) -> float:
    """``<K~, K~>`` summed over row blocks of the U-centred matrix (exact; one small buffer)."""
    n = kc.shape[0]
    rows = max(1, _BLOCK_BYTES // (8 * n))
    buf = np.empty((min(rows, n), n))
    total = 0.0
    for start in range(0, n, rows):
        stop = min(n, start + rows)
        block = buf[: stop - start]
        np.add(kc[start:stop], u[start:stop, None], out=block)
        block += u[None, :]
        block[np.arange(stop - start), np.arange(start, stop)] = 0.0
        total += float(np.vdot(block, block))
    return total


def node_gram(x: ArrayLike, kernel: str = "linear", threshold: float = 1.0, name: str = "X") -> NodeGram:
    """The centred Gram matrix of one representation, for either estimator.

    Args:
        x: (n, d) array or tensor (higher rank is flattened after axis 0).
        kernel: ``"linear"`` or ``"rbf"``.
        threshold: RBF bandwidth factor (times the median distance).
        name: the argument's name in errors.

    Returns:
        `NodeGram` (float64 (n, n) matrix). Raises ``ValueError`` for NaN/Inf or a constant representation.
    """
    if kernel not in ("linear", "rbf"):
        raise ValueError(f"kernel must be 'linear' or 'rbf' (got {kernel!r})")
    threshold = check_threshold(threshold)
    xa = as_samples(to_numpy(x, name), name)
    xc, mean = centered_float64(xa, name)
    raise_if_constant(xa, name, fro2(xc), mean)
    g = gram_rows(xc)
    del xc
    if kernel == "rbf":
        g = rbf_inplace(g, threshold, name)
    scale = float(np.vdot(g, g))
    k = center_inplace(g, False)
    return NodeGram(k, float(np.vdot(k, k)), scale, kernel)


def _cross_terms(a: UCentring, b: UCentring, n: int) -> float:
    """``<K~, L~> - <Kc, Lc>`` from the two nodes' vectors (the rank-two and diagonal terms)."""
    u, d, v, e = a.u, a.d, b.u, b.d
    return float(2.0 * (v @ a.row_sums) + a.diag @ e + 2.0 * (u @ b.row_sums) + d @ b.diag
                 + 2.0 * n * (u @ v) + 2.0 * u.sum() * v.sum() + 2.0 * (u @ e) + 2.0 * (d @ v) + d @ e)


def cka_from_node_grams(a: NodeGram, b: NodeGram, debiased: bool = False) -> float | None:
    """CKA of two representations of the same n inputs from their `NodeGram` (same kernel).

    Args:
        a: the front's node.
        b: the end's node, of the same n inputs and kernel.
        debiased: the unbiased HSIC estimator (Song et al.; n >= 4) instead of the biased.

    Returns:
        The score, or None when an inner product under/overflowed (the caller then uses [`cka`][cka], which
            rescales). Raises ``ValueError`` for mismatched inputs or a degenerate debiased representation.
    """
    if a.gram.shape != b.gram.shape:
        raise ValueError(f"X and Y must have the same number of samples, got {a.gram.shape[0]} and {b.gram.shape[0]}")
    if a.kernel != b.kernel:
        raise ValueError("both node Gram matrices must use the same kernel")
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        hxy = float(np.vdot(a.gram, b.gram))
        if debiased:
            ua, ub = a.u_centring(), b.u_centring()
            terms = (hxy + _cross_terms(ua, ub, a.gram.shape[0]), ua.self_hsic, ub.self_hsic, ua.tol, ub.tol)
        else:
            terms = (hxy, a.self_hsic, b.self_hsic, 0.0, 0.0)
        out = finish_cka(terms, debiased)
    return None if out is None or not math.isfinite(out) else out
