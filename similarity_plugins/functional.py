"""Array-level similarity measures: NumPy arrays or torch tensors in, a float out.

CKA (`similarity_plugins.cka`: ``cka``, ``StreamingLinearCKA``, Gram helpers) and the representational
measures of `similarity_plugins.measures`, named like their metrics with underscores: ``procrustes``,
``cca``, ``svcca``, ``pwcca``, ``rsa``, ``linear_regression``, ``mutual_knn``, ``cknna``.

Convention: every function takes ``(X, Y, ...)`` of shape (n, dx), (n, dy) with the same input checks and
returns the score as a Python float. The representational measures also take ``details=True`` and then
return a [`Measured`][Measured] (``.score``, the same float, and ``.details``, a dict of plain values such as
``correlations`` or ``angular_distance``; ``float(result)`` is the score): the dict a metric's row shows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .cka import *  # noqa: F401,F403
from .cka import __all__ as _cka_all
from .measures import *  # noqa: F401,F403
from .measures import __all__ as _measures_all
from .utils.rules import as_positive_int

if TYPE_CHECKING:  # names for the annotations only
    import numpy as np
    import torch

    from .store.store import StoredArray

__all__ = [*_cka_all, *_measures_all]


def streamed(x: np.ndarray | torch.Tensor | StoredArray, y: np.ndarray | torch.Tensor | StoredArray,
             measure: str = "cka-linear", *, rows: int = 8192, memory_budget: int | None = None,
             permutations: int = 0, seed: int = 0, shared_samples: bool = False) -> float:
    """A measure of ``x`` and ``y`` computed ``rows`` samples at a time, in memory that does not grow with n.

    Args:
        x: (n, dx) rows: a NumPy array, a tensor (any device, also one that requires grad), or a store entry
            (``Store.load``: read from disk by blocks).
        y: (n, dy) rows of the same n samples. Two store entries are paired by sample id first (the same samples in
            another order are read in one order; other samples or other data are refused, see ``shared_samples``).
        measure: ``cka-linear``, ``cka-debiased``, ``procrustes``, ``cca``, ``svcca``, ``pwcca`` or
            ``linear-regression`` (bounded memory: float64 moments of ``8 (dx + dy)^2`` bytes or so; the
            regression fits on the train rows of ``score``'s seeded 80/20 split and scores on its test rows), or
            ``cka-rbf``, ``rsa``, ``mutual-knn``, ``cknna`` (n x n: both arrays are loaded, after a ``MemoryBudgetWarning``
            when ``nxn_bytes`` plus the arrays exceed ``memory_budget``).
        rows: samples read per block (memory: ``rows * (dx + dy) * 8`` bytes for the float64 block).
        memory_budget: bytes an n x n measure may take before the warning; default 4 GiB.
        permutations: refused when above 0: a permutation test needs one full pass over both arrays per
            permutation (see the module `measures.streamed`); ``score`` gives p-values on loaded arrays.
        seed: the seed of the regression's split (``score``'s ``seed``).
        shared_samples: for two store entries whose sample ids differ, keep the samples both hold (a warning says
            how many each loses) instead of refusing them.

    Returns:
        The measure's value, equal to the in-memory function on the whole arrays (for the regression: to ``score``
            on the same arrays and seed) up to float64 rounding (the same sums in another order).

    Raises:
        ValueError: an unknown measure, rows that differ in number, ``permutations`` above 0, and every refusal of
            the in-memory measure with its message (too few samples, a constant side, NaN or Inf).
        StoreError: two store entries of different samples or data.
    """
    import numpy as np

    from .cka.streaming import StreamingLinearCKA
    from .measures import streamed as _s
    from .store.rows import align, as_entries
    from .utils.arrays import paired_blocks, to_numpy
    from .utils.rng import check_seed, drawn_split

    if not isinstance(rows, int) or as_positive_int(rows) is None:
        raise ValueError(f"rows must be a positive integer, got {rows!r}")
    if permutations:
        raise ValueError(f"streamed {measure} takes no permutations ({permutations} asked): each permutation pairs "
                         "every row of x with another row of y, a full pass over both arrays per permutation; "
                         "for a p-value use score(x, y, ..., options={'permutations': K}) on arrays that fit in "
                         "memory, or subsample with max_samples")
    if measure not in _s.STREAMED + _s.NXN:
        raise ValueError(f"unknown measure {measure!r}; streamed: {', '.join(_s.STREAMED)}; n x n: {', '.join(_s.NXN)}")
    entries = as_entries(x, y)
    if entries is not None:
        x, y = align(entries, shared=shared_samples).views
    if measure in _s.NXN:
        n, dims = len(x), [int(np.prod(a.shape[1:])) for a in (x, y)]
        _s.check_budget(_s.nxn_bytes(n, measure) + 8 * n * sum(dims), f"{measure} on n = {n} samples", memory_budget)
        xa, ya = to_numpy(np.asarray(x) if entries else x, "X"), to_numpy(np.asarray(y) if entries else y, "Y")
        if measure == "cka-rbf":
            return float(cka(xa, ya, "rbf"))  # noqa: F405 - from .cka
        pick = {"rsa": rsa, "mutual-knn": mutual_knn, "cknna": cknna}  # noqa: F405 - from .measures
        return float(pick[measure](xa, ya))
    if measure == "linear-regression":
        if len(x) != len(y):
            raise ValueError(f"x has {len(x)} rows and y {len(y)}: a streamed measure needs the same samples in both")
        if len(x) < 2:
            raise ValueError(f"linear-regression needs at least 2 samples but got n={len(x)}; pass more samples")
        split = {k: v.numpy() for k, v in drawn_split(len(x), check_seed(seed)).items()}
        views = [_s.RowView(a, split[k]) for k in ("train", "test") for a in (x, y)]
        return _s.streamed_regression(*views, rows=rows).score
    if measure in ("procrustes", "cca", "svcca", "pwcca"):
        return _s.from_moments(_s.moments(x, y, rows, measure), measure).score
    acc = StreamingLinearCKA(debiased=measure == "cka-debiased")
    for xb, yb in paired_blocks(x, y, rows, "CKA"):
        acc.update(xb, yb)
    if acc.n == 0:
        raise ValueError("CKA needs at least 3 samples (with 2, every pair of representations scores 1) but got n=0; "
                         "use more samples")
    return acc.compute()


__all__ += ["streamed"]
