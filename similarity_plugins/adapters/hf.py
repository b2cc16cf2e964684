"""Hugging Face ``transformers`` models as comparable networks: `hf` wraps one, `HFModel` is the wrapper.

The wrapper owns the transformers model's modules under their own names (``h.3``, ``model.layers.3``,
``encoder.layer.3``), so layer names are the model's ``named_modules()`` names. It reads one batch of the data
pipeline (a list of strings, an image tensor, or a dict of views), tokenizes text with the model's tokenizer and
feeds the model; `extract_layers` reads each hooked block through [`HFModel.layer_activation`][HFModel.layer_activation],
which takes a block's hidden states (the first tensor of a tuple or ``ModelOutput``) and pools them with the
batch's attention mask (`pooling`), so the (N, T, D) token tensor of a dataset is never held.
"""

from __future__ import annotations

import copy
import inspect
import os
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from .hf_load import Origin, load_part, load_pretrained, source_of_instance
from .hf_options import (
    HFOptions,
    check_max_length,
    check_options,
    check_token_ids,
    check_tokenizer,
    pick_tower,
    position_limit,
    vocabulary_rows,
)
from .hf_tokens import check_left_padding, encode, token_counts
from .pooling import check_pooling, first_tensor, pool_tokens
from .preprocess import Preprocessing, preprocess_images, preprocessing_of
from .reading import wrapper_reading

if TYPE_CHECKING:  # transformers is optional: its types name the arguments, the module never imports it here
    from transformers import BaseImageProcessor, PreTrainedTokenizerBase, ProcessorMixin

def hf(source: nn.Module | str | os.PathLike, *, tokenizer: PreTrainedTokenizerBase | None = None,
       processor: BaseImageProcessor | ProcessorMixin | None = None, pooling: str | None = None,
       exclude_special: bool = False, view: str | None = None, padding_side: str | None = None,
       max_length: int | None = None, preprocess: bool = True, revision: str | None = None,
       dtype: torch.dtype | str | None = None, device: torch.device | str | None = None,
       local_files_only: bool | None = None, tower: str | None = None) -> HFModel:
    """Wrap a Hugging Face ``transformers`` model so that `compare`, `compare_grid`, `layers` and the CLI take it.

    Args:
        source: a ``PreTrainedModel`` instance, a local folder written by ``save_pretrained``, or a hub model id
            (``"EleutherAI/pythia-70m"``), loaded by transformers' own ``from_pretrained`` with your cache, token
            and ``HF_HUB_OFFLINE``, as the class named in its config. ``wrapped.source`` records where it came
            from: ``{"path", "hub_id", "revision", "commit"}`` (the commit a hub revision resolved to).
        tokenizer: the tokenizer of a text model; default: the one saved with ``source`` (same folder, or same hub
            id and revision).
        processor: the image processor of a vision model (or a processor holding one as ``image_processor``);
            default: the one saved with ``source``, if any. It is kept as ``wrapped.processor``, and its resize,
            centre crop and normalisation run inside the model (`preprocess_images`) on images in [0, 1] of any
            size. Without a processor, images are read as ``pixel_values`` as they are.
        pooling: how a block's (B, T, D) tokens become one row per sample: ``"mean"`` (the real tokens; the text
            default), ``"last"`` (the last real token), ``"first"`` (the first real token, e.g. CLS),
            ``"flatten"`` (every token, (B, T*D); fixed-length inputs only; the vision default).
        exclude_special: leave special tokens (BOS, EOS, CLS, SEP) out of ``"mean"`` (true or false; the words
            true/false, yes/no, on/off, 1/0 too).
        view: the view of paired data this model reads (default: ``"text"`` for a model with a tokenizer,
            ``"image"`` otherwise).
        padding_side: ``"right"`` (the default for every model, whatever the tokenizer's side) or ``"left"``
            (checked by running the model once: refused where it would move the real tokens' positions, as in a
            BART decoder); pooled rows do not depend on it.
        max_length: longest tokenized sample in tokens (longer ones are truncated), a positive whole number no
            larger than the model's position limit; default: that limit.
        preprocess: apply the processor's preprocessing to images (False: the images are ``pixel_values``
            already, e.g. made by the processor in a dataset).
        revision: a branch, tag or commit of a hub id (default: its default branch).
        dtype: the dtype to load the weights in (``torch.bfloat16``, ``"float16"``, ``"auto"``: the config's);
            default float32.
        device: the device to load the model onto (default: the CPU).
        local_files_only: True: load a hub id from the cache only; default: transformers' own rule
            (``HF_HUB_OFFLINE``).
        tower: ``"text"`` or ``"vision"``: wrap that tower of a dual encoder such as CLIP or SigLIP (which reads
            text and images at once, so it cannot be wrapped whole).

    Returns:
        An [`HFModel`][similarity_plugins.HFModel] (an ``nn.Module``) sharing the model's modules (nothing is copied
            or changed).

    Raises:
        ValueError: ``source`` is neither a folder nor a hub id, or a hub id that cannot be loaded (not found, or
            not cached while offline); a text model has no tokenizer, or an empty one; a dual encoder without
            ``tower``; an option value that breaks its rule (naming the option and the valid values).
        MissingExtra: transformers is not installed (an ``ImportError`` saying
            ``pip install "similarity-plugins[hf]"``).
    """
    opts = check_options(exclude_special=exclude_special, preprocess=preprocess, padding_side=padding_side,
                         max_length=max_length, view=view, revision=revision, dtype=dtype, device=device,
                         local_files_only=local_files_only, tower=tower)
    if pooling is not None:
        check_pooling(pooling)
    model, origin = _load(source, opts)
    model = pick_tower(model, opts.tower)
    if model.main_input_name not in ("input_ids", "pixel_values"):
        raise ValueError(f"{type(model).__name__} reads {model.main_input_name!r}; hf() wraps models that read text "
                         "(input_ids) or images (pixel_values); pass a text or vision tower (e.g. model.text_model)")
    check_max_length(model, opts.max_length)
    text = model.main_input_name == "input_ids"
    if text:
        tokenizer = _tokenizer(model, tokenizer, origin)
    if not text and processor is None:
        processor = load_part(origin, "AutoImageProcessor")
    processor = getattr(processor, "image_processor", None) or processor  # a combined processor's image part
    preprocessing = preprocessing_of(model, processor) if processor is not None and not text and opts.preprocess else None
    return HFModel(model, tokenizer=tokenizer if text else None, processor=processor, preprocessing=preprocessing,
                   pooling=pooling or ("mean" if text else "flatten"), exclude_special=opts.exclude_special,
                   view=opts.view or ("text" if text else "image"), padding_side=opts.padding_side,
                   max_length=opts.max_length, source=origin.source)


