"""How a wrapped text model's tokenizer is called: padding on a side that leaves every real token's position as it
is alone, token counts for batches made by length, and the user's tokenizer left as it was.

A padded batch changes no pooled row when each real token sits where it would sit without padding. Right padding
does that for every model (the real tokens come first). Left padding does it only when the wrapper can tell the
model where the tokens are: it passes ``position_ids`` counted from the first real token, so a model whose
``forward`` takes no position ids (a BART decoder, a T5 encoder, Bloom) is padded on the right.

A fast tokenizer keeps the truncation and padding of its last call in its Rust backend
(``tokenizer.backend_tokenizer.truncation`` and ``.padding``); every call here puts them back as they were.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Sequence

__all__ = ["encode", "padding_side_for", "token_counts"]


def padding_side_for(model_name: str, requested: str | None, takes_positions: bool) -> str | None:
    """The side a text model is padded on.

    Args:
        model_name: the model's class name (for the error).
        requested: ``"left"``, ``"right"`` or None (the tokenizer's own side).
        takes_positions: whether the model's ``forward`` takes ``position_ids``.

    Returns:
        ``requested`` for a model that takes position ids; ``"right"`` for one that does not.

    Raises:
        ValueError: ``"left"`` requested for a model that takes no position ids (its real tokens would move
            by the padding, so its rows would depend on the batch).
    """
    if takes_positions:
        return requested
    if requested == "left":
        raise ValueError(f"{model_name} takes no position ids, so under left padding its real tokens would sit "
                         "at positions moved by the padding and each row would depend on its batch; leave "
                         "padding_side unset or 'right' (the package pads this model on the right)")
    return "right"


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
    """How many tokens each text has after truncation to ``max_length`` (special tokens included), unpadded."""
    with backend_kept(tokenizer):
        ids = tokenizer(list(texts), truncation=True, max_length=max_length, padding=False)["input_ids"]
    return [len(row) for row in ids]
