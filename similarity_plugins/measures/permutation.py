"""Permutation tests of the representational measures: each null value by permuting what the measure derives.

[`permutation_test`][permutation_test] scores K seeded permutations of the end's rows against the front's, with the
measure's own options, and returns the test's details
(`summarise`). What a permutation ``P`` of Y's rows changes:

- ``procrustes``: the nuclear norm of ``Xc^T P Yc`` (norms unchanged): one GEMM and a symmetric eigenproblem.
- ``cca``, ``svcca``, ``pwcca``: the whitened bases stay, the correlations are the singular values of
  ``Q_x^T P Q_y`` (PWCCA's weights also take its left singular vectors); no new QR or variance cut.
- ``rsa``: the RDMs and their ranks stay; P permutes the rows and columns of Y's, so each null correlation is
  one gathered inner product (Pearson and Spearman: the Mantel test; Kendall recomputes tau on each).
- ``mutual-knn``: the neighbour weights stay; Y's entry (r, c) of the neighbour graph moves to
  ``(p^-1(r), p^-1(c))`` and is looked up among X's (`knn.mutual_knn_null`).
- ``cknna``: the same lookup finds the mutual neighbours; the unbiased HSIC of the two masked kernels is then a
  few passes over X's entries (`cknna.cknna_null`).
- ``linear-regression``: the end's *training* rows are permuted and the ridge map refitted on them, exactly,
  through the fixed hat matrix of the front's training rows; the test pairs are kept. With no relation
  between the sides the training pairs are exchangeable, so every permuted fit is as likely as the real one,
  and the test rows score each fit as they score the real one.

The singular values of the CCA family and Procrustes come from the eigenvalues of ``M^T M`` (several times
faster than an SVD; absolute error about ``eps * s_max^2 / s`` on a singular value ``s``), for the observed
statistic as for the null, so both are computed alike.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import torch

from ..stats.calibration import check_alpha
from ..stats.designs import plan_permutations
from ..stats.permutation import GATHER_COST, batch_size, check_cost, pearson3_p_value, permuted_inner, summarise
from ..utils.arrays import ArrayLike
from .cca import by_variance, dims_pair, whiten
from .cknna import cknna_node, cknna_null
from .common import centred, compress_columns, pair
from .knn import knn_node, mutual_knn_null
from .regression import ridge_front
from .rsa import average_ranks, kendall_tau, rdm_upper

Statistic = Callable[[torch.Tensor], torch.Tensor]  # permutations (b, n) -> statistics (b,)


def _gemm_bytes(a: torch.Tensor, b: torch.Tensor) -> float:
    """Bytes one permutation takes in a batch of the GEMM routes: ``P b``, ``a^T P b`` and its Gram matrix."""
    return 8.0 * (a.shape[0] * b.shape[1] + 2 * a.shape[1] * b.shape[1] + min(a.shape[1], b.shape[1]) ** 2)


def _singular_values(a: torch.Tensor, b: torch.Tensor, perms: torch.Tensor, vectors: bool = False):
    """Singular values (descending, (p, min(ka, kb))) of ``a^T b[perm]`` for each permutation, from the
    eigenvalues of the smaller of ``M M^T`` and ``M^T M``; with ``vectors``, also M's left singular vectors."""
    n, ka, kb = a.shape[0], a.shape[1], b.shape[1]
    stacked = b[perms.T.reshape(-1).to(b.device)].reshape(n, len(perms) * kb)
    m = (a.T @ stacked).reshape(ka, len(perms), kb).permute(1, 0, 2)  # (p, ka, kb)
    small = min(ka, kb)
    if vectors:
        values, left = torch.linalg.eigh(m @ m.mT)
        values, left = values.flip(-1)[:, :small], left.flip(-1)[:, :, :small]
        return values.clamp(min=0.0).sqrt(), left
    gram = m @ m.mT if ka <= kb else m.mT @ m
    return torch.linalg.eigvalsh(gram).flip(-1)[:, :small].clamp(min=0.0).sqrt(), None


