"""What a wrapped model reads its samples with, beside its own tensors and module settings: its tokenizer, image
processor, preprocessing and pooling, as the plain settings its `reading_settings` declares. The same weights read
with another tokenizer give other rows, so every key of stored rows covers this (`networks.wrapped.reading_digest`):
the activation store's entries and a grid's resume file."""

from __future__ import annotations

import json
from typing import Any

from ..utils.digest import json_digest

#: Tokenizer attributes that name or describe it without changing how it encodes a text.
_NOT_ENCODING = ("name_or_path", "verbose", "chat_template", "response_template", "chat_control_tokens",
                 "deprecation_warnings", "files_loaded", "init_inputs", "init_kwargs")
_PLAIN = (str, int, float, bool, type(None))


def _plain(value: Any) -> bool:
    return isinstance(value, _PLAIN) or (isinstance(value, (tuple, list)) and all(_plain(v) for v in value))


def tokenizer_settings(tokenizer: Any) -> dict:
    """What a Hugging Face tokenizer encodes text with: its class, vocabulary (a digest of every token and id),
    special and added tokens, plain settings (padding and truncation sides, maximum length, lower-casing, ...)
    and, for a fast tokenizer, its normaliser, pre-tokeniser, model and post-processor (the padding and
    truncation state its backend keeps from its last call, which the wrapper sets on every call, left out)."""
    settings = {key: value for key, value in vars(tokenizer).items()
                if not key.startswith("_") and key not in _NOT_ENCODING and _plain(value)}
    info: dict[str, Any] = {"class": f"{type(tokenizer).__module__}.{type(tokenizer).__qualname__}",
                            "size": len(tokenizer), "settings": settings,
                            "special": {k: str(v) for k, v in tokenizer.special_tokens_map.items()},
                            "added": [(int(i), repr(t)) for i, t in sorted(tokenizer.added_tokens_decoder.items())],
                            "vocabulary": json_digest(sorted(tokenizer.get_vocab().items()))}
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        state = json.loads(backend.to_str())
        info["backend"] = json_digest({k: v for k, v in state.items() if k not in ("truncation", "padding")})
    return info


def processor_settings(processor: Any) -> dict:
    """An image processor's settings (``to_dict()``: size, crop, mean, std, resampling, ...), with its class."""
    settings = processor.to_dict() if hasattr(processor, "to_dict") else {"repr": repr(processor)}
    return {"class": type(processor).__qualname__, "settings": {k: v for k, v in settings.items() if not k.startswith("_")}}


def wrapper_reading(settings: dict[str, Any], tokenizer: Any = None, processor: Any = None) -> dict[str, Any]:
    """A wrapper's `reading_settings`: its ``settings`` that are set (plain values as they are, others as their
    ``repr``), its tokenizer's (`tokenizer_settings`) and its image processor's (`processor_settings`).

    Args:
        settings: the options the wrapper reads with (pooling, view, padding side, preprocessing, ...).
        tokenizer: a Hugging Face tokenizer, or None.
        processor: an image processor, or None.

    Returns:
        A dict of plain values (equal dicts: the same reading).
    """
    out: dict[str, Any] = {name: value if _plain(value) else repr(value)
                           for name, value in settings.items() if value is not None}
    if tokenizer is not None:
        out["tokenizer"] = tokenizer_settings(tokenizer)
    if processor is not None:
        out["processor"] = processor_settings(processor)
    return out
