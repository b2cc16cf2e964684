"""The four alignment objectives (the stitch's training loss), as small pure functions.

Each returns a scalar tensor (mean over the batch) that is differentiable with respect to its first
argument. ``stitched_loss`` runs the end model as each objective needs and applies the right one.

- HLM: cross-entropy of the stitched logits against ground-truth labels.
- SLM: cross-entropy against B's softmax (temperature 1 by default; the temperature divides both
  logits, as in distillation).
- DM: squared L2 between ``T(f(x))`` and ``g_{<=j}(x)``: ``"sum"`` is the mean over samples of the
  per-sample sum of squared differences (the paper's squared L2, default); ``"normalised"`` the mean
  over samples of ``||d||^2 / ||g_{<=j}(x)||^2``.
- FuLA: ``sum_k w_k * mean_n(||a_k(stitched) - a_k(B)||^2 / ||a_k(B)||^2)`` over the terms ``k``:
  the stitch output itself (against B's activation at the cut), then every tap of the end after
  the cut up to the penultimate layer. Weights default to 1. Labels are not used.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import torch
import torch.nn.functional as F

from ..networks.split import SplitNetwork

_EPS = 1e-12

#: The cached targets each objective reads (keys of the ``targets`` dict of :func:`stitched_loss`).
NEEDS: dict[str, tuple[str, ...]] = {
    "hlm": ("labels",),
    "slm": ("end_logits",),
    "dm": ("end_cut",),
    "fula": ("end_cut", "end_taps"),
}


def hlm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of ``logits`` (N, K) against integer ``labels`` (N,) in 0..K-1; mean over N (nats)."""
    return F.cross_entropy(logits, labels)


def slm_loss(logits: torch.Tensor, target_logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Cross-entropy of ``softmax(logits/T)`` against ``softmax(target_logits/T)``, both (N, K); mean over N.

    Equals the KL divergence plus the (constant) entropy of the targets, so its minimum is that entropy.
    """
    target = F.softmax(target_logits.detach() / temperature, dim=1)
    return -(target * F.log_softmax(logits / temperature, dim=1)).sum(1).mean()


def relative_sq_error(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Per-sample ``||pred - target||^2 / ||target||^2`` over all non-batch dims: (N, ...) -> (N,)."""
    diff = (pred - target).flatten(1).pow(2).sum(1)
    return diff / target.flatten(1).pow(2).sum(1).clamp_min(_EPS)


def dm_loss(stitched: torch.Tensor, target: torch.Tensor, reduction: str = "sum") -> torch.Tensor:
    """Direct matching between ``T(f(x))`` and ``g_{<=j}(x)``, both (N, ...) of B's cut shape.

    ``"sum"``: mean over samples of the per-sample sum of squared differences (activation units squared).
    ``"normalised"``: mean over samples of [`relative_sq_error`][relative_sq_error] (unitless).
    """
    target = target.detach()
    if reduction == "sum":
        return (stitched - target).flatten(1).pow(2).sum(1).mean()
    if reduction == "normalised":
        return relative_sq_error(stitched, target).mean()
    raise ValueError(f"unknown DM reduction {reduction!r}; choose 'sum' or 'normalised'")


def fula_loss(stitched: Sequence[torch.Tensor], native: Sequence[torch.Tensor],
              weights: Sequence[float] | None = None) -> torch.Tensor:
    """Functional latent alignment: ``sum_k w_k * mean_n(relative_sq_error(stitched[k], native[k]))``.

    ``stitched[k]`` and ``native[k]`` are (N, ...) activations of term ``k`` on the stitched and on B's
    own path (term 0 is the stitch output against B's activation at the cut). ``weights``: one per
    term, default all 1. Unitless.
    """
    if len(stitched) != len(native):
        raise ValueError(f"FuLA got {len(stitched)} stitched activations but {len(native)} native ones")
    if weights is not None and len(weights) != len(stitched):
        raise ValueError(
            f"option fula_weights has {len(weights)} values but FuLA has {len(stitched)} terms here "
            "(the stitch output, then each tap of the end model after the cut); give one weight per term"
        )
    total = stitched[0].new_zeros(())
    for k, (s, t) in enumerate(zip(stitched, native)):
        w = 1.0 if weights is None else float(weights[k])
        if w:
            total = total + w * relative_sq_error(s, t.detach()).mean()
    return total


def stitched_loss(objective: str, h: torch.Tensor, end: SplitNetwork, targets: Mapping[str, object], *,
                  temperature: float = 1.0, dm_reduction: str = "sum",
                  fula_weights: Sequence[float] | None = None) -> torch.Tensor:
    """The training loss of stitched activations ``h`` = ``T(f(x))`` (N, *B's cut shape) for ``objective``.

    ``targets`` holds what `NEEDS` lists, for the same N samples: ``labels`` (N,) int64,
    ``end_logits`` (N, K), ``end_cut`` (N, *cut shape), ``end_taps`` (tuple of (N, ...)). HLM, SLM and
    FuLA run the end on ``h`` (gradients reach ``h``, never B's parameters); DM does not run B at all.
    """
    if objective == "dm":
        return dm_loss(h, targets["end_cut"], dm_reduction)
    if objective == "fula":
        _, taps = end.end_with_taps(h)
        return fula_loss((h, *taps), (targets["end_cut"], *targets["end_taps"]), fula_weights)
    logits = end.end(h)
    if objective == "hlm":
        return hlm_loss(logits, targets["labels"])
    if objective == "slm":
        return slm_loss(logits, targets["end_logits"], temperature)
    raise ValueError(f"unknown stitching objective {objective!r}; choose hlm, slm, dm or fula")