def _procrustes(x: torch.Tensor, y: torch.Tensor) -> tuple[Statistic, float]:
    xc, sx = centred(x, "X", "Procrustes")
    yc, sy = centred(y, "Y", "Procrustes")
    xc, yc = compress_columns(xc), compress_columns(yc)
    norm = math.sqrt(sx) * math.sqrt(sy)
    return (lambda p: (_singular_values(xc, yc, p)[0].sum(dim=1) / norm).clamp(0.0, 1.0)), \
        2.0 * x.shape[0] * xc.shape[1] * yc.shape[1], _gemm_bytes(xc, yc)


def _bases(x: torch.Tensor, y: torch.Tensor, what: str, variance: float | None = None, dims: Any = None,
           compress: bool = True) -> tuple[torch.Tensor, torch.Tensor, Any, Any]:
    """Each side's kept orthonormal basis (n, k) as the CCA family keeps it, and the front's whitening."""
    a, b = whiten(x, "X", what, compress), whiten(y, "Y", what)
    wanted = dims_pair(dims) if what == "SVCCA" else None
    for side, i in ((a, 0), (b, 1)):
        if what == "SVCCA":
            side.k = min(wanted[i], side.rank) if wanted else by_variance(float(variance))(side)
    if a.k + b.k >= x.shape[0] - 1:
        raise ValueError(f"{what} is degenerate here (n - 1 <= {a.k} + {b.k} kept directions); no test")
    ua, ub = a.kept(), b.kept()
    qa = a.q if ua is None else a.q @ ua
    qb = b.q if ub is None else b.q @ ub
    return qa[:, : a.k], qb[:, : b.k], a, ua


def _cca(x: torch.Tensor, y: torch.Tensor, what: str = "CCA", variance: float = 0.99,
         dims: Any = None) -> tuple[Statistic, float]:
    qa, qb, _, _ = _bases(x, y, what, variance, dims)
    return (lambda p: _singular_values(qa, qb, p)[0].clamp(0.0, 1.0).mean(dim=1)), \
        2.0 * x.shape[0] * qa.shape[1] * qb.shape[1], _gemm_bytes(qa, qb)


def _pwcca(x: torch.Tensor, y: torch.Tensor) -> tuple[Statistic, float]:
    qa, qb, a, ua = _bases(x, y, "PWCCA", compress=False)
    projection = a.r if ua is None else ua.T @ a.r  # (ka, d): the front's neurons in its kept basis

    def statistic(p: torch.Tensor) -> torch.Tensor:
        rho, left = _singular_values(qa, qb, p, vectors=True)
        alpha = (left.mT @ projection).abs().sum(dim=2)  # (p, m)
        return ((alpha / alpha.sum(dim=1, keepdim=True)) * rho.clamp(0.0, 1.0)).sum(dim=1)

    work = 2.0 * x.shape[0] * qa.shape[1] * qb.shape[1] + 2.0 * qa.shape[1] ** 2 * projection.shape[1]
    return statistic, work, _gemm_bytes(qa, qb) + 8.0 * qa.shape[1] * projection.shape[1]


def _square(upper: torch.Tensor, n: int) -> torch.Tensor:
    """The symmetric (n, n) matrix with zero diagonal whose upper triangle (row-major) is ``upper``."""
    out = torch.zeros(n, n, dtype=upper.dtype, device=upper.device)
    i, j = torch.triu_indices(n, n, 1, device=upper.device)
    out[i, j] = upper
    out[j, i] = upper
    return out


