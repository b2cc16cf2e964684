"""The CCA family: mean canonical correlation (``cca``), SVCCA (Raghu et al. 2017), PWCCA (Morcos et al. 2018).

All three whiten each side through a thin QR of its centred activations (never an explicit inverse):
``Xc = Q R``, ``R = U S V^T`` (a small SVD; its vectors only when some directions are dropped), so ``Xc``
has the orthonormal column basis ``Q U`` and singular values ``S``.
The canonical correlations are the singular values of ``(Q_x U_x)^T (Q_y U_y)``, computed as
``U_x^T (Q_x^T Q_y) U_y``: one n x kx x ky GEMM and a kx x ky SVD. ``cca`` keeps each side's numerical
rank; ``svcca`` keeps the leading singular directions that explain ``variance`` of the variance (or
``dims`` of them). With ``kx + ky >= n - 1`` kept directions, correlations of 1 appear by construction
(the two subspaces of the (n - 1)-dimensional centred sample space must meet), so the measures refuse.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

import torch

from ..utils.arrays import ArrayLike
from .common import Measured, centred, check_positive_int, compress_columns, finish, numerical_rank, pair


@dataclass
class WhitenedSide:
    """One side whitened: ``Xc = q r``, ``r = u diag(s) v^T``; the first ``k`` columns of ``q u`` are kept.

    A side built from moments (`measures.streamed`) has no ``q`` (its n rows were never held): ``rows`` gives n,
    and the pair's ``q_x^T q_y`` is passed to the measures as ``cross``."""

    q: torch.Tensor | None  # (n, m) orthonormal, m = min(n, d)
    r: torch.Tensor  # (m, d)
    s: torch.Tensor  # (m,) singular values of Xc, descending
    rank: int
    k: int = 0
    _left: torch.Tensor | None = field(default=None, repr=False)  # the left singular vectors of r, once computed
    rows: int = 0  # n, for a side without q

    @property
    def n(self) -> int:
        """The number of samples."""
        return int(self.q.shape[0]) if self.q is not None else self.rows

    def kept(self) -> torch.Tensor | None:
        """The first ``k`` left singular vectors of ``r`` (m, k); None when every direction is kept (then the
        basis is ``q`` itself and no SVD with vectors is needed)."""
        if self.k == self.r.shape[0]:
            return None
        if self._left is None:
            self._left = torch.linalg.svd(self.r, full_matrices=False)[0]
        return self._left[:, : self.k]


def whiten(x: torch.Tensor, name: str, what: str, compress: bool = True) -> WhitenedSide:
    """QR of the centred ``x`` (n, d) and the singular values of its R factor; ``k`` starts at the numerical rank.

    ``compress``: with d > n, first rewrite ``xc`` as n columns with the same row inner products
    (`compress_columns`; CCA and SVCCA do not change, and the decompositions are n x n).
    PWCCA passes False: its weights are projections on the original neurons.
    """
    xc, _ = centred(x, name, what)
    if compress:
        xc = compress_columns(xc)
    q, r = torch.linalg.qr(xc)
    s = torch.linalg.svdvals(r)
    rank = numerical_rank(s, *xc.shape)
    return WhitenedSide(q, r, s, rank, rank)


def _project(u: torch.Tensor | None, m: torch.Tensor) -> torch.Tensor:
    return m if u is None else u.T @ m


