"""Per-sample step-size schedules: each sample follows the schedule on its own step count.

All functions take and return host NumPy vectors (one entry per sample in the working batch), so the
schedule of a sample never depends on which batch it shares or when it entered it.
"""

from __future__ import annotations

import numpy as np

SCHEDULES = ("cosine", "exp", "step", "constant")


def multiplier(schedule: str, t: np.ndarray, horizon: np.ndarray | int, *, floor: float = 0.0,
               stages: int = 4) -> np.ndarray:
    """Step-size multiplier in (0, 1] for samples at step ``t`` of a cycle lasting ``horizon`` steps.

    - "cosine": ``floor + (1 - floor) * (1 + cos(pi * t / horizon)) / 2`` (1 at the start, ``floor`` at the end);
    - "exp": geometric decay from 1 to ``floor`` (> 0): ``floor ** (t / horizon)``, as many steps per decade;
    - "step": halved at each of ``stages`` equal stages: ``0.5 ** floor(stages * t / horizon)``;
    - "constant": 1.
    ``t``: (B,) int, ``horizon``: scalar or (B,) int > 0. Returns (B,) float64.
    """
    p = np.clip(np.asarray(t, dtype=np.float64) / np.maximum(np.asarray(horizon, dtype=np.float64), 1.0), 0.0, 1.0)
    if schedule == "cosine":
        return floor + (1.0 - floor) * 0.5 * (1.0 + np.cos(np.pi * p))
    if schedule == "exp":
        return np.power(max(floor, 1e-12), p)
    if schedule == "step":
        return 0.5 ** np.minimum(np.floor(stages * p), stages - 1)
    if schedule == "constant":
        return np.ones_like(p)
    raise ValueError(f"unknown schedule {schedule!r}; choose one of {', '.join(SCHEDULES)}")
