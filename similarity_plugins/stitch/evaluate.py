"""Score a fitted stitch on test data: relative accuracy (the score), agreement, absolute accuracies."""

from __future__ import annotations

from typing import Callable

import torch

from ..host.results import TEST_INTERVAL
from ..networks.split import SplitNetwork
from .bootstrap import relative_accuracy_ci
from .objectives import relative_sq_error
from .trainer import FittedStitch, check_labels


@torch.no_grad()
def stitched_logits(fitted: FittedStitch, end: SplitNetwork, front_acts: torch.Tensor, *, batch_size: int = 256,
                    keep_stitched: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Logits of the stitched model ``g_{>j}(T(f_{<=i}(x)))`` from cached front activations.

    ``front_acts``: A's activations at cut i, (N, *front_shape). Returns ``(logits (N, K) float32 CPU,
    stitched activations (N, *end_shape) float32 CPU or None)`` (the latter when ``keep_stitched``).
    """
    fitted.stitch.eval()
    device = next(fitted.stitch.parameters()).device
    logits, stitched = [], []
    for start in range(0, len(front_acts), batch_size):
        h = fitted.stitch(front_acts[start:start + batch_size].to(device))
        logits.append(end.end(h).float().cpu())
        if keep_stitched:
            stitched.append(h.float().cpu())
    return torch.cat(logits), (torch.cat(stitched) if keep_stitched else None)


def evaluate_stitch(fitted: FittedStitch, end: SplitNetwork, front_acts: torch.Tensor, labels: torch.Tensor,
                    end_logits: torch.Tensor, *, front_logits: torch.Tensor | None = None,
                    end_acts: torch.Tensor | None = None, batch_size: int = 256,
                    reduce: Callable[[Callable[[], torch.Tensor], torch.Tensor], torch.Tensor] | None = None) -> dict:
    """Evaluate the stitched model ``h`` on test samples.

    Args:
        fitted: the stitch [`fit_stitch`][similarity_plugins.stitch.fit_stitch] returned.
        end: network B cut at j, as it was given to ``fit_stitch``.
        front_acts: A's activations at cut i on the test inputs, (N, *front_shape).
        labels: (N,) int64 labels.
        end_logits: B's logits (N, K) on the same inputs.
        front_logits: A's logits (N, K_A), optional, for A's own accuracy (``None`` in the result when A's
            outputs do not cover the labels).
        end_acts: B's activations at cut j (N, *end_shape), optional: adds ``dm_relative_error``, the mean over
            samples of ``||T(f(x)) - g_{<=j}(x)||^2 / ||g_{<=j}(x)||^2``.
        batch_size: test samples per forward pass.
        reduce: ``reduce(compute, like)`` sums the count vector ``compute()`` over ranks (e.g.
            ``world.reduce_sum(..., phase)``) when each rank holds a shard of the test set; None in one process.

    Returns:
        ``relative_accuracy`` (stitched accuracy / B's accuracy, the score), ``agreement`` (fraction where h and
            B predict the same class), ``stitched_accuracy``, ``end_accuracy``, ``front_accuracy`` (fractions in
            [0, 1]), ``test_size`` and ``test_ci95`` (``[low, high]``: 95% bootstrap interval of the relative
            accuracy over test samples, 1,000 resamples with a fixed seed; see `bootstrap`).

    Raises:
        ValueError: labels outside B's classes, or B's accuracy is 0 (the ratio is undefined).
    """
    labels = torch.as_tensor(labels).long().cpu()
    if not (len(front_acts) == len(labels) == len(end_logits)):
        raise ValueError(f"test arrays disagree in length: {len(front_acts)} activations, {len(labels)} labels, "
                         f"{len(end_logits)} end logits")

    def counts() -> torch.Tensor:
        """(n, stitched correct, end correct, agreeing, front correct, labels A does not cover, DM error sum)."""
        out = torch.zeros(7, dtype=torch.float64)
        if len(labels) == 0:
            return out
        check_labels(labels, end_logits.shape[1], "test")
        logits, stitched = stitched_logits(fitted, end, front_acts, batch_size=batch_size,
                                           keep_stitched=end_acts is not None)
        pred, end_pred = logits.argmax(1), end_logits.argmax(1)
        correct["stitched"], correct["end"] = pred == labels, end_pred == labels
        out[:4] = torch.tensor([len(labels), int((pred == labels).sum()), int((end_pred == labels).sum()),
                                int((pred == end_pred).sum())], dtype=torch.float64)
        if front_logits is not None:
            covered = labels < front_logits.shape[1]
            out[4] = int((front_logits.argmax(1) == labels).sum())
            out[5] = int((~covered).sum())
        if stitched is not None:
            out[6] = float(relative_sq_error(stitched, end_acts.float()).double().sum())
        return out

    correct: dict[str, torch.Tensor] = {}  # per-sample correctness, for the bootstrap interval
    c = counts() if reduce is None else reduce(counts, torch.zeros(7, dtype=torch.float64))
    out = _scores(c, front_logits is not None, end_acts is not None)
    if reduce is None:  # sharded over ranks, each rank holds only its samples: no interval
        out[TEST_INTERVAL] = list(relative_accuracy_ci(correct["stitched"], correct["end"]))
    return out


def _scores(c: torch.Tensor, with_front: bool, with_dm: bool) -> dict:
    """[`evaluate_stitch`][evaluate_stitch]'s result dict from its summed count vector ``c`` (7,) float64."""
    n = float(c[0])
    if n == 0:
        raise ValueError("the test set is empty: stitching is scored on Data.test")
    stitched_acc, end_acc = float(c[1]) / n, float(c[2]) / n
    if end_acc == 0.0:
        raise ValueError(
            "the end model classifies none of the test samples correctly, so relative accuracy (stitched "
            "accuracy / end accuracy) is undefined; use a trained end model and its own test data"
        )
    out = {
        "relative_accuracy": stitched_acc / end_acc,
        "agreement": float(c[3]) / n,
        "stitched_accuracy": stitched_acc,
        "front_accuracy": float(c[4]) / n if with_front and float(c[5]) == 0 else None,
        "end_accuracy": end_acc,
        "test_size": int(n),
    }
    if with_dm:
        out["dm_relative_error"] = float(c[6]) / n
    return out
