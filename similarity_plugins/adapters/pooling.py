"""Mask-aware pooling of a block's tokens (B, T, D) into one row per sample, per batch.

``mask`` (B, T) marks the tokens that count (the attention mask; without special tokens when asked). A pooled
row depends only on its own sample's real tokens, so it is the same whatever the batch and the padding side.
"""

from __future__ import annotations

from typing import Any

import torch

from ..utils.text import did_you_mean

#: The pooling modes and what each keeps of a sample's tokens.
POOLINGS = {
    "mean": "the mean over the sample's real tokens",
    "last": "the last real token",
    "first": "the first real token (CLS in BERT-style models)",
    "flatten": "every token, (T*D) features (fixed-length token maps only)",
}


def check_pooling(pooling: str) -> None:
    """Raise ``ValueError`` naming the valid modes unless ``pooling`` is one of `POOLINGS`."""
    if pooling not in POOLINGS:
        raise ValueError(f"unknown pooling {pooling!r}{did_you_mean(str(pooling), POOLINGS)}; "
                         f"choose one of: {', '.join(POOLINGS)}")


def first_tensor(output: Any) -> torch.Tensor | None:
    """The hidden states of a block's output: the tensor itself, or the first tensor of a tuple or ModelOutput."""
    if isinstance(output, torch.Tensor):
        return output
    values = output.values() if isinstance(output, dict) else output if isinstance(output, (tuple, list)) else ()
    return next((v for v in values if isinstance(v, torch.Tensor)), None)


def pool_tokens(hidden: torch.Tensor, mask: torch.Tensor | None, pooling: str) -> torch.Tensor:
    """Pool ``hidden`` (B, T, D) with ``mask`` (B, T) bool (None: every token counts).

    Returns (B, D) float32 for ``"mean"``, ``"last"``, ``"first"``; (B, T, D) float32 for ``"flatten"``, which
    refuses padded batches (its features would be padding). Hidden states that are not (B, T, D) (a pooled
    (B, D) output, a CNN map) are returned as float32 unchanged.
    """
    hidden = hidden.float()
    if hidden.dim() != 3:
        return hidden
    if mask is None:
        mask = torch.ones(hidden.shape[:2], dtype=torch.bool, device=hidden.device)
    empty = ~mask.any(1)
    if bool(empty.any()):
        raise ValueError(f"{int(empty.sum())} sample(s) of this batch have no tokens to pool (an empty text, or "
                         "only special tokens left out); drop empty samples from the data")
    if pooling == "flatten":
        if not bool(mask.all()):
            raise ValueError("pooling 'flatten' needs inputs of one length, but this batch is padded (texts of "
                             "different lengths); use pooling 'mean', 'last' or 'first' for text")
        return hidden
    if pooling == "mean":
        kept = torch.where(mask.unsqueeze(-1), hidden, torch.zeros((), dtype=hidden.dtype, device=hidden.device))
        return kept.sum(1) / mask.sum(1, keepdim=True).clamp(min=1).to(hidden.dtype)
    positions = torch.arange(mask.shape[1], device=mask.device)
    if pooling == "first":
        index = torch.where(mask, positions, mask.shape[1]).min(1).values
    else:
        index = torch.where(mask, positions, -1).max(1).values
    return hidden[torch.arange(len(hidden), device=hidden.device), index.clamp(0, mask.shape[1] - 1)]
