"""Bootstrap interval of a stitching score over test samples.

The score of a stitch is the relative accuracy ``mean(stitched correct) / mean(end correct)`` on the
test set. `relative_accuracy_ci` resamples the test indices with replacement (the same indices for
both vectors, so the pairing of a sample's two outcomes is kept), recomputes the ratio per resample and
returns the 2.5 and 97.5 percentiles: a 95% interval for the test-sample uncertainty of that one stitch.
It does not cover the randomness of fitting the stitch or generating IRIs (see ``compare(repeats=...)``).
"""

from __future__ import annotations

import torch

DEFAULT_RESAMPLES = 1000
_MAX_GATHER = 4_000_000  # indices gathered at once (bounds memory to ~32 MB of int64)


def relative_accuracy_ci(stitched_correct: torch.Tensor, end_correct: torch.Tensor, *,
                         resamples: int = 1000, level: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of ``mean(stitched_correct) / mean(end_correct)``.

    - ``stitched_correct``, ``end_correct``: (N,) bool or 0/1 tensors, one entry per test sample.
    - ``resamples``: bootstrap resamples (default 1,000); ``level``: coverage in (0, 1);
      ``seed``: the generator's seed (fixed, so the interval is reproducible).

    Returns ``(low, high)``, floats. Resamples where the end model gets nothing right (ratio undefined)
    are left out. The interval is widened to contain the point estimate when a very skewed resample
    distribution would exclude it. Vectorised: ``resamples x N`` index gathers in chunks.
    """
    a = torch.as_tensor(stitched_correct).reshape(-1).double()
    b = torch.as_tensor(end_correct).reshape(-1).double()
    if a.shape != b.shape or a.numel() == 0:
        raise ValueError(f"need two non-empty correctness vectors of equal length, got {tuple(a.shape)} and {tuple(b.shape)}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if int(resamples) < 2:
        raise ValueError(f"resamples must be at least 2, got {resamples}")
    n = a.numel()
    point = float(a.mean() / b.mean()) if b.sum() > 0 else float("nan")
    gen = torch.Generator().manual_seed(int(seed))
    chunk = max(1, _MAX_GATHER // n)
    ratios = []
    for start in range(0, int(resamples), chunk):
        rows = min(chunk, int(resamples) - start)
        idx = torch.randint(n, (rows, n), generator=gen)
        ratios.append(a[idx].sum(1) / b[idx].sum(1))
    values = torch.cat(ratios)
    values = values[torch.isfinite(values)]
    if values.numel() == 0:
        return point, point
    tail = (1.0 - level) / 2
    low, high = (float(v) for v in torch.quantile(values, torch.tensor([tail, 1.0 - tail], dtype=values.dtype)))
    if point == point:  # not NaN
        low, high = min(low, point), max(high, point)
    return low, high