def _correlations(a: WhitenedSide, b: WhitenedSide, n: int, what: str, fix: str,
                  cross: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Canonical correlations (descending, (min(ka, kb),)), the front's canonical directions in its kept
    basis (ka, min(ka, kb)) and that basis (`WhitenedSide.kept`); refuses when ``ka + kb >= n - 1``
    (correlations of 1 by construction). ``cross``: ``q_x^T q_y`` when the sides hold no ``q``."""
    if a.k + b.k >= n - 1:
        raise ValueError(
            f"{what} is degenerate here: n - 1 = {n - 1} <= {a.k} + {b.k} (the directions kept of the front "
            f"and of the end, after centring), so canonical correlations of 1 appear by construction whatever "
            f"the representations are; {fix}"
        )
    ua, ub = a.kept(), b.kept()
    cross = a.q.T @ b.q if cross is None else cross
    m = _project(ub, _project(ua, cross).T).T  # (ka, kb): U_x^T Q_x^T Q_y U_y
    left, rho, _ = torch.linalg.svd(m, full_matrices=False)
    return rho.clamp(0.0, 1.0), left, ua


_CCA_FIX = ("use more samples (n > rank(front) + rank(end) + 1), or reduce both sides first with 'svcca' "
            "(option dims, e.g. dims=20, or a lower variance)")


def _details(rho: torch.Tensor, a: WhitenedSide, b: WhitenedSide, n: int) -> dict:
    return {"n": n, "front_dims_kept": a.k, "end_dims_kept": b.k, "correlations": rho.tolist(),
            "yanai_r2": float((rho**2).mean())}


def cca(X: ArrayLike, Y: ArrayLike, *, details: bool = False) -> float | Measured:
    """Mean canonical correlation of the centred activations (all ``min(rank X, rank Y)`` of them).

    Args:
        X: (n, dx) array or tensor (the front; higher rank flattens after axis 0).
        Y: (n, dy) array or tensor of the same n inputs.
        details: return a [`Measured`][Measured] with ``correlations`` (all, descending), ``yanai_r2`` (their
            mean square: Yanai's generalised R^2), ``front_dims_kept``/``end_dims_kept`` (numerical ranks), ``n``.

    Returns:
        The mean correlation, in [0, 1] (float), or a [`Measured`][Measured].

    Raises:
        ValueError: bad input (see `pair`), a constant side, or
            ``n - 1 <= rank(Xc) + rank(Yc)`` (CCA is degenerate: use more samples or ``svcca`` with ``dims``).
    """
    x, y = pair(X, Y, "CCA", min_n=3)
    return cca_from_nodes(whiten(x, "X", "CCA"), whiten(y, "Y", "CCA"), details=details)


def cca_node(X: ArrayLike, name: str = "X", what: str = "CCA", compress: bool = True) -> WhitenedSide:
    """One side whitened (thin QR of the centred rows, the singular values of R), for reuse across many pairs
    (a grid's node) by [`cca`][cca], [`svcca`][svcca] and, with ``compress=False`` for the front,
    [`pwcca`][pwcca]. ``what`` names the measure in errors."""
    x, _ = pair(X, X, what, min_n=3)
    return whiten(x, name, what, compress)


def _same_n(a: WhitenedSide, b: WhitenedSide, what: str) -> int:
    if a.n != b.n:
        raise ValueError(f"{what}: X has {a.n} samples but Y has {b.n}; they must be the same inputs")
    return a.n


def cca_from_nodes(a: WhitenedSide, b: WhitenedSide, *, details: bool = False,
                   cross: torch.Tensor | None = None) -> float | Measured:
    """[`cca`][cca] from two sides' `cca_node` (``cross``: see `_correlations`)."""
    n = _same_n(a, b, "CCA")
    rho, _, _ = _correlations(a, b, n, "CCA", _CCA_FIX, cross)
    return finish(float(rho.mean()), _details(rho, a, b, n), details)


def dims_pair(dims: int | tuple[int, int] | list[int] | None) -> tuple[int, int] | None:
    """SVCCA's ``dims`` as (front, end) directions kept; None stays None; ``ValueError`` naming ``dims`` otherwise."""
    if dims is None:
        return None
    if isinstance(dims, (tuple, list)):
        if len(dims) != 2:
            raise ValueError(f"SVCCA: dims must be an integer or a pair (front, end) (got {dims!r})")
        return check_positive_int(dims[0], "dims", "SVCCA"), check_positive_int(dims[1], "dims", "SVCCA")
    d = check_positive_int(dims, "dims", "SVCCA")
    return d, d


def _check_variance(variance: float) -> float:
    variance = float(variance)
    if not 0.0 < variance <= 1.0:
        raise ValueError(f"SVCCA: variance must be in (0, 1] (got {variance!r})")
    return variance


def by_variance(variance: float) -> Callable[[WhitenedSide], int]:
    """A rule giving a whitened side's kept directions: the fewest whose variance share reaches ``variance``."""
    def keep(side: WhitenedSide) -> int:
        share = torch.cumsum(side.s**2, 0) / torch.sum(side.s**2)
        # the fewest leading directions whose share reaches `variance` (rounding: 1e-12 below counts as reached)
        return min(int(torch.searchsorted(share, torch.tensor(variance - 1e-12, dtype=share.dtype))) + 1, side.rank)
    return keep


def svcca(X: ArrayLike, Y: ArrayLike, variance: float = 0.99, dims: int | tuple[int, int] | None = None, *,
          details: bool = False) -> float | Measured:
    """SVCCA (Raghu et al. 2017): SVD-reduce each side, then the mean canonical correlation.

    Each centred side keeps its leading singular directions: the fewest whose squared singular values reach
    ``variance`` of the total (default 0.99), or the first ``dims`` when given (an int for both sides, or a
    pair (front, end); capped at the side's rank, with a warning in ``details``).

    Args:
        X: (n, dx) array or tensor (the front).
        Y: (n, dy) array or tensor of the same n inputs.
        variance: share of variance to keep per side, in (0, 1]. Ignored when ``dims`` is given.
        dims: directions to keep per side (int or (front, end)), or None to use ``variance``.
        details: return a [`Measured`][Measured] (``correlations``, ``yanai_r2``, ``front_dims_kept``,
            ``end_dims_kept``, ``variance`` or ``dims``, ``n``).

    Returns:
        The mean canonical correlation of the reduced sides, in [0, 1], or a [`Measured`][Measured].

    Raises:
        ValueError: bad input, bad ``variance``/``dims``, or ``n - 1 <= kept front + kept end`` directions.
    """
    variance, _ = _check_variance(variance), dims_pair(dims)
    x, y = pair(X, Y, "SVCCA", min_n=3)
    return svcca_from_nodes(whiten(x, "X", "SVCCA"), whiten(y, "Y", "SVCCA"), variance, dims, details=details)


def svcca_from_nodes(a: WhitenedSide, b: WhitenedSide, variance: float = 0.99, dims: int | tuple[int, int] | None = None, *,
                     details: bool = False, cross: torch.Tensor | None = None) -> float | Measured:
    """[`svcca`][svcca] from two sides' `cca_node` (the nodes are not changed; ``cross``: see `_correlations`)."""
    variance = _check_variance(variance)
    wanted = dims_pair(dims)
    n = _same_n(a, b, "SVCCA")
    a, b = replace(a), replace(b)  # the kept counts are this call's
    warnings = []
    for side, label, i in ((a, "front", 0), (b, "end", 1)):
        if wanted is None:
            side.k = by_variance(variance)(side)
        else:
            side.k = min(wanted[i], side.rank)
            if wanted[i] > side.rank:
                warnings.append(f"dims={wanted[i]} for the {label} exceeds its rank {side.rank}; kept {side.rank}")
    fix = "use more samples, or keep fewer directions (a lower variance, or dims)"
    rho, _, _ = _correlations(a, b, n, "SVCCA", fix, cross)
    info = _details(rho, a, b, n)
    info.update({"dims": list(wanted)} if wanted else {"variance": variance})
    if warnings:
        info["warnings"] = warnings
    return finish(float(rho.mean()), info, details)


def pwcca(X: ArrayLike, Y: ArrayLike, *, details: bool = False) -> float | Measured:
    """Projection-weighted CCA (Morcos et al. 2018) with the paper's weights, taken from the front.

    ``score = sum_i w_i rho_i`` with ``w_i = alpha_i / sum_j alpha_j``, ``alpha_i = sum_j |<h_i, x_j>|``:
    ``h_i`` the front's unit-norm canonical variates (n-vectors), ``x_j`` the front's centred neurons
    (columns of ``Xc``). (google/svcca's code instead weights from whichever side has fewer neurons.)
    ``<h_i, x_j>`` is computed without forming ``h``: ``H^T Xc = A^T U^T R`` (A: the front's canonical
    directions in its whitened basis).

    Args:
        X: (n, dx) array or tensor (the front, which gives the weights).
        Y: (n, dy), same n inputs.
        details: return a [`Measured`][Measured] (``correlations``, ``weights``, ``weights_from="front"``,
            ``yanai_r2``, ``front_dims_kept``, ``end_dims_kept``, ``n``).

    Returns:
        The weighted mean correlation, in [0, 1], or a [`Measured`][Measured].

    Raises:
        ValueError: bad input, a constant side, or ``n - 1 <= rank(Xc) + rank(Yc)`` (degenerate CCA).
    """
    x, y = pair(X, Y, "PWCCA", min_n=3)
    return pwcca_from_nodes(whiten(x, "X", "PWCCA", compress=False), whiten(y, "Y", "PWCCA"), details=details)


def pwcca_from_nodes(a: WhitenedSide, b: WhitenedSide, *, details: bool = False,
                     cross: torch.Tensor | None = None) -> float | Measured:
    """[`pwcca`][pwcca] from the front's `cca_node` with ``compress=False`` and the end's `cca_node` (``cross``: see
    `_correlations`)."""
    n = _same_n(a, b, "PWCCA")
    fix = "use more samples (n > rank(front) + rank(end) + 1), or 'svcca' with dims"
    rho, left, ua = _correlations(a, b, n, "PWCCA", fix, cross)
    alpha = (left.T @ _project(ua, a.r)).abs().sum(dim=1)  # (m,): sum_j |<h_i, x_j>| = rows of A^T U^T R
    weights = alpha / alpha.sum()
    info = _details(rho, a, b, n)
    info.update(weights=weights.tolist(), weights_from="front")
    return finish(float((weights * rho).sum()), info, details)
