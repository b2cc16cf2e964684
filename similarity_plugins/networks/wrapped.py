"""The wrapped-model Protocol: what the runner and the services may ask a model that comes with what it reads a
sample with, and the digest of how a model reads (part of every key of stored rows).

A plain ``nn.Module`` reads its batches as they come, gives its layers' outputs as rows, and its rows depend on its
tensors and module settings alone (`module_digest`). A model that says more does so through one of two declared
Protocols, which the adapters implement (`similarity_plugins.hf` returns a [`WrappedModel`][WrappedModel],
`similarity_plugins.preprocessed` a [`ReadsSamples`][ReadsSamples]). Every room that asks a model whether it is
wrapped, what it reads and where it comes from asks these Protocols (``isinstance``), never an attribute by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

import torch
from torch import nn

from ..utils.digest import json_digest


@runtime_checkable
class ReadsSamples(Protocol):
    """A model whose rows depend on more than its tensors and module settings (a tokenizer, an image processor, a
    preprocessing, a pooling rule), and says what."""

    def reading_settings(self) -> dict[str, Any]:
        """What, besides its tensors and module settings, changes the rows the model gives for a sample.

        Returns:
            A dict of plain values (JSON-able, or written with ``repr``); equal dicts: the same reading.
        """
        ...


@runtime_checkable
class WrappedModel(ReadsSamples, Protocol):
    """A model wrapped with what it reads a sample with (`similarity_plugins.hf` builds one): it reads one view of
    the data, may read text, gives each hooked layer's output as rows through its own rule, knows its own cut
    points and where it came from.

    Attributes:
        view: the view of paired data the model reads (``"text"``, ``"image"``, or a name of the user's).
        reads_text: whether the model reads text (a list of strings a batch), so its batches may be regrouped by
            length (`length_batches`).
        pooling: how a layer's (B, T, D) output becomes rows: ``"mean"``, ``"last"``, ``"first"`` or ``"flatten"``.
        source: where the model came from, ``{"path", "hub_id", "revision", "commit"}`` (JSON-able), or None.
    """

    view: str
    reads_text: bool
    pooling: str
    source: dict | None

    def layer_activation(self, output: Any) -> torch.Tensor:
        """One hooked layer's output for the current batch as rows: (B, D), or (B, T, D) for ``"flatten"``."""
        ...

    def canonical_layers(self) -> list[str]:
        """The model's cut points in forward order (its own module names)."""
        ...

    def token_counts(self, texts: list[str]) -> list[int]:
        """How many tokens the model reads of each text (for batching by length)."""
        ...

    def provenance(self) -> dict[str, Any]:
        """What a record of the model's rows keeps of it besides its class (JSON-able): its source and what it
        reads with, by name."""
        ...


def reading_settings(model: nn.Module) -> dict[str, Any]:
    """Everything besides its tensors and module settings that changes the rows ``model`` gives for a sample: what a
    [`ReadsSamples`][ReadsSamples] model declares; an empty dict for a plain module.

    Args:
        model: any ``nn.Module``.

    Returns:
        A dict of plain values (equal dicts: the same reading).
    """
    return dict(model.reading_settings()) if isinstance(model, ReadsSamples) else {}


def reading_digest(model: nn.Module, settings: dict[str, Any] | None = None) -> str:
    """A digest (hex) of `reading_settings` (``settings``, when the caller has them): equal for two models that read
    a sample alike."""
    return json_digest(reading_settings(model) if settings is None else settings)


def source_of(model: nn.Module) -> dict | None:
    """Where a [`WrappedModel`][WrappedModel] came from (a copy of its ``source``), or None for any other model."""
    if isinstance(model, WrappedModel) and isinstance(model.source, Mapping):
        return dict(model.source)
    return None
