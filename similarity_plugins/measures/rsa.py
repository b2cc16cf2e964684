"""Representational similarity analysis: correlate the upper triangles of two dissimilarity matrices (RDMs).

RDMs are computed as SciPy's ``pdist`` computes them (``correlation``: 1 - Pearson correlation of two rows
across features; ``cosine``: 1 - cosine, both through one n x n GEMM per side; ``euclidean``: the plain, not
squared, distance, from per-pair differences), in float64 on the input's device.
The two triangles are compared by Spearman's rho (ties get
their average rank, as ``scipy.stats.rankdata``), Pearson's r, or Kendall's tau-b (``scipy.stats.kendalltau``
on the CPU). Memory is O(n^2): about `BYTES_PER_PAIR_SQUARED` x n^2 bytes at the peak.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..utils.arrays import ArrayLike, available_bytes, format_bytes
from .common import Measured, centred, check_choice, finish, pair

RDMS = ("correlation", "euclidean", "cosine")
COMPARISONS = ("spearman", "pearson", "kendall")
#: peak bytes / n^2: one n x n float64 matrix (elsewhere than the CPU: its triangle mask), two triangles and the
#: ranking's temporaries
BYTES_PER_PAIR_SQUARED = 40


def _unit_rows(z: torch.Tensor, name: str, rdm: str) -> torch.Tensor:
    """Rows of ``z`` scaled to unit norm; a zero row makes its ``rdm`` distance 0/0, which is refused."""
    norms = torch.linalg.vector_norm(z, dim=1)
    zero = int((norms == 0).sum())
    if zero:
        first = int(torch.nonzero(norms == 0)[0, 0])
        why = "are constant across features" if rdm == "correlation" else "are all zero"
        raise ValueError(f"RSA: {zero} row(s) of {name} (first: row {first}) {why}, so their {rdm} distance is "
                         "undefined (0/0; scipy gives NaN); use rdm='euclidean' or drop those samples")
    return z / norms[:, None]


def _upper(square: torch.Tensor) -> torch.Tensor:
    """The entries strictly above the diagonal of an (n, n) matrix, row by row (``pdist``'s order)."""
    n = square.shape[0]
    if square.device.type == "cpu":  # row slices: no n x n mask (boolean indexing builds one)
        a = square.numpy()
        return torch.from_numpy(np.concatenate([a[i, i + 1:] for i in range(n - 1)]))
    return square[torch.ones(n, n, dtype=torch.bool, device=square.device).triu_(1)]


def rdm_upper(x: torch.Tensor, rdm: str, name: str = "X") -> torch.Tensor:
    """The upper triangle (row-major, i < j, like ``pdist``) of the RDM of ``x`` (n, d) float64: (n(n-1)/2,).

    ``correlation`` and ``cosine`` come from one GEMM of the unit rows (``1 - z_i . z_j``, SciPy's formula) and
    are clamped at 0 (rounding can make the distance of identical rows -1e-16). ``euclidean`` is computed
    from per-pair differences (SciPy's ``pdist`` on the CPU, ``torch.cdist`` without the matrix-product
    shortcut elsewhere): through a Gram matrix it would cancel for close rows and split exact ties.
    """
    if rdm == "correlation":
        gram = _gram(_unit_rows(x - x.mean(dim=1, keepdim=True), name, rdm))
    elif rdm == "cosine":
        gram = _gram(_unit_rows(x, name, rdm))
    elif x.device.type == "cpu":  # Euclidean from a Gram matrix cancels for close rows: per-pair differences
        from scipy.spatial.distance import pdist

        return torch.from_numpy(pdist(x.numpy(), "euclidean"))
    else:
        gram = torch.cdist(x, x, compute_mode="donot_use_mm_for_euclid_dist")
    upper = _upper(gram)
    del gram
    if rdm == "euclidean":
        return upper
    return upper.neg_().add_(1.0).clamp_(min=0.0)  # 1 - z_i . z_j


def average_ranks(v: torch.Tensor) -> torch.Tensor:
    """Ranks 1..m of ``v`` (m,), ties sharing their average rank (``scipy.stats.rankdata(method='average')``).

    On the CPU the sort is NumPy's (faster than torch's there); elsewhere torch's.
    """
    if v.device.type == "cpu":
        return torch.from_numpy(_average_ranks_numpy(v.numpy()))
    values, order = torch.sort(v)
    _, inverse, counts = torch.unique_consecutive(values, return_inverse=True, return_counts=True)
    ends = torch.cumsum(counts, 0).to(v.dtype)
    mean_rank = ends - (counts.to(v.dtype) - 1.0) / 2.0
    ranks = torch.empty_like(v)
    ranks[order] = mean_rank[inverse]
    return ranks


def _average_ranks_numpy(v: np.ndarray) -> np.ndarray:
    order = np.argsort(v)
    sorted_v = v[order]
    first = np.empty(len(v), dtype=bool)
    first[0] = True
    np.not_equal(sorted_v[1:], sorted_v[:-1], out=first[1:])
    starts = np.flatnonzero(first)
    ends = np.append(starts[1:], len(v))  # ranks starts+1 .. ends share their mean
    ranks = np.empty(len(v))
    ranks[order] = ((starts + 1 + ends) / 2.0)[np.cumsum(first) - 1]
    return ranks


def _gram(z: torch.Tensor) -> torch.Tensor:
    """``z z^T`` (n, n): on the CPU NumPy's symmetric rank-k update (half the flops of torch's GEMM there)."""
    if z.device.type == "cpu":
        a = z.numpy()
        return torch.from_numpy(a @ a.T)
    return torch.mm(z, z.T)


def _pearson(a: torch.Tensor, b: torch.Tensor) -> float:
    a = a - a.mean()
    b = b - b.mean()
    na, nb = float(torch.linalg.vector_norm(a)), float(torch.linalg.vector_norm(b))
    for norm, which in ((na, "X"), (nb, "Y")):
        if norm == 0.0:
            raise ValueError(f"RSA: every dissimilarity of {which} is the same, so no correlation with it is "
                             "defined (0/0); the representation does not distinguish the samples")
    return max(-1.0, min(1.0, float(torch.dot(a, b)) / (na * nb)))


def kendall_tau(a: torch.Tensor, b: torch.Tensor) -> float:
    """Kendall's tau-b of two 1-D dissimilarity vectors; ``ValueError`` when one of them is constant."""
    from scipy.stats import kendalltau

    tau = float(kendalltau(a.cpu().numpy(), b.cpu().numpy(), variant="b").statistic)
    if math.isnan(tau):
        raise ValueError("RSA: Kendall's tau is undefined: every dissimilarity of X or of Y is the same")
    return tau


def _check_memory(n: int, device: torch.device, max_bytes: int | None) -> None:
    need = BYTES_PER_PAIR_SQUARED * n * n
    budget = int(max_bytes) if max_bytes is not None else available_bytes(device)
    if need > budget:
        largest = int(math.isqrt(max(budget, 0) // BYTES_PER_PAIR_SQUARED))
        raise ValueError(f"RSA on n={n} samples needs about {format_bytes(need)} ({BYTES_PER_PAIR_SQUARED} x n^2 "
                         f"bytes: n x n dissimilarity matrices) but {format_bytes(budget)} is available; use fewer "
                         f"samples: the metric option max_samples (e.g. max_samples={max(largest, 3)}) keeps the first N")


def rsa(X: ArrayLike, Y: ArrayLike, rdm: str = "correlation", compare: str = "spearman", *,
        max_bytes: int | None = None, details: bool = False) -> float | Measured:
    """RSA: the correlation between the upper triangles of the RDMs of X and of Y.

    Args:
        X: (n, dx) array or tensor (higher rank flattens after axis 0).
        Y: (n, dy), the same n inputs.
        rdm: ``"correlation"`` (default), ``"euclidean"`` or ``"cosine"``, as ``scipy.spatial.distance.pdist``.
        compare: ``"spearman"`` (default; average ranks for ties), ``"pearson"`` or ``"kendall"`` (tau-b).
        max_bytes: memory budget for the O(n^2) work; default: free memory of the device now.
        details: return a [`Measured`][Measured] with ``rdm``, ``compare``, ``n`` and ``pairs`` (n(n-1)/2).

    Returns:
        The correlation, in [-1, 1], or a [`Measured`][Measured].

    Raises:
        ValueError: bad input or option, n < 3, a zero-norm (cosine) or feature-constant (correlation) row,
            an RDM with one value only, or more memory than ``max_bytes`` (then pass fewer samples).
    """
    check_choice(rdm, "rdm", RDMS, "RSA")
    check_choice(compare, "compare", COMPARISONS, "RSA")
    x, y = pair(X, Y, "RSA", min_n=3)
    n = x.shape[0]
    centred(x, "X", "RSA")  # refuses a constant representation with the message every measure gives
    centred(y, "Y", "RSA")
    _check_memory(n, x.device, max_bytes)
    a = rdm_upper(x, rdm, "X")
    b = rdm_upper(y, rdm, "Y")
    if compare == "spearman":
        a, b = average_ranks(a), average_ranks(b)
    score = rsa_from_vectors(a, b, compare)
    return finish(score, {"n": n, "pairs": n * (n - 1) // 2, "rdm": rdm, "compare": compare}, details)


def rsa_vector(X: ArrayLike, rdm: str = "correlation", compare: str = "spearman", *, name: str = "X",
               max_bytes: int | None = None) -> torch.Tensor:
    """One representation's RDM as [`rsa`][rsa] compares it, for reuse across many pairs (a grid's node).

    Args:
        X: (n, d) array or tensor.
        rdm: as for [`rsa`][rsa].
        compare: as for [`rsa`][rsa].
        max_bytes: as for [`rsa`][rsa].
        name: the argument in errors.

    Returns:
        (n(n-1)/2,) float64 tensor: the RDM's upper triangle, as average ranks for ``compare="spearman"``.
            ``rsa_from_vectors(rsa_vector(X), rsa_vector(Y), compare)`` equals ``rsa(X, Y)``.
    """
    check_choice(rdm, "rdm", RDMS, "RSA")
    check_choice(compare, "compare", COMPARISONS, "RSA")
    x, _ = pair(X, X, "RSA", min_n=3)
    centred(x, name, "RSA")
    _check_memory(x.shape[0], x.device, max_bytes)
    a = rdm_upper(x, rdm, name)
    return average_ranks(a) if compare == "spearman" else a


def rsa_from_vectors(a: torch.Tensor, b: torch.Tensor, compare: str = "spearman") -> float:
    """RSA from two vectors of `rsa_vector` (the same ``rdm`` and ``compare``): their Pearson correlation
    (Spearman when they hold ranks), or Kendall's tau-b. Raises ``ValueError`` for a constant RDM."""
    if a.shape != b.shape:
        raise ValueError(f"RSA: the two RDMs differ in size ({a.shape[0]} and {b.shape[0]} pairs): the same n inputs "
                         "are needed")
    if compare == "kendall":
        _pearson(a, b)  # the same refusal for a constant RDM as the other comparisons
        return kendall_tau(a, b)
    return _pearson(a, b)