def _rsa(x: torch.Tensor, y: torch.Tensor, rdm: str = "correlation", compare: str = "spearman") -> tuple:
    """RSA's statistic on permutations, its work per permutation, and the Mantel matrices for the analytic
    p-value (None for Kendall)."""
    n = x.shape[0]
    centred(x, "X", "RSA")
    centred(y, "Y", "RSA")
    a, b = rdm_upper(x, rdm, "X"), rdm_upper(y, rdm, "Y")
    if compare == "spearman":
        a, b = average_ranks(a), average_ranks(b)
    a, b = a - a.mean(), b - b.mean()
    na, nb = float(torch.linalg.vector_norm(a)), float(torch.linalg.vector_norm(b))
    if na == 0.0 or nb == 0.0:
        raise ValueError("RSA: an RDM has one value only; no test")
    sa, sb = _square(a, n), _square(b, n)
    if compare == "kendall":
        i, j = torch.triu_indices(n, n, 1)
        stat = lambda p: torch.tensor([kendall_tau(a, sb[pk[i], pk[j]]) for pk in p])  # noqa: E731
        return stat, 30.0 * a.numel() * math.log2(max(2, a.numel())), 24.0 * a.numel(), None
    scale = 2.0 * na * nb  # the full matrices count every pair twice
    stat = lambda p: (permuted_inner(sa, sb, p) / scale).clamp(-1.0, 1.0)  # noqa: E731
    return stat, 3.0 * n * n * GATHER_COST, 0.0, (sa, sb, scale)


def _mutual_knn(x: torch.Tensor, y: torch.Tensor, topk: int = 10) -> tuple[Statistic, float]:
    n, a, b = x.shape[0], knn_node(x, topk, "X"), knn_node(y, topk, "Y")
    entries = b.rows.numel()
    return mutual_knn_null(a, b), GATHER_COST * entries * math.log2(max(2, n * a.k)), 40.0 * entries


def _cknna(x: torch.Tensor, y: torch.Tensor, topk: int = 10) -> tuple[Statistic, float]:
    n, a, b = x.shape[0], cknna_node(x, topk, "X"), cknna_node(y, topk, "Y")
    entries = b.graph.rows.numel() + a.graph.rows.numel()
    return cknna_null(a, b), GATHER_COST * entries * math.log2(max(2, n * a.graph.k)), 64.0 * entries


def _regression(x: torch.Tensor, y: torch.Tensor, alpha: float = 1e-3, *, x_test: torch.Tensor,
                y_test: torch.Tensor) -> tuple[Statistic, float]:
    """R^2 on the test rows of the ridge map refitted on permuted training rows of Y (the hat matrix fixed)."""
    front = ridge_front(x, alpha)
    yc, _ = centred(y, "Y (train rows)", "linear-regression")
    eye = torch.eye(x.shape[0], dtype=front.xc.dtype, device=front.xc.device)
    hat = front.predict(eye, x_test - front.mean)  # (n_test, n_train): predictions are hat @ (P Yc)
    target = y_test - y.mean(dim=0)
    total = float(torch.linalg.vector_norm(y_test - y_test.mean(dim=0)) ** 2)
    if not total > 0.0:
        raise ValueError("linear-regression: Y is constant over the test rows; no test")

    def statistic(perms: torch.Tensor) -> torch.Tensor:
        b, dy = len(perms), yc.shape[1]
        stacked = yc[perms.T.reshape(-1).to(yc.device)].reshape(yc.shape[0], b * dy)
        residual = target[:, None, :] - (hat @ stacked).reshape(-1, b, dy)
        return 1.0 - (residual**2).sum(dim=(0, 2)) / total

    return statistic, 2.0 * hat.shape[0] * hat.shape[1] * yc.shape[1], 8.0 * (hat.shape[0] + hat.shape[1]) * yc.shape[1]


MEASURES: dict[str, Callable[..., tuple]] = {
    "procrustes": _procrustes, "cca": _cca, "svcca": lambda x, y, **o: _cca(x, y, "SVCCA", **o), "pwcca": _pwcca,
    "rsa": _rsa, "mutual_knn": _mutual_knn, "cknna": _cknna, "linear_regression": _regression,
}


#: the values each measure can take, which scale its calibrated score (CKNNA has no bound: its masks are not
#: symmetric, so CKA's Cauchy-Schwarz bound does not hold; R^2 is at most 1 and unbounded below)
RANGES: dict[str, tuple[float, float] | None] = {
    "procrustes": (0.0, 1.0), "cca": (0.0, 1.0), "svcca": (0.0, 1.0), "pwcca": (0.0, 1.0), "rsa": (-1.0, 1.0),
    "mutual_knn": (0.0, 1.0), "cknna": None, "linear_regression": (-math.inf, 1.0),
}


