"""The values `hf` takes, checked where they enter (Python arguments and ``hf:`` spec queries alike), and what a
wrapped model needs to read text: a tokenizer that tokenizes, ids inside the model's vocabulary, one tower of a
dual encoder.

Yes/no values and whole numbers are read by the package's one rule (`utils.rules`), so ``exclude_special=flase``
is an error listing the words, never silently true.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..utils.rules import BOOLEAN_WORDS, as_positive_int, bool_of
from ..utils.text import did_you_mean
from .hf_tokens import backend_kept

#: ``dtype`` names a spec may give (``hf:ID?dtype=bfloat16``); ``"auto"``: the dtype saved in the model's config.
DTYPES = ("auto", "float32", "float16", "bfloat16", "float64")
#: The towers of a dual encoder (CLIP, SigLIP): the model's child that reads text or images.
TOWERS = {"text": "input_ids", "vision": "pixel_values"}
PADDING_SIDES = ("left", "right")
#: The files a saved tokenizer leaves in a folder (``tokenizer_config.json`` always; the others by kind).
TOKENIZER_FILES = ("tokenizer_config.json", "tokenizer.json", "vocab.json", "vocab.txt", "merges.txt",
                   "tokenizer.model", "spiece.model", "sentencepiece.bpe.model")
_PROBE = "Hello, world."


@dataclass(frozen=True)
class HFOptions:
    """The checked values of one `hf` call (see its arguments)."""

    exclude_special: bool
    preprocess: bool
    padding_side: str | None
    max_length: int | None
    view: str | None
    revision: str | None
    dtype: torch.dtype | str | None
    device: torch.device | None
    local_files_only: bool | None
    tower: str | None


def _yes_no(name: str, value: Any, optional: bool = False) -> bool | None:
    if optional and value is None:
        return None
    read = bool_of(value)
    if read is None:
        raise ValueError(f"hf option {name}: expected {BOOLEAN_WORDS}{' or none' if optional else ''}, got {value!r}")
    return read


def _choice(name: str, value: Any, choices: Any) -> Any:
    if value is not None and value not in choices:
        raise ValueError(f"hf option {name} must be one of {', '.join(map(str, choices))} (or none), got {value!r}"
                         f"{did_you_mean(str(value), list(choices))}")
    return value


def _text(name: str, value: Any) -> str | None:
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise ValueError(f"hf option {name} must be a non-empty name (or none), got {value!r}")
    return value


def _dtype(value: Any) -> torch.dtype | str | None:
    if value is None or isinstance(value, torch.dtype) and value.is_floating_point:
        return value
    name = value.removeprefix("torch.") if isinstance(value, str) else None
    if name not in DTYPES:
        raise ValueError(f"hf option dtype must be a floating torch.dtype or one of {', '.join(DTYPES)}, got {value!r}"
                         f"{did_you_mean(str(name), DTYPES)}")
    return name if name == "auto" else getattr(torch, name)


def _device(value: Any) -> torch.device | None:
    if value is None:
        return None
    try:
        return torch.device(value)
    except (RuntimeError, TypeError):
        raise ValueError(f"hf option device must be a torch device such as cpu, cuda or cuda:1, got {value!r}") from None


def check_options(*, exclude_special: Any, preprocess: Any, padding_side: Any, max_length: Any, view: Any,
                  revision: Any, dtype: Any, device: Any, local_files_only: Any, tower: Any) -> HFOptions:
    """Every value `hf` takes besides the model, its tokenizer, processor and pooling, checked and converted.

    Returns:
        The `HFOptions`.

    Raises:
        ValueError: the first value that breaks its rule, naming the option and what it must be.
    """
    if max_length is not None and as_positive_int(max_length) is None:
        raise ValueError(f"hf option max_length must be a positive whole number of tokens (or none: the model's "
                         f"limit), got {max_length!r}")
    return HFOptions(exclude_special=_yes_no("exclude_special", exclude_special),
                     preprocess=_yes_no("preprocess", preprocess),
                     padding_side=_choice("padding_side", padding_side, PADDING_SIDES),
                     max_length=None if max_length is None else int(max_length), view=_text("view", view),
                     revision=_text("revision", revision), dtype=_dtype(dtype), device=_device(device),
                     local_files_only=_yes_no("local_files_only", local_files_only, optional=True),
                     tower=_choice("tower", tower, TOWERS))


def position_limit(config: Any) -> tuple[int, str] | None:
    """The most positions the model reads, ``(limit, config attribute)``, or None when its config gives none."""
    for attribute in ("max_position_embeddings", "n_positions"):
        value = getattr(config, attribute, None)
        if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 1_000_000:
            return value, attribute
    return None


def check_max_length(model: nn.Module, max_length: int | None) -> None:
    """Refuse a ``max_length`` beyond the model's position limit (`position_limit`), naming both."""
    limit = position_limit(model.config)
    if max_length is not None and limit is not None and max_length > limit[0]:
        raise ValueError(f"hf option max_length={max_length} is more than {type(model).__name__} reads: its limit is "
                         f"{limit[0]} positions (config.{limit[1]}); give max_length <= {limit[0]}, or none for the limit")


