"""Permutation nulls shared by every activation measure: seeded row permutations, p-values, exact moments.

A permutation test of a measure between X (n, dx) and Y (n, dy) scores ``K`` copies of Y with its rows
permuted (the pairing of the two sides broken, each side's own structure kept) against X, and reports
where the observed score falls among them (`summarise`). The measures compute those scores by
permuting what they derive from each side (a centred Gram matrix, an RDM, a whitened basis, neighbour
sets); this module holds what they share:

- `check_permutations`: the ``permutations`` option's value rule (a whole number >= 0).
- `draws`: the ``K`` permutations of ``n`` rows from a seed, the same on every device and thread count.
- `summarise`: ``p_value`` = (1 + #null at least as extreme) / (K + 1), ``null_mean``, ``null_std``.
- `permuted_inner`: ``sum_ij A_ij B_{p(i) p(j)}`` for each permutation ``p``: CKA and RSA statistics.
- `permutation_moments` and `pearson3_p_value`: the exact mean, variance and skewness of
  that statistic over all n! permutations and the Pearson type III p-value built from them
  (Kazi-Aoual et al. 1995; Josse, Pages and Husson 2008), without sampling.
- `check_cost`: a warning before the work when ``K`` permutations exceed `WORK_BOUND`
  operations or a measure's matrices exceed the memory available.
"""

from __future__ import annotations

import math
import warnings
from functools import lru_cache
from typing import Any, Iterator

import numpy as np
import torch

from ..utils.value_rules import Interval
from .calibration import calibrate

#: operations of all K permutations together (multiply-adds; a gathered or looked-up value counts
#: :data:`GATHER_COST`) above which a measure warns before the work: about ten minutes of one CPU core
WORK_BOUND = 1e13
#: multiply-adds one gathered value costs (the blocked gathers of :func:`permuted_inner` against a BLAS GEMM,
#: measured on a CPU); it decides between the Gram and the feature route of linear CKA
GATHER_COST = 120.0
#: operations one permutation costs whatever its size: drawing it (``torch.randperm``) and the per-batch Python
#: work, counted so that a small N with a huge K is not underestimated
PERMUTATION_COST = 1e5
#: bytes each permutation's null value holds until the summary (a float64, twice while the batches are joined)
NULL_BYTES = 16.0
#: bytes of gathered rows per block in :func:`permuted_inner` (a block and its column gather stay in cache)
GATHER_BLOCK_BYTES = 1 << 20
#: bytes a batch of permuted copies may take (permutations are scored this many at a time, not all at once)
BATCH_BYTES = 128 << 20
#: relative tolerance under which a null value counts as equal to the observed one (rounding of the same number
#: computed through another summation order)
TIE_RTOL = 1e-9
_SALT = 0x9E37  # the permutations' seed stream differs from the split draws' of the same seed


#: What a number of permutations must be.
PERMUTATION_COUNT = Interval(int, 0, what="whole number of permutations", note="(0: no test; e.g. permutations=999)")


class PermutationCostWarning(UserWarning):
    """A permutation test whose work or memory exceeds the documented bound (`WORK_BOUND`, free memory)."""


def check_permutations(value: Any) -> int:
    """The option ``permutations`` as an int >= 0 (0: no test; `PERMUTATION_COUNT`); ``ValueError`` naming the option
    otherwise. Whole floats (``1000.0``) are taken; bools, fractions, negatives and text are refused."""
    return PERMUTATION_COUNT.check("permutations", value)


def seeded_generator(seed: int) -> torch.Generator:
    """The CPU generator of the permutations drawn from ``seed`` (its own stream: the same seed's other draws,
    such as a train/test split, do not share it)."""
    state = np.random.SeedSequence([int(seed) & 0xFFFFFFFF, _SALT]).generate_state(2, dtype=np.uint32)
    return torch.Generator().manual_seed(int(state[0]) << 32 | int(state[1]))


