"""Shared services of one ``compare`` call: memoised splits, activations, outputs and results.

Every metric of a comparison gets the same :class:`Context`, so the front's activations at a layer
are computed once however many metrics read them, and expensive products (fitted stitches, IRI
sets) are computed once per key with :meth:`Context.remember`.
"""

from __future__ import annotations

from typing import Any, Callable, Hashable

import torch
from torch import nn

from .activations import extract_activations, flatten, model_outputs
from .data import Data
from .networks import SplitNetwork


class Context:
    """Services shared by the metrics of one comparison (see module docstring).

    Attributes: ``data`` (:class:`Data`), ``seed`` (int), ``device`` (``torch.device``),
    ``progress`` (bool: show progress bars), ``options`` (the global options dict), ``memo``
    (the memo dict, keyed by hashable tuples).
    """

    def __init__(self, data: Data, *, seed: int = 0, device: torch.device | None = None,
                 options: dict | None = None, progress: bool = False, batch_size: int = 256) -> None:
        self.data = data
        self.seed = int(seed)
        self.device = device or torch.device("cpu")
        self.options = dict(options or {})
        self.progress = progress
        self.batch_size = batch_size
        self.memo: dict[Hashable, Any] = {}

    def for_call(self, data: Data, *, seed: int, device: torch.device, options: dict | None,
                 progress: bool) -> "Context":
        """A new context with one call's settings that shares this one's memo (its caches).

        This context is left as it is. The memo is shared only when ``data`` holds the same split
        objects as ``self.data`` (the caches are keyed by model, layer and split name, not by the data);
        for other data the new context starts with an empty memo of its own.
        """
        child = Context(data, seed=seed, device=device, options=options, progress=progress, batch_size=self.batch_size)
        if self.data.train is data.train and self.data.test is data.test:
            child.memo = self.memo
        return child

    def remember(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        """Return the memoised value for ``key``, computing it with ``compute()`` the first time."""
        if key not in self.memo:
            self.memo[key] = compute()
        return self.memo[key]

    def options_for(self, metric: str, metric_names: set[str] | None = None) -> dict:
        """Global options (entries that are not per-metric dicts) updated with ``options[metric]``."""
        merged = {k: v for k, v in self.options.items()
                  if not (isinstance(v, dict) and (metric_names is None or k in metric_names))}
        own = self.options.get(metric)
        if isinstance(own, dict):
            merged.update(own)
        return merged

    def split(self, model: nn.Module, layer: str, taps: tuple[str, ...] | None = None) -> SplitNetwork:
        """The memoised :class:`SplitNetwork` of ``model`` at ``layer``."""
        key = ("split", id(model), layer, taps)
        return self.remember(key, lambda: SplitNetwork(model, layer, taps))

    def activations(self, model: nn.Module, layer: str, split: str = "test", *, flat: bool = True) -> torch.Tensor:
        """Activations of ``model`` at ``layer`` on a data split, float32 on the CPU, memoised.

        ``flat=True`` gives (N, D) (CNN maps as C*H*W, tokens as T*D); ``flat=False`` the layer's
        own shape (N, C, H, W) or (N, T, D).
        """
        def compute() -> tuple[torch.Tensor, torch.Tensor]:
            return extract_activations(self.split(model, layer), self.data.split(split),
                                       batch_size=self.batch_size, device=self.device,
                                       progress=self.progress, desc=f"activations {layer} ({split})")
        acts, _ = self.remember(("activations", id(model), layer, split), compute)
        return flatten(acts) if flat else acts

    def outputs(self, model: nn.Module, split: str = "test") -> tuple[torch.Tensor, torch.Tensor]:
        """Logits (N, classes) and labels (N,) of ``model`` on a split, on the CPU, memoised."""
        return self.remember(("outputs", id(model), split),
                             lambda: model_outputs(model, self.data.split(split), batch_size=self.batch_size, device=self.device))