def _towers(model: nn.Module) -> dict[str, str]:
    """``{"text": child name, "vision": child name}`` of a model's children that read text or images."""
    found: dict[str, str] = {}
    for name, child in model.named_children():
        for tower, reads in TOWERS.items():
            if getattr(child, "main_input_name", None) == reads and hasattr(child, "config"):
                found.setdefault(tower, name)
    return found


def pick_tower(model: nn.Module, tower: str | None) -> nn.Module:
    """The model, or one tower of a dual encoder (CLIP, SigLIP: text and images embedded by two towers,
    ``get_text_features`` and ``get_image_features``).

    Args:
        model: a transformers model.
        tower: ``"text"`` or ``"vision"`` (the child whose ``main_input_name`` is ``input_ids`` or
            ``pixel_values``), or None for the model itself.

    Returns:
        ``model``, or its tower (the same object as the model's child: nothing is copied).

    Raises:
        ValueError: a dual encoder without ``tower`` (naming both towers and ``tower=``), or a ``tower`` the
            model does not have.
    """
    towers = _towers(model)
    dual = hasattr(model, "get_text_features") and hasattr(model, "get_image_features")
    if tower is None:
        if dual:
            named = " or ".join(f"tower={t!r} (model.{name})" for t, name in towers.items()) or "its text or vision tower"
            raise ValueError(f"{type(model).__name__} embeds text and images with two towers and reads both at once; "
                             f"wrap one of them: hf(..., {named}), or on the command line hf:ID?tower=text")
        return model
    if tower not in towers:
        have = ", ".join(towers) or "none"
        raise ValueError(f"hf option tower={tower!r}: {type(model).__name__} has no {tower} tower (its towers: {have}); "
                         "drop tower= for a model that is one tower")
    return getattr(model, towers[tower])


def check_tokenizer(tokenizer: Any, folder: str | None, where: str) -> None:
    """Refuse a tokenizer that gives no token ids for text (transformers builds an empty one from a folder that
    holds no tokenizer files).

    Args:
        tokenizer: the tokenizer to check (it tokenizes one short probe text).
        folder: the ``save_pretrained`` folder it was loaded from, whose tokenizer files the message names when
            none is there; None for a hub id or a tokenizer given.
        where: where it came from, for the message (``"'org/name'"``, ``"hf(tokenizer=...)"``).

    Raises:
        ValueError: the tokenizer is empty, saying what to do.
    """
    with backend_kept(tokenizer):   # a fast tokenizer's truncation and padding stay the user's
        ids = tokenizer(_PROBE, add_special_tokens=False)["input_ids"]
    if len(ids):
        return
    fix = "pass hf(..., tokenizer=...) with the tokenizer the model was trained with"
    if folder is not None and os.path.isdir(folder):
        fix = f"save the tokenizer there (tokenizer.save_pretrained(DIR)) or {fix}"
        if not set(os.listdir(folder)) & set(TOKENIZER_FILES):
            fix = f"{folder!r} holds no tokenizer files (none of {', '.join(TOKENIZER_FILES)}); {fix}"
    raise ValueError(f"the tokenizer of {where} gives no token ids for text (an empty {type(tokenizer).__name__}); {fix}")


def vocabulary_rows(model: nn.Module) -> int | None:
    """The rows of the model's input embedding (the ids it can read), or None when it has no embedding to ask."""
    try:
        embedding = model.get_input_embeddings()
    except (AttributeError, NotImplementedError):
        return None
    rows = getattr(embedding, "num_embeddings", None)
    return rows if isinstance(rows, int) else None


def check_token_ids(ids: torch.Tensor, rows: int | None, model: nn.Module, tokenizer: Any) -> None:
    """Refuse a batch of token ids beyond the model's embedding (the tokenizer of another model).

    Args:
        ids: (B, T) integer token ids of one batch, padding included (pad ids are looked up too).
        rows: the model's embedding rows (`vocabulary_rows`), or None to check nothing.
        model: the transformers model, named in the message.
        tokenizer: the tokenizer that made ``ids``, named in the message.

    Raises:
        ValueError: an id >= ``rows``, naming the id, the sample, the tokenizer's size and the model's.
    """
    if rows is None or ids.numel() == 0:
        return
    top = int(ids.max())
    if top >= rows:
        sample = int((ids >= rows).any(1).nonzero()[0])
        raise ValueError(f"the tokenizer {type(tokenizer).__name__} ({len(tokenizer)} tokens) gives token id {top} "
                         f"(sample {sample} of the batch, padding included), but {type(model).__name__} has "
                         f"{rows} token embeddings (ids 0 to {rows - 1}); use the tokenizer the model was trained with")
