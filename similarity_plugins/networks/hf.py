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

from .pooling import check_pooling, pool_tokens
from .preprocess import Preprocessing, preprocess_images, preprocessing_of

if TYPE_CHECKING:  # transformers is optional: its types name the arguments, the module never imports it here
    from transformers import BaseImageProcessor, PreTrainedTokenizerBase, ProcessorMixin

__all__ = ["hf"]


def hf(source: nn.Module | str | os.PathLike, *, tokenizer: PreTrainedTokenizerBase | None = None,
       processor: BaseImageProcessor | ProcessorMixin | None = None, pooling: str | None = None,
       exclude_special: bool = False, view: str | None = None, padding_side: str | None = None,
       max_length: int | None = None, preprocess: bool = True) -> HFModel:
    """Wrap a Hugging Face ``transformers`` model so that `compare`, `compare_grid`, `layers` and the CLI take it.

    Args:
        source: a ``PreTrainedModel`` instance, or a local folder written by ``save_pretrained`` (loaded with
            ``local_files_only=True``, as the class named in its config; nothing is ever downloaded).
        tokenizer: the tokenizer of a text model; default: the one saved in ``source``'s folder.
        processor: the image processor of a vision model (or a processor holding one as ``image_processor``);
            default: the one in ``source``'s folder, if any. It is kept as ``wrapped.processor``, and its resize,
            centre crop and normalisation run inside the model (`preprocess_images`) on images in [0, 1] of any
            size. Without a processor, images are read as ``pixel_values`` as they are.
        pooling: how a block's (B, T, D) tokens become one row per sample: ``"mean"`` (the real tokens; the text
            default), ``"last"`` (the last real token), ``"first"`` (the first real token, e.g. CLS),
            ``"flatten"`` (every token, (B, T*D); fixed-length inputs only; the vision default).
        exclude_special: leave special tokens (BOS, EOS, CLS, SEP) out of ``"mean"``.
        view: the view of paired data this model reads (default: ``"text"`` for a model with a tokenizer,
            ``"image"`` otherwise).
        padding_side: ``"left"`` or ``"right"`` (default: the tokenizer's); pooled rows do not depend on it.
        max_length: longest tokenized sample (longer ones are truncated); default: the model's position limit.
        preprocess: apply the processor's preprocessing to images (False: the images are ``pixel_values``
            already, e.g. made by the processor in a dataset).

    Returns:
        An `HFModel` (an ``nn.Module``) sharing the model's modules (nothing is copied or changed).

    Raises:
        ValueError: ``source`` is a string that is not a local folder (a hub id), a text model has no tokenizer,
            or an option value is not one of its choices.
    """
    model = _load(source)
    if model.main_input_name not in ("input_ids", "pixel_values"):
        raise ValueError(f"{type(model).__name__} reads {model.main_input_name!r}; hf() wraps models that read text "
                         "(input_ids) or images (pixel_values); pass a text or vision tower (e.g. model.text_model)")
    text = model.main_input_name == "input_ids"
    folder = source if isinstance(source, (str, os.PathLike)) else None
    if text and tokenizer is None:
        tokenizer = _from_folder(folder, "AutoTokenizer")
        if tokenizer is None:
            raise ValueError(f"{type(model).__name__} reads token ids, so it needs its tokenizer: pass "
                             "hf(model, tokenizer=...) or a save_pretrained folder that holds the tokenizer too")
    if not text and processor is None and folder is not None:
        processor = _from_folder(folder, "AutoImageProcessor")
    processor = getattr(processor, "image_processor", None) or processor  # a combined processor's image part
    preprocessing = preprocessing_of(model, processor) if processor is not None and not text and preprocess else None
    return HFModel(model, tokenizer=tokenizer if text else None, processor=processor, preprocessing=preprocessing,
                   pooling=pooling or ("mean" if text else "flatten"), exclude_special=exclude_special,
                   view=view or ("text" if text else "image"), padding_side=padding_side, max_length=max_length)


