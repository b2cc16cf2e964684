"""How a wrapped text model's tokenizer is called: padding on a side that leaves every real token where it is
alone, token counts for batches made by length, and the user's tokenizer left as it was.

A padded batch changes no pooled row when each real token sits where it would sit without padding. Right padding
does that for every model: the real tokens come first, and the model counts their positions itself (from 0, or
from RoBERTa's ``padding_idx + 1``), so it is the default whatever the tokenizer's own side. Left padding does it
only when the model is told where the tokens are (``position_ids`` counted from the first real token, for a
model whose ``forward`` takes them) and counts them as the wrapper does, or needs no positions (relative
positions, ALiBi); `check_left_padding` runs the model once on two texts to tell, and refuses it otherwise (a
BART decoder, RoBERTa).

A fast tokenizer keeps the truncation and padding of its last call in its Rust backend
(``tokenizer.backend_tokenizer.truncation`` and ``.padding``); every call here puts them back as they were.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Sequence

import torch

from ..networks.model_state import frozen, model_dtype
from .pooling import first_tensor

#: Two texts of different lengths in any tokenizer: the first is padded when they share a batch.
_PROBE = ("a", "a longer text, so that the short one is padded")


def check_left_padding(wrapped: Any) -> None:
    """Raise ``ValueError`` unless left padding leaves a wrapped text model's outputs as they are without padding.

    Args:
        wrapped: an `HFModel` that reads text, set to pad on the left.

    Raises:
        ValueError: the short probe text, left-padded in a batch with a longer one, gives the model other outputs
            than alone (its real tokens sit at other positions: a model without position ids that counts them
            from the first column, or one that counts its own from another start), naming the fix.
    """
    with torch.no_grad(), frozen(wrapped):
        wrapped.padding_side = "right"   # alone as the model reads it by itself: no position ids of ours
        try:
            alone = _output(wrapped(list(_PROBE[:1])))[0]
        finally:
            wrapped.padding_side = "left"
        padded = _output(wrapped(list(_PROBE)))[0, -len(alone):]
    tol = 3e-2 if model_dtype(wrapped) in (torch.float16, torch.bfloat16) else 1e-4   # a half model rounds more
    if padded.shape == alone.shape and torch.allclose(padded, alone, rtol=tol, atol=tol * float(alone.abs().max())):
        return
    model = type(wrapped.hf_model).__name__
    why = ("takes no position ids and counts them from the first column" if not wrapped.takes_positions else
           "counts its positions otherwise than from 0 at the first real token")
    raise ValueError(f"left padding changes the outputs of {model} (it {why}), so each row would depend on its "
                     "batch; leave padding_side unset or 'right' (right padding keeps every model's positions)")


def _output(output: Any) -> torch.Tensor:
    return first_tensor(output).float()


@contextlib.contextmanager
def backend_kept(tokenizer: Any) -> Iterator[None]:
    """Restore a fast tokenizer's backend truncation and padding on exit (a no-op for other tokenizers)."""
    backend = getattr(tokenizer, "backend_tokenizer", None) or getattr(tokenizer, "_tokenizer", None)
    if backend is None or not hasattr(backend, "truncation") or not hasattr(backend, "padding"):
        yield
        return
    truncation, padding = backend.truncation, backend.padding
    try:
        yield
    finally:
        if truncation is None:
            backend.no_truncation()
        else:
            backend.enable_truncation(**truncation)
        if padding is None:
            backend.no_padding()
        else:
            backend.enable_padding(**padding)


def encode(tokenizer: Any, texts: Sequence[str], *, padding_side: str | None, max_length: int,
           special_mask: bool) -> Any:
    """``tokenizer(texts)`` padded to the longest text and truncated to ``max_length``, as (B, T) tensors.

    Args:
        tokenizer: a transformers tokenizer with a pad token.
        texts: B strings.
        padding_side: ``"left"``, ``"right"`` or None (the tokenizer's own side).
        max_length: the most tokens a text keeps.
        special_mask: also return ``special_tokens_mask``.

    Returns:
        The tokenizer's ``BatchEncoding`` (``input_ids``, ``attention_mask`` and, when asked,
            ``special_tokens_mask``); the tokenizer is left as it was.
    """
    side = {"padding_side": padding_side} if padding_side else {}
    with backend_kept(tokenizer):
        return tokenizer(list(texts), padding=True, truncation=True, max_length=max_length, return_tensors="pt",
                         return_special_tokens_mask=special_mask, **side)


def token_counts(tokenizer: Any, texts: Sequence[str], max_length: int) -> list[int]:
    """How many tokens each text has after truncation to ``max_length`` (special tokens included), unpadded;
    tokenized 4,096 texts at a time, so that the token ids of a large split are never held at once."""
    counts: list[int] = []
    with backend_kept(tokenizer):
        for i in range(0, len(texts), 4096):
            ids = tokenizer(list(texts[i:i + 4096]), truncation=True, max_length=max_length, padding=False)
            counts += [len(row) for row in ids["input_ids"]]
    return counts