def _load(source: Any, opts: HFOptions) -> tuple[nn.Module, Origin]:
    if isinstance(source, nn.Module):
        if not hasattr(source, "main_input_name") or not hasattr(source, "config"):
            raise TypeError(f"hf() takes a transformers PreTrainedModel, a save_pretrained folder or a hub id, got "
                            f"{type(source).__name__}; pass other torch models to compare() directly")
        loading = [name for name in ("revision", "dtype", "device", "local_files_only") if getattr(opts, name) is not None]
        if loading:
            raise ValueError(f"{', '.join(loading)} apply when hf() loads a model from a folder or a hub id; a model "
                             "you built is wrapped as it is (convert it yourself, e.g. model.to(dtype), and pass it)")
        return source, Origin(None, {}, source_of_instance(source))
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError(f"hf() takes a transformers PreTrainedModel, a folder path or a hub id, got {type(source).__name__}")
    return load_pretrained(source, revision=opts.revision, dtype=opts.dtype, device=opts.device,
                           local_files_only=opts.local_files_only)


def _tokenizer(model: nn.Module, tokenizer: Any, origin: Origin) -> Any:
    """The tokenizer given, or the one saved with the model; refused when missing or empty (`check_tokenizer`)."""
    where = "hf(tokenizer=...)"
    if tokenizer is None:
        tokenizer = load_part(origin, "AutoTokenizer")
        if tokenizer is None:
            raise ValueError(f"{type(model).__name__} reads token ids, so it needs its tokenizer: pass "
                             "hf(model, tokenizer=...), or a save_pretrained folder or hub id that holds the tokenizer too")
        where = repr(origin.where)
    folder = origin.where if origin.source.get("path") else None
    check_tokenizer(tokenizer, folder, where)
    return tokenizer


