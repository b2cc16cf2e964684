"""What the representational measures share: inputs as float64 tensors, centring, choices, memory, results.

Every measure takes two (n, d) arrays or tensors of the same n inputs (NumPy: computed on the CPU; torch:
on the tensor's device), checked by `similarity_plugins.utils.arrays` exactly as CKA checks its
inputs, and computes in float64. With ``details=True`` it returns a [`Measured`][Measured] (score and a dict).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable

import torch

from ..utils.arrays import ArrayLike, as_samples, check_same_n, raise_if_constant, raise_nonfinite, to_tensor
from ..utils.rules import as_positive_int
from ..utils.value_rules import OneOf

EPS = float(torch.finfo(torch.float64).eps)


@dataclass(frozen=True)
class Measured:
    """A score with its details: what ``functional.<measure>(X, Y, ..., details=True)`` returns.

    ``score`` is the same float the call returns without ``details``; ``details`` holds the measure's extra
    numbers (e.g. ``correlations`` for CCA, ``angular_distance`` for Procrustes) as plain Python values
    (floats, ints, strings, lists), ready for JSON. ``float(result)`` is the score.
    """

    score: float
    details: dict[str, Any] = field(default_factory=dict)

    def __float__(self) -> float:
        return float(self.score)


def finish(score: float, details: dict[str, Any], want_details: bool) -> float | Measured:
    """``Measured(score, details)`` when ``want_details``, else the float score."""
    return Measured(float(score), details) if want_details else float(score)


def pair(X: ArrayLike, Y: ArrayLike, what: str, min_n: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    """``X``, ``Y`` as (n, dx), (n, dy) float64 tensors on one device, finite, with at least ``min_n`` rows.

    Raises ``ValueError`` naming the argument: complex or non-numeric dtype, empty, NaN/Inf, rows that do
    not match, fewer than ``min_n`` samples, or tensors on two devices. The tensors may share memory with
    the inputs: never write into them.
    """
    x = as_samples(to_tensor(X, "X", what), "X")
    y = as_samples(to_tensor(Y, "Y", what), "Y")
    n = check_same_n(x, y, "X", "Y", what)
    if x.device != y.device:
        raise ValueError(f"X is on {x.device} but Y is on {y.device}; put both on one device")
    check_count(n, what, min_n)
    for t, name in ((x, "X"), (y, "Y")):
        if not bool(torch.isfinite(t.sum(dim=0)).all()):  # NaN, Inf or float64 overflow: one cheap pass
            raise_nonfinite(t, name, what)
    return x, y


def check_count(n: int, what: str, min_n: int) -> None:
    """Refuse fewer than ``min_n`` samples for the measure ``what`` (the message every measure gives)."""
    if n < min_n:
        raise ValueError(f"{what} needs at least {min_n} samples but got n={n}; pass more samples")


def centred(x: torch.Tensor, name: str, what: str) -> tuple[torch.Tensor, float]:
    """A new tensor: ``x`` minus its column means, and its squared Frobenius norm.

    Raises ``ValueError`` for NaN/Inf (seen for free in the column means) and for a constant ``x`` (all
    rows identical), with the messages CKA gives.
    """
    mean = x.mean(dim=0)
    if not bool(torch.isfinite(mean).all()):
        raise_nonfinite(x, name, what)
    xc = x - mean
    sum_sq = float(torch.linalg.vector_norm(xc) ** 2)
    if not math.isfinite(sum_sq):
        raise_nonfinite(x, name, what)
    raise_if_constant(x, name, sum_sq, mean, what)
    return xc, sum_sq


def check_choice(value: Any, option: str, choices: Iterable[str], what: str) -> str:
    """``value`` when it is one of ``choices``; else ``ValueError`` naming the valid ones (and a close match)."""
    try:
        return OneOf(tuple(choices)).check(option, value)
    except ValueError as exc:
        raise ValueError(f"{what}: {exc}") from None


def check_positive_int(value: Any, option: str, what: str, minimum: int = 1) -> int:
    """``value`` as an int >= ``minimum`` (the rule of `utils.rules.as_positive_int`); ``ValueError`` naming
    the measure ``what`` and its ``option`` otherwise."""
    number = as_positive_int(value, minimum)
    if number is None:
        raise ValueError(f"{what}: {option} must be an integer >= {minimum} (got {value!r})")
    return number


def compress_columns(xc: torch.Tensor) -> torch.Tensor:
    """``xc`` (n, d) with the same row inner products ``xc xc^T`` but at most n columns.

    When d > n, ``xc^T = Q R`` (thin QR) gives ``xc = R^T Q^T``, and ``R^T`` (n, n) is ``xc`` expressed in an
    orthonormal basis of its row space: every measure invariant to orthogonal maps of the features gives
    the same value on it, at O(n^2 d) instead of O(d^2) memory and O(d^3) time.
    """
    n, d = xc.shape
    if d <= n:
        return xc
    return torch.linalg.qr(xc.T, mode="r")[1].T


def numerical_rank(s: torch.Tensor, n: int, d: int) -> int:
    """Rank from singular values ``s`` (descending) of an (n, d) matrix: those above ``s_max max(n, d) eps``
    (NumPy's ``matrix_rank`` rule)."""
    if s.numel() == 0:
        return 0
    return int((s > s[0] * max(n, d) * EPS).sum())