def draws(n: int, k: int, seed: int, batch: int) -> Iterator[torch.Tensor]:
    """The ``k`` permutations of ``range(n)`` from ``seed``, ``batch`` at a time: int64 CPU tensors (b, n).

    Drawn one by one (``torch.randperm`` on a CPU generator seeded from ``seed``), so the sequence does not
    depend on ``batch``, the device or the thread count.
    """
    gen = seeded_generator(seed)
    batch = max(1, int(batch))
    for start in range(0, k, batch):
        yield torch.stack([torch.randperm(n, generator=gen) for _ in range(min(batch, k - start))])


def batch_size(bytes_per_permutation: float, k: int) -> int:
    """How many permutations to score at once so that their copies stay under `BATCH_BYTES`."""
    return max(1, min(k, int(BATCH_BYTES // max(1.0, bytes_per_permutation))))


def summarise(observed: float, null: torch.Tensor, kind: str | None, keep_null: bool = False,
              alpha: float | None = None, bounds: tuple[float, float] | None = None) -> dict[str, Any]:
    """The permutation test's details: ``p_value``, ``null_mean``, ``null_std`` (ddof 1) and ``permutations``, and
    with ``alpha`` the calibrated score (`similarity_plugins.stats.calibration`).

    Args:
        observed: the statistic on the unpermuted pairing, computed the way the null values are.
        null: (K,) float64 statistics of the K permutations.
        kind: ``"distance"``: extreme means at most ``observed``; otherwise (a similarity) at least ``observed``.
            Values within `TIE_RTOL` of ``observed`` (relative to the largest magnitude) count as ties,
            which are extreme: rounding of the same number never lowers a p-value.
        keep_null: also return the K null values, in the order of the permutations (``null_values``), so that a
            grid can form the maximum over its cells per permutation.
        alpha: the level of the critical value ``tau``; None: no calibrated score.
        bounds: the metric's declared ``(lo, hi)`` range (None: unbounded), which scales the calibrated score.

    Returns:
        ``{"p_value": float in [1/(K+1), 1], "null_mean": float, "null_std": float, "permutations": K}``, with
            ``"alpha"``, ``"tau"`` and ``"calibrated"`` when ``alpha`` is given, and ``"null_values"`` (a list of K
            floats) when ``keep_null``; ``null_std`` is NaN for K = 1 (a standard deviation with ddof 1 needs two
            values).
    """
    values = null.double().cpu()
    k = int(values.numel())
    tol = TIE_RTOL * max(abs(observed), float(values.abs().max()) if k else 0.0, 1e-300)
    extreme = values <= observed + tol if kind == "distance" else values >= observed - tol
    std = float(values.std()) if k > 1 else math.nan  # ddof 1: undefined for one value, not 0
    out = {"p_value": (1 + int(extreme.sum())) / (k + 1), "null_mean": float(values.mean()) if k else math.nan,
           "null_std": std, "permutations": k}
    if alpha is not None:
        out.update(calibrate(observed, values, alpha, bounds, kind))
    if keep_null:
        out["null_values"] = values.tolist()
    return out


def permuted_inner(a: torch.Tensor, b: torch.Tensor, perms: torch.Tensor) -> torch.Tensor:
    """``sum_ij a_ij b_{p(i) p(j)}`` for each row ``p`` of ``perms``: (K,) float64.

    Args:
        a: (n, n) symmetric float64 matrix (a centred Gram matrix, an RDM).
        b: (n, n) symmetric float64 matrix on the same device as ``a``.
        perms: (K, n) int64 permutations.

    Returns:
        (K,) float64 tensor on the CPU, exact up to float64 rounding of the sum.

    O(n^2) per permutation. On the CPU, by symmetry, only the pairs ``i <= j`` are visited (`upper_blocks`):
    for each row block of about ``GATHER_BLOCK_BYTES``, every permutation's rows ``p(i)`` of ``b`` are gathered
    (a contiguous copy), then their columns ``p(j)`` inside the block, which stays in cache, and the block meets
    the same weighted part of ``a``, read once for all the permutations, in one dot product. Elsewhere two
    whole-matrix gathers.
    """
    out = torch.empty(len(perms), dtype=torch.float64)
    if b.device.type != "cpu":
        rows, both = torch.empty_like(b), torch.empty_like(b)
        flat = a.reshape(-1)
        for i, p in enumerate(perms.to(b.device)):
            torch.index_select(b, 0, p, out=rows)
            torch.index_select(rows, 1, p, out=both)
            out[i] = dot(flat, both.reshape(-1))
        return out
    bn = b.numpy()
    totals = np.zeros(len(perms))
    for start, stop, weights in upper_blocks(a.numpy()):
        for i, p in enumerate(perms.numpy()):
            totals[i] += np.vdot(weights, bn[p[start:stop]].take(p[start:], axis=1))
    out[:] = torch.from_numpy(totals)
    return out


def upper_blocks(a: np.ndarray) -> list[tuple[int, int, np.ndarray]]:
    """``a``'s rows in blocks of about ``GATHER_BLOCK_BYTES``, each from its diagonal on, with the entries right
    of the diagonal block doubled: ``sum_ij a_ij c_ij = sum over blocks of <weights, c[start:stop, start:]>`` for
    every symmetric ``c``, which visits each pair ``i <= j`` once. ``a`` is (n, n), or (n, n, m): m symmetric
    matrices stacked on the last axis, blocked together."""
    n = a.shape[0]
    step = max(1, GATHER_BLOCK_BYTES // (8 * n * int(np.prod(a.shape[2:], dtype=np.int64))))
    blocks = []
    for start in range(0, n, step):
        stop = min(n, start + step)
        weights = a[start:stop, start:] * 2.0
        weights[:, : stop - start] = a[start:stop, start:stop]
        blocks.append((start, stop, weights))
    return blocks


def dot(a: torch.Tensor, b: torch.Tensor) -> float:
    """``sum(a * b)`` of two 1-D float64 tensors: NumPy's on the CPU (torch's ``dot`` there can take
    milliseconds for a few thousand values when other processes hold the cores), torch's elsewhere."""
    if a.device.type == "cpu":
        return float(np.dot(a.numpy(), b.numpy()))
    return float(torch.dot(a, b))


def check_cost(k: int, work_per_permutation: float, what: str, matrix_bytes: float = 0.0,
               available: float | None = None, n: int | None = None, distinct: int | None = None) -> str | None:
    """Warn (`PermutationCostWarning`) before the work when ``k`` permutations would exceed a bound.

    Args:
        k: the number of permutations.
        work_per_permutation: operations one permutation costs (multiply-adds; gathers weighted by GATHER_COST);
            `PERMUTATION_COST` is added for drawing each permutation.
        what: the measure, for the message.
        matrix_bytes: bytes of the derived matrices the test holds besides the score's own (n x n Grams).
        available: bytes of memory available (None: the machine's, `available_bytes`); the matrices and the
            null values (`NULL_BYTES` per permutation) must fit.
        n: the number of samples; with it, a note when ``k`` is near or above the ``n!`` distinct permutations
            (draws then repeat, so more permutations add little).
        distinct: the number of distinct permutations when the design restricts them (`PermutationPlan.distinct`),
            instead of ``n!``.

    Returns:
        The warning's text (also for ``details["warnings"]``), or None when within the bounds.
    """
    from ..utils.arrays import available_bytes

    total = float(k) * (float(work_per_permutation) + PERMUTATION_COST)
    problems = []
    if total > WORK_BOUND:
        problems.append(f"about {total:.2g} operations ({float(work_per_permutation) + PERMUTATION_COST:.2g} per "
                        f"permutation), above the bound WORK_BOUND = {WORK_BOUND:.0e} of "
                        "similarity_plugins.stats.permutation (about ten minutes of one CPU core)")
    memory = float(matrix_bytes) + NULL_BYTES * float(k)
    available = float(available_bytes()) if available is None else float(available)
    if memory > available:
        problems.append(f"{memory / 2**30:.3g} GiB for its matrices and null values, above the "
                        f"{available / 2**30:.3g} GiB of memory available")
    repeats = _repeat_note(k, n, distinct)
    if not problems and repeats is None:
        return None
    text = (f"{what}: permutations={k} needs " + " and ".join(problems)
            + "; use fewer permutations or fewer samples (max_samples)") if problems else f"{what}: {repeats}"
    if problems and repeats is not None:
        text += f"; {repeats}"
    warnings.warn(text, PermutationCostWarning, stacklevel=3)
    return text


def _repeat_note(k: int, n: int | None, distinct: int | None = None) -> str | None:
    """A note when ``k`` draws from the ``n!`` permutations (or the ``distinct`` ones of a restricted design) repeat
    often (``k >= distinct / 10``), or None."""
    among = f"the {distinct} distinct permutations of the design"
    if distinct is None:
        if n is None or n > 20:  # 20! > 2e18 draws: never reached
            return None
        distinct = math.factorial(int(n))
        among = f"{n}! = {distinct} distinct permutations of the {n} samples"
    if k * 10 < distinct:
        return None
    share = distinct / k * -math.expm1(-k / distinct)  # expected share of distinct draws among k
    return (f"permutations={k} draws from only {among}, so about {100 * (1 - share):.0f}% of the draws repeat one "
            "already drawn" + (" (more permutations than exist)" if k > distinct else "")
            + f"; the p-value cannot resolve below 1/{distinct}: use at most about {max(1, distinct // 10)} "
            "permutations, or more samples")


# -- exact moments of T = sum_ij A_ij B_{p(i) p(j)} over uniform permutations p ----------------------------------

def _growth_strings(m: int) -> list[tuple[int, ...]]:
    """Every set partition of ``m`` positions, as restricted growth strings (block index per position)."""
    out: list[tuple[int, ...]] = []

    def grow(prefix: list[int], top: int) -> None:
        if len(prefix) == m:
            out.append(tuple(prefix))
            return
        for block in range(top + 2):
            grow(prefix + [block], max(top, block))

    grow([0], 0)
    return out


@lru_cache(maxsize=None)
def _coarsenings(blocks: int) -> tuple[tuple[tuple[int, ...], int], ...]:
    """Each partition ``g`` of ``blocks`` blocks with its Moebius weight prod (-1)^(s-1) (s-1)! over g's blocks."""
    out = []
    for g in _growth_strings(blocks):
        weight = 1
        for size in np.bincount(g):
            weight *= (-1) ** (int(size) - 1) * math.factorial(int(size) - 1)
        out.append((g, weight))
    return tuple(out)


def _first_seen(edges: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
    """``edges`` with the labels renamed 0, 1, ... in order of first appearance."""
    rename: dict[int, int] = {}
    return tuple(tuple(rename.setdefault(v, len(rename)) for v in e) for e in edges)


@lru_cache(maxsize=None)
def _canonical(edges: tuple[tuple[int, int], ...]) -> tuple:
    """A key equal for edge lists that are the same multigraph up to relabelling (symmetric matrices)."""
    labels = sorted({v for e in edges for v in e})
    best = None
    for order in _label_orders(len(labels)):
        rename = {v: order[i] for i, v in enumerate(labels)}
        key = tuple(sorted(tuple(sorted((rename[x], rename[y]))) for x, y in edges))
        best = key if best is None or key < best else best
    return best


@lru_cache(maxsize=None)
def _label_orders(b: int) -> tuple[tuple[int, ...], ...]:
    import itertools

    return tuple(itertools.permutations(range(b)))


@lru_cache(maxsize=None)
def _plan(order: int) -> tuple[tuple[int, tuple[tuple[tuple, int], ...]], ...]:
    """For E[T^order]: each coincidence pattern tau of the 2 x order indices, as its number of blocks and the
    Moebius expansion of its distinct-label sum, ``S(tau) = sum_key weight W(key)`` over the partitions coarser
    than tau (keys: canonical multigraphs, `_canonical`)."""
    out = []
    for tau in _growth_strings(2 * order):
        blocks = max(tau) + 1
        terms: dict[tuple, int] = {}
        for g, weight in _coarsenings(blocks):
            merged = [g[t] for t in tau]
            key = _canonical(_first_seen(tuple((merged[2 * i], merged[2 * i + 1]) for i in range(order))))
            terms[key] = terms.get(key, 0) + weight
        out.append((blocks, tuple((key, w) for key, w in terms.items() if w)))
    return tuple(out)


def _pattern_sum(m: np.ndarray, key: tuple, memo: dict) -> float:
    """``W(key) = sum over labels of prod_(x, y) in key m[label x, label y]`` (an einsum; memoised in ``memo``)."""
    if key not in memo:
        letters = "abcdefgh"
        spec = ",".join(letters[x] + letters[y] for x, y in key) + "->"
        memo[key] = float(np.einsum(spec, *([m] * len(key)), optimize="greedy"))
    return memo[key]


def _raw_moment(a: np.ndarray, b: np.ndarray, order: int, memos: tuple[dict, dict]) -> float:
    """E[T^order] = sum over coincidence patterns tau of S_A(tau) S_B(tau) / (n)_{|tau|} (S: sums over distinct
    labels, from the unrestricted pattern sums by Moebius inversion, `_plan`)."""
    n = a.shape[0]
    total = 0.0
    for blocks, terms in _plan(order):
        if blocks > n:
            continue
        sa = sum(w * _pattern_sum(a, key, memos[0]) for key, w in terms)
        sb = sum(w * _pattern_sum(b, key, memos[1]) for key, w in terms)
        total += sa * sb / math.perm(n, blocks)
    return total


def permutation_moments(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float, float]:
    """Exact mean, variance and skewness of ``T = sum_ij a_ij b_{p(i) p(j)}`` over all n! permutations p.

    Args:
        a: (n, n) symmetric float64 matrix (its diagonal included in T).
        b: (n, n) symmetric float64 matrix (its diagonal included in T).

    Returns:
        ``(mean, variance, skewness)`` of T; the skewness is 0 when the variance is 0.

    Every moment is a sum over the patterns in which the 2m indices of T^m coincide (Bell(6) = 203 for the
    third), each a contraction of the matrices (at most one n x n x n product per matrix); exact up to float64
    rounding, at about the cost of two n x n matrix products.
    """
    an, bn = (np.ascontiguousarray(t.double().cpu().numpy()) for t in (a, b))
    memos: tuple[dict, dict] = ({}, {})
    m1, m2, m3 = (_raw_moment(an, bn, r, memos) for r in (1, 2, 3))
    var = max(0.0, m2 - m1 * m1)
    if var == 0.0:
        return m1, 0.0, 0.0
    mu3 = m3 - 3.0 * m1 * m2 + 2.0 * m1**3
    return m1, var, mu3 / var**1.5


def pearson3_p_value(observed: float, a: torch.Tensor, b: torch.Tensor, kind: str | None = "similarity") -> float:
    """P-value of ``observed = sum_ij a_ij b_ij`` against the permutation distribution of T (see
    `permutation_moments`), approximated by the Pearson type III law with its exact first three moments.

    Returns the upper tail P(T >= observed) for a similarity, the lower one for a distance; NaN when T does not
    vary over permutations.
    """
    from scipy.stats import pearson3

    mean, var, skew = permutation_moments(a, b)
    if var <= 0.0:
        return math.nan
    z = (observed - mean) / math.sqrt(var)
    p = pearson3.cdf(z, skew) if kind == "distance" else pearson3.sf(z, skew)
    return float(min(1.0, max(0.0, p)))