def permutation_test(measure: str, X: ArrayLike, Y: ArrayLike, *, permutations: Any = 999, seed: int = 0,
                     kind: str = "similarity", X_test: ArrayLike = None, Y_test: ArrayLike = None,
                     null_values: bool = False, level: float = 0.05, groups: Any = None,
                     permute: str = "within", **options: Any) -> dict[str, Any]:
    """The permutation test of one measure of `similarity_plugins.measures` between X and row-permuted Y.

    Args:
        measure: ``"procrustes"``, ``"cca"``, ``"svcca"``, ``"pwcca"``, ``"rsa"``, ``"mutual_knn"``, ``"cknna"`` or
            ``"linear_regression"`` (then X, Y are the training rows and ``X_test``, ``Y_test`` the test rows).
        X: (n, dx) array or tensor (the front).
        Y: (n, dy), the same n inputs (the end; its rows are permuted).
        permutations: K >= 1 seeded permutations, or a (K, n) integer array of permutations (row k pairs X with
            ``Y[perms[k]]``; `similarity_plugins.stats.designs`).
        seed: the permutations' seed.
        kind: ``"similarity"`` (extreme: high) or ``"distance"`` (extreme: low).
        null_values: also return the K null values in permutation order (``null_values``, `summarise`).
        level: the level of the calibrated score's critical value ``tau`` (the metrics' option ``alpha``; named
            apart here because ``alpha`` is linear regression's ridge strength among ``options``).
        groups: one label per permuted row: permutations move rows only inside their group, or whole groups.
        permute: ``"within"`` or ``"groups"`` (with ``groups``).
        options: the measure's own options (``rdm``, ``compare``, ``topk``, ``variance``, ``dims``, ``alpha``).

    Returns:
        ``{"p_value", "null_mean", "null_std", "permutations", "alpha", "tau", "calibrated"}`` (null values and
            ``tau`` in the measure's units; ``calibrated`` scaled by the measure's range, `RANGES`), with
            ``p_value_analytic`` for RSA with Pearson or Spearman and free permutations (the Mantel test's
            Pearson type III p-value), ``permuted`` (which rows were permuted), ``permute`` and ``groups`` for a
            restricted design, ``warnings`` when the cost exceeds its bound and ``null_values`` when asked.

    Raises:
        ValueError: an unknown measure, bad input, bad permutation options, or a degenerate case the measure
            itself refuses.
    """
    if measure not in MEASURES:
        raise ValueError(f"no permutation test for measure {measure!r}; one of {', '.join(MEASURES)}")
    level = check_alpha(level)
    x, y = pair(X, Y, measure, min_n=3)
    plan = plan_permutations(permutations, x.shape[0], seed, groups, permute)
    extra = {}
    if measure == "linear_regression":
        extra = dict(zip(("x_test", "y_test"), pair(X_test, Y_test, measure, min_n=2)))
    made = MEASURES[measure](x, y, **options, **extra)
    statistic, work, per_permutation = made[:3]
    n, k = x.shape[0], plan.k
    note = check_cost(k, work, f"{measure} permutation test", n=n, distinct=plan.distinct())
    batch = batch_size(per_permutation + 8.0 * n, k)  # the route's copies and the permutations' own storage
    observed = float(statistic(torch.arange(n)[None])[0])
    null = torch.cat([statistic(p) for p in plan.batches(batch)])
    out = summarise(observed, null, kind, keep_null=null_values, alpha=level, bounds=RANGES[measure])
    out.update(plan.details())
    if measure == "rsa" and made[3] is not None and plan.groups is None:
        sa, sb, scale = made[3]
        out["p_value_analytic"] = pearson3_p_value(observed * scale, sa, sb, kind)
    out["permuted"] = ("the end's training rows (the map refitted on each, the test pairs kept)"
                       if measure == "linear_regression" else "the end's rows")
    if note:
        out["warnings"] = [note]
    return out