class HFModel(nn.Module):
    """A transformers model that reads batches of the data pipeline, as [`hf`][similarity_plugins.hf] returns it
    (build it with that).

    Its children are the transformers model's own children (the same objects), so ``named_modules()`` gives the
    model's names, and its parameters, buffers and flags are the model's.

    Attributes:
        hf_model (nn.Module): the transformers model.
        tokenizer (Any): the tokenizer of a text model (with its EOS token as pad token when it has none), or None.
        processor (Any): the processor of a vision model, or None.
        preprocessing (Preprocessing | None): the processor's resize, crop and normalisation applied to images, or
            None.
        pooling (str): how a block's (B, T, D) tokens become one row per sample (``"mean"``, ``"last"``,
            ``"first"`` or ``"flatten"``).
        exclude_special (bool): whether special tokens are left out of ``"mean"``.
        view (str): the view of paired data the model reads (``"text"`` or ``"image"``).
        padding_side (str | None): ``"right"`` or ``"left"`` for a text model.
        max_length (int): the longest tokenized sample, in tokens.
        source (dict): where the model came from: ``{"path", "hub_id", "revision", "commit"}``, JSON-able.
    """

    def __init__(self, model: nn.Module, *, tokenizer: Any, processor: Any, pooling: str, exclude_special: bool,
                 view: str, padding_side: str | None, max_length: int | None,
                 preprocessing: Preprocessing | None = None, source: dict | None = None) -> None:
        super().__init__()
        check_pooling(pooling)
        if padding_side not in (None, "left", "right"):
            raise ValueError(f"padding_side must be 'left' or 'right', got {padding_side!r}")
        object.__setattr__(self, "hf_model", model)   # not a child: its children are ours, under its names
        for name, child in model.named_children():
            self.add_module(name, child)
        self.tokenizer = _with_pad(tokenizer)
        self.processor = processor
        self.preprocessing = preprocessing
        self.pooling = pooling
        self.exclude_special = bool(exclude_special)
        self.view = view
        self.padding_side = padding_side
        self.max_length = max_length or _position_limit(model.config, tokenizer)
        self.source = dict(source) if source is not None else source_of_instance(model)
        self._vocab_rows = vocabulary_rows(model) if tokenizer is not None else None
        self._mask: torch.Tensor | None = None     # the current batch's (B, T) mask of pooled tokens
        self._layers: list[str] | None = None
        accepted = inspect.signature(model.forward).parameters
        self._positions = "position_ids" in accepted
        if tokenizer is not None:   # right padding keeps every model's positions; left only where a run shows it
            self.padding_side = padding_side or "right"
            if self.padding_side == "left":
                check_left_padding(self)

    @property
    def takes_positions(self) -> bool:
        """Whether the model's ``forward`` takes ``position_ids`` (passed under left padding)."""
        return self._positions

    @property
    def reads_text(self) -> bool:
        """Whether the model reads token ids (a tokenizer is set) rather than ``pixel_values``."""
        return self.tokenizer is not None

    def model_inputs(self, x: Any) -> dict[str, torch.Tensor]:
        """The keyword arguments of the transformers model for one batch ``x`` of the data pipeline.

        ``x``: a list of B strings (text), a (B, C, H, W) float tensor (``pixel_values``), or a dict of views
        of which ``self.view`` is read. Sets the batch's token mask for pooling.
        """
        if isinstance(x, dict):
            if self.view not in x:
                raise ValueError(f"the data has views {', '.join(map(repr, x))} but this {type(self.hf_model).__name__} "
                                 f"reads the view {self.view!r}; pass hf(..., view=NAME) with one of them")
            x = x[self.view]
        device = next(self.parameters()).device
        if self.reads_text:
            return self._tokenize(x, device)
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{type(self.hf_model).__name__} reads images (pixel_values) but the batch is a "
                            f"{type(x).__name__}; give it image data (a tensor) or name its view with hf(view=...)")
        self._mask = None
        x = x.to(device)
        return {"pixel_values": x if self.preprocessing is None else preprocess_images(x, self.preprocessing)}

    def _tokenize(self, texts: Any, device: torch.device) -> dict[str, torch.Tensor]:
        if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
            raise TypeError(f"{type(self.hf_model).__name__} reads text: give it a list of strings (text_data, "
                            f"paired_data), got {type(texts).__name__}")
        enc = encode(self.tokenizer, texts, padding_side=self.padding_side, max_length=self.max_length,
                     special_mask=self.exclude_special)
        check_token_ids(enc["input_ids"], self._vocab_rows, self.hf_model, self.tokenizer)
        mask = enc["attention_mask"]
        inputs = {"input_ids": enc["input_ids"].to(device), "attention_mask": mask.to(device)}
        if self._positions and self.padding_side == "left":   # real tokens start at position 0 whatever the padding
            inputs["position_ids"] = (mask.cumsum(1) - 1).clamp(min=0).to(device)
        self._mask = mask.bool()
        if self.exclude_special:
            content = self._mask & ~enc["special_tokens_mask"].bool()
            self._mask = torch.where(content.any(1, keepdim=True), content, self._mask)  # all special: keep all
        self._mask = self._mask.to(device)
        return inputs

    def token_counts(self, texts: list[str]) -> list[int]:
        """How many tokens the model reads of each text (after truncation to ``max_length``), for batching by
        length; the tokenizer is left as it was."""
        return token_counts(self.tokenizer, texts, self.max_length)

    def forward(self, x: Any) -> Any:
        """Run the transformers model on one batch of the data pipeline (see `model_inputs`)."""
        inputs = self.model_inputs(x)
        root, saved = self.hf_model, self.hf_model.training
        root.training = self.training  # the root's flag follows ours (eval under `frozen`)
        try:
            return root(**inputs)
        finally:
            root.training = saved

    def _apply(self, fn: Any, recurse: bool = True) -> HFModel:
        # .to(), .half(), .cuda() reach the transformers model's own root parameters and buffers too, if any
        self.hf_model._apply(fn, recurse)
        return self

    def layer_activation(self, output: Any) -> torch.Tensor:
        """One block's output for the current batch as rows: its hidden states, pooled (see [`hf`][hf]).

        Returns (B, D) for ``"mean"``, ``"last"``, ``"first"``; (B, T, D) for ``"flatten"`` (flattened later).
        """
        hidden = first_tensor(output)
        if hidden is None:
            raise TypeError(f"a layer of {type(self.hf_model).__name__} outputs a {type(output).__name__} without a "
                            "tensor; choose a block from layers(model)")
        return pool_tokens(hidden, self._mask, self.pooling)

    def canonical_layers(self) -> list[str]:
        """The embedding output and every block's output, in forward order (the model's own module names)."""
        if self._layers is None:
            from .hf_layers import block_layers

            self._layers = block_layers(self)
        return list(self._layers)

    def reading_settings(self) -> dict[str, Any]:
        """What the model reads a sample with besides its weights: pooling, ``exclude_special``, view, padding side,
        maximum length, the preprocessing of images, and its tokenizer's and processor's settings (plain values)."""
        settings = {"pooling": self.pooling, "exclude_special": self.exclude_special, "view": self.view,
                    "padding_side": self.padding_side, "max_length": self.max_length, "preprocessing": self.preprocessing}
        return wrapper_reading(settings, self.tokenizer, self.processor)

    def provenance(self) -> dict[str, Any]:
        """What an activation store's entry records of the model besides its class: ``hf_class`` (the transformers
        class), ``source`` and, for a text model, ``tokenizer`` (its name and vocabulary size)."""
        out: dict[str, Any] = {"hf_class": type(self.hf_model).__name__}
        if self.source is not None:
            out["source"] = self.source
        if self.tokenizer is not None:
            out["tokenizer"] = {"name": getattr(self.tokenizer, "name_or_path", None) or type(self.tokenizer).__name__,
                                "vocabulary": len(self.tokenizer)}
        return out


def _with_pad(tokenizer: Any) -> Any:
    """The tokenizer, or a copy whose pad token is its EOS token when it has none (GPT-2's); the user's is kept."""
    if tokenizer is None or tokenizer.pad_token is not None:
        return tokenizer
    if tokenizer.eos_token is None:
        raise ValueError(f"the tokenizer {type(tokenizer).__name__} has no pad token and no EOS token to pad "
                         "with; set tokenizer.pad_token")
    own = copy.deepcopy(tokenizer)
    own.pad_token = own.eos_token
    return own


def _position_limit(config: Any, tokenizer: Any) -> int:
    limits = [(position_limit(config) or (None,))[0], getattr(tokenizer, "model_max_length", None)]
    usable = [int(v) for v in limits if isinstance(v, int) and 0 < v < 1_000_000]
    return min(usable) if usable else 512

