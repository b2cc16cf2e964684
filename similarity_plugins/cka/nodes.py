"""CKA through per-representation centred Gram matrices, for grids where one representation meets many others.

[`cka`][cka] works pair by pair. In a grid every node (one model's activations at one layer) is in many cells,
so the n x n work is split: `node_gram` centres one representation's Gram matrix once (float64, the
same steps as [`cka`][functional.cka]'s Gram path: column-centred rows, one symmetric rank-k product, the
RBF kernel where asked, the biased or the unbiased centring), and `cka_from_node_grams` finishes a cell
with one inner product of two such matrices. The values equal [`cka`][cka] to float64 rounding.

Cost per node: one ``n^2 d / 2`` rank-k product and a few passes over ``n^2`` entries; per cell: one pass
over ``n^2`` entries. Memory: ``8 n^2`` bytes per node and estimator.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .grams import _center_inplace, _check_threshold, _gram_rows, _rbf_inplace
from .hsic import _DEGENERATE_RTOL, _finish, _fro2
from .inputs import ArrayLike, _as_samples, _centered_float64, _check_debiased_n, _raise_if_constant

__all__ = ["NodeGram", "node_gram", "recentred", "cka_from_node_grams"]


@dataclass
class NodeGram:
    """One representation's centred Gram matrix and the terms a CKA cell needs from it.

    ``gram``: (n, n) float64, centred (biased) or U-centred (``debiased``); ``self_hsic``: ``<gram, gram>``;
    ``tol``: the rounding floor below which the debiased self-HSIC counts as zero (0.0 when biased);
    ``scale``: ``<K, K>`` of the uncentred kernel matrix (sets ``tol``).
    """

    gram: np.ndarray
    self_hsic: float
    tol: float
    scale: float
    debiased: bool
    kernel: str

    @property
    def nbytes(self) -> int:
        """Bytes held (the Gram matrix)."""
        return int(self.gram.nbytes)


def _finish_node(g: np.ndarray, scale: float, debiased: bool, kernel: str) -> NodeGram:
    k = _center_inplace(g, debiased)
    n = k.shape[0]
    tol = (_DEGENERATE_RTOL * n) ** 2 * scale if debiased else 0.0
    return NodeGram(k, float(np.vdot(k, k)), tol, scale, debiased, kernel)


def node_gram(x: ArrayLike, kernel: str = "linear", debiased: bool = False, threshold: float = 1.0,
              name: str = "X") -> NodeGram:
    """The centred Gram matrix of one representation.

    Parameters
    ----------
    x: (n, d) array or tensor (higher rank is flattened after axis 0).
    kernel: ``"linear"`` or ``"rbf"``; ``debiased``: U-centring (n >= 4); ``threshold``: RBF bandwidth factor.
    name: the argument's name in errors.

    Returns
    -------
    `NodeGram` (float64 (n, n) matrix). Raises ``ValueError`` for NaN/Inf or a constant representation.
    """
    if kernel not in ("linear", "rbf"):
        raise ValueError(f"kernel must be 'linear' or 'rbf' (got {kernel!r})")
    threshold = _check_threshold(threshold)
    xa = _as_samples(x, name)
    _check_debiased_n(xa.shape[0], debiased)
    xc, mean = _centered_float64(xa, name)
    _raise_if_constant(xa, name, _fro2(xc), mean)
    g = _gram_rows(xc)
    del xc
    if kernel == "rbf":
        g = _rbf_inplace(g, threshold, name)
    return _finish_node(g, float(np.vdot(g, g)), debiased, kernel)


def recentred(node: NodeGram, debiased: bool) -> NodeGram:
    """The same linear-kernel representation under the other centring, from its centred Gram matrix (one copy,
    no new product): U-centring removes exactly what the biased centring removes, so both estimators of one
    node share one rank-k product."""
    if node.debiased == debiased:
        return node
    _check_debiased_n(node.gram.shape[0], debiased)
    return _finish_node(node.gram.copy(), node.scale, debiased, node.kernel)


def cka_from_node_grams(a: NodeGram, b: NodeGram) -> float | None:
    """CKA of two representations of the same n inputs from their `NodeGram` (same kernel and centring).

    Returns the score, or None when an inner product under/overflowed (the caller then uses [`cka`][cka], which
    rescales). Raises ``ValueError`` for mismatched inputs or a degenerate debiased representation.
    """
    if a.gram.shape != b.gram.shape:
        raise ValueError(f"X and Y must have the same number of samples, got {a.gram.shape[0]} and {b.gram.shape[0]}")
    if a.debiased != b.debiased or a.kernel != b.kernel:
        raise ValueError("both node Gram matrices must use the same kernel and centring")
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        hxy = float(np.vdot(a.gram, b.gram))
        out = _finish((hxy, a.self_hsic, b.self_hsic, a.tol, b.tol), a.debiased)
    return None if out is None or not math.isfinite(out) else out
