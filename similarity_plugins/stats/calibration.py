"""Calibrated scores: a similarity measured against its own permutation null (Groeger, Wen and Brbic 2026).

Raw scores drift with width, depth and the number of samples: two unrelated wide layers already score high.
The permutation null of a test says what the score is when the pairing of the rows carries nothing, and
the calibrated score counts only what lies beyond it:

- ``tau``: the ``ceil((1 - alpha) (K + 1))``-th smallest of the K + 1 values formed by the observed score and
  its K null values (for a distance the as many-th largest): the critical value of the level-``alpha`` test.
- ``calibrated``: ``clamp((s - tau) / (smax - tau), 0, 1)`` with ``smax`` the metric's declared upper bound,
  or ``relu(s - tau)`` for a metric without one; for a distance ``(tau - s) / (tau - smin)`` with the lower
  bound. It is 0 whenever the test does not reject at level ``alpha``, and 1 at the bound.

The same functions calibrate one cell (its K null values) and the aggregate of a grid's block (the maximum or
mean over the block's cells under each joint permutation), as the authors' ``calibrated-similarity`` package
does with ``calibrate`` and ``calibrate_layers``.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch

from ..utils.value_rules import Interval

#: the level of the critical value ``tau`` unless an ``alpha`` option says otherwise
DEFAULT_ALPHA = 0.05
#: What the option ``alpha`` must be.
ALPHA_RULE = Interval(float, 0, 1, closed="neither", note="(the level of the calibrated score's critical value tau, "
                                                          "e.g. alpha=0.05)")


def check_alpha(value: Any) -> float:
    """The option ``alpha`` as a float in (0, 1) (`ALPHA_RULE`); ``ValueError`` naming the option otherwise (booleans,
    text and NaN included)."""
    return ALPHA_RULE.check("alpha", value)


def _values(null: Sequence[float] | torch.Tensor) -> torch.Tensor:
    if isinstance(null, torch.Tensor):
        return null.detach().double().cpu().reshape(-1)
    return torch.tensor([float(v) for v in null], dtype=torch.float64)


def critical_value(observed: float, null: Sequence[float] | torch.Tensor, alpha: float, kind: str | None) -> float:
    """``tau``: the ``ceil((1 - alpha) (K + 1))``-th smallest of ``observed`` and the K ``null`` values.

    Args:
        observed: the statistic on the real pairing.
        null: the K null values.
        alpha: the level, in (0, 1).
        kind: ``"distance"`` takes the as many-th largest (small values are extreme); anything else a similarity.

    Returns:
        The critical value, one of the K + 1 values.
    """
    combined = torch.sort(torch.cat([torch.tensor([float(observed)], dtype=torch.float64), _values(null)])).values
    k = combined.numel() - 1
    index = min(max(int(math.ceil((1.0 - float(alpha)) * (k + 1))) - 1, 0), k)
    return float(combined[k - index] if kind == "distance" else combined[index])


def calibrated_score(score: float, tau: float, bounds: tuple[float, float] | None, kind: str | None) -> float:
    """The score beyond the critical value, scaled to the room the bound leaves.

    Args:
        score: the observed score.
        tau: its critical value (`critical_value`).
        bounds: the metric's declared ``(lo, hi)`` range, or None; an infinite bound counts as none.
        kind: ``"distance"`` (beyond means below ``tau``, scaled by the lower bound) or a similarity.

    Returns:
        In [0, 1] with a bound: ``(s - tau) / (smax - tau)`` clamped (distances mirrored); ``max(0, s - tau)`` in the
            score's units without one.
    """
    distance = kind == "distance"
    excess = (tau - score) if distance else (score - tau)
    edge = None if bounds is None else (bounds[0] if distance else bounds[1])
    if excess <= 0.0:
        return 0.0
    if edge is None or not math.isfinite(edge):
        return float(excess)
    room = (tau - edge) if distance else (edge - tau)
    return 1.0 if room <= 0.0 else min(1.0, excess / room)


def calibrate(observed: float, null: Sequence[float] | torch.Tensor, alpha: float, bounds: tuple[float, float] | None,
              kind: str | None) -> dict[str, float]:
    """``{"alpha", "tau", "calibrated"}`` of ``observed`` against its K ``null`` values (see the module docstring)."""
    tau = critical_value(observed, null, alpha, kind)
    return {"alpha": float(alpha), "tau": tau, "calibrated": calibrated_score(float(observed), tau, bounds, kind)}