def _load(source: Any) -> nn.Module:
    if isinstance(source, nn.Module):
        if not hasattr(source, "main_input_name") or not hasattr(source, "config"):
            raise TypeError(f"hf() takes a transformers PreTrainedModel or a save_pretrained folder, got "
                            f"{type(source).__name__}; pass other torch models to compare() directly")
        return source
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError(f"hf() takes a transformers PreTrainedModel or a folder path, got {type(source).__name__}")
    if not os.path.isdir(source):
        raise ValueError(f"{str(source)!r} is not a local folder; hf() never downloads (a hub id is refused): "
                         "download the model yourself and save it with model.save_pretrained(DIR), then pass DIR")
    import transformers

    config = transformers.AutoConfig.from_pretrained(source, local_files_only=True)
    names = [n for n in (config.architectures or []) if hasattr(transformers, n)]
    cls = getattr(transformers, names[0]) if names else transformers.AutoModel
    return cls.from_pretrained(source, local_files_only=True)


def _from_folder(folder: Any, auto: str) -> Any:
    if folder is None:
        return None
    import transformers

    try:
        return getattr(transformers, auto).from_pretrained(folder, local_files_only=True)
    except (OSError, ValueError, KeyError):
        return None


class HFModel(nn.Module):
    """A transformers model that reads batches of the data pipeline; see [`hf`][hf] (build it with that).

    Its children are the transformers model's own children (the same objects), so ``named_modules()`` gives the
    model's names and parameters, buffers and flags are the model's. Attributes: ``hf_model`` (the transformers
    model), ``tokenizer``, ``processor``, ``preprocessing`` (the processor's `Preprocessing` applied to images,
    or None), ``pooling``, ``exclude_special``, ``view``.
    """

    def __init__(self, model: nn.Module, *, tokenizer: Any, processor: Any, pooling: str, exclude_special: bool,
                 view: str, padding_side: str | None, max_length: int | None,
                 preprocessing: Preprocessing | None = None) -> None:
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
        self._mask: torch.Tensor | None = None     # the current batch's (B, T) mask of pooled tokens
        self._layers: list[str] | None = None
        accepted = inspect.signature(model.forward).parameters
        self._positions = "position_ids" in accepted

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
        kw = {"padding_side": self.padding_side} if self.padding_side else {}
        enc = self.tokenizer(list(texts), padding=True, truncation=True, max_length=self.max_length,
                             return_tensors="pt", return_special_tokens_mask=self.exclude_special, **kw)
        mask = enc["attention_mask"]
        inputs = {"input_ids": enc["input_ids"].to(device), "attention_mask": mask.to(device)}
        if self._positions:   # left padding: real tokens start at position 0 whatever the padding
            inputs["position_ids"] = (mask.cumsum(1) - 1).clamp(min=0).to(device)
        self._mask = mask.bool()
        if self.exclude_special:
            content = self._mask & ~enc["special_tokens_mask"].bool()
            self._mask = torch.where(content.any(1, keepdim=True), content, self._mask)  # all special: keep all
        self._mask = self._mask.to(device)
        return inputs

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


def first_tensor(output: Any) -> torch.Tensor | None:
    """The hidden states of a block's output: the tensor itself, or the first tensor of a tuple or ModelOutput."""
    if isinstance(output, torch.Tensor):
        return output
    values = output.values() if isinstance(output, dict) else output if isinstance(output, (tuple, list)) else ()
    return next((v for v in values if isinstance(v, torch.Tensor)), None)


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
    limits = [getattr(config, a, None) for a in ("max_position_embeddings", "n_positions")]
    limits.append(getattr(tokenizer, "model_max_length", None))
    usable = [int(v) for v in limits if isinstance(v, int) and 0 < v < 1_000_000]
    return min(usable) if usable else 512

