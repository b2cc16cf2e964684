"""What a model reads its samples with, beside its own tensors and module settings: a wrapped model's tokenizer,
image processor, preprocessing and pooling. The same weights read with another tokenizer give other rows, so
every key of stored rows covers this (`reading_digest`): the activation store's entries and a grid's resume
file."""

from __future__ import annotations

import json
from typing import Any

from torch import nn

from ..utils.digest import fast_hash

__all__ = ["reading_settings", "reading_digest"]

#: The wrapper settings that change how a sample is read (`hf`, `preprocessed`).
WRAPPER_SETTINGS = ("pooling", "exclude_special", "view", "padding_side", "max_length", "preprocessing",
                    "_sp_preprocessing")
#: Tokenizer attributes that name or describe it without changing how it encodes a text.
_NOT_ENCODING = ("name_or_path", "verbose", "chat_template", "response_template", "chat_control_tokens",
                 "deprecation_warnings", "files_loaded", "init_inputs", "init_kwargs")
_PLAIN = (str, int, float, bool, type(None))


def _plain(value: Any) -> bool:
    return isinstance(value, _PLAIN) or (isinstance(value, (tuple, list)) and all(_plain(v) for v in value))


def _digest_text(value: Any) -> str:
    return fast_hash(json.dumps(value, sort_keys=True, default=repr).encode()).hexdigest()


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
                            "vocabulary": _digest_text(sorted(tokenizer.get_vocab().items()))}
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        state = json.loads(backend.to_str())
        info["backend"] = _digest_text({k: v for k, v in state.items() if k not in ("truncation", "padding")})
    return info


def processor_settings(processor: Any) -> dict:
    """An image processor's settings (``to_dict()``: size, crop, mean, std, resampling, ...), with its class."""
    settings = processor.to_dict() if hasattr(processor, "to_dict") else {"repr": repr(processor)}
    return {"class": type(processor).__qualname__, "settings": {k: v for k, v in settings.items() if not k.startswith("_")}}


def reading_settings(model: nn.Module) -> dict:
    """Everything besides its tensors and module settings that changes the rows ``model`` gives for a sample: for a
    wrapped model (`hf`, `preprocessed`) its tokenizer (`tokenizer_settings`), image processor, preprocessing,
    pooling and the options it reads with; an empty dict for a plain module.

    Args:
        model: any ``nn.Module``.

    Returns:
        A JSON-able dict (equal dicts: the same reading).
    """
    out: dict[str, Any] = {}
    for name in WRAPPER_SETTINGS:
        value = getattr(model, name, None)
        if value is None or isinstance(value, nn.Module) or callable(value):
            continue  # a submodule is in the model's own fingerprint
        out[name.lstrip("_")] = value if _plain(value) else repr(value)
    tokenizer = getattr(model, "tokenizer", None)
    if tokenizer is not None:
        out["tokenizer"] = tokenizer_settings(tokenizer)
    processor = getattr(model, "processor", None)
    if processor is not None:
        out["processor"] = processor_settings(processor)
    return out


def reading_digest(model: nn.Module, settings: dict | None = None) -> str:
    """A digest (hex) of `reading_settings` (``settings``, when the caller has them): equal for two models that read
    a sample alike."""
    return _digest_text(reading_settings(model) if settings is None else settings)
