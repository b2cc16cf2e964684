"""``IRISet``: a set of identically represented inputs with its quality report."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch


class Summary(dict):
    """A plain dict of summary figures that can also be called (``iris.summary`` and ``iris.summary()``)."""

    def __call__(self) -> Summary:
        return self


@dataclass
class IRISet:
    """IRIs for a set of seeds, in the seeds' order.

    Attributes:
        inputs: (N, ...) float tensor, same shape, dtype and device as the seeds, values in [0, 1].
        rel_error: (N,) float64, ``||f(x') - f(x)|| / ||f(x)||`` of each returned IRI (its best iterate).
        steps: (N,) int64, optimiser steps each sample used (fewer than the budget when it reached ``tol``).
        seed_distance: (N,) float64, RMS pixel distance ``sqrt(mean((x' - x)**2))`` between IRI and seed.
        settings: the settings that produced the set: ``preset`` (the named preset that ran), optimiser, every
            tuning value, tol, budget, init, seed, ...
        stats: timing and work counters of the run that produced it (empty when loaded from cache).
        key: the cache key (a hex digest) when the set came from ``generate_iris``, else None.
    """

    inputs: torch.Tensor
    rel_error: torch.Tensor
    steps: torch.Tensor
    seed_distance: torch.Tensor
    settings: dict[str, Any] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)
    key: str | None = None

    def __len__(self) -> int:
        return int(self.inputs.shape[0])

    @property
    def converged(self) -> torch.Tensor:
        """(N,) bool: samples whose error reached the tolerance."""
        return self.rel_error <= float(self.settings.get("tol", 0.0))

    @property
    def summary(self) -> Summary:
        """Median and 95th-percentile relative error, converged fraction, mean seed distance, settings.

        A dict (also callable: ``iris.summary()`` returns the same dict). Keys: ``n``, ``median_error``,
        ``p95_error``, ``max_error``, ``converged_fraction``, ``mean_seed_distance``, ``min_seed_distance``,
        ``mean_steps``, ``settings``.
        """
        err = self.rel_error.double()
        dist = self.seed_distance.double()
        n = len(self)
        return Summary(
            n=n,
            median_error=float(err.median()) if n else float("nan"),
            p95_error=float(torch.quantile(err, 0.95)) if n else float("nan"),
            max_error=float(err.max()) if n else float("nan"),
            converged_fraction=float(self.converged.double().mean()) if n else float("nan"),
            mean_seed_distance=float(dist.mean()) if n else float("nan"),
            min_seed_distance=float(dist.min()) if n else float("nan"),
            mean_steps=float(self.steps.double().mean()) if n else float("nan"),
            settings=dict(self.settings),
        )

    def to_state(self) -> dict[str, Any]:
        """A dict of tensors and plain values for ``torch.save`` (loadable with ``weights_only=True``)."""
        return {
            "inputs": self.inputs.detach().cpu(),
            "rel_error": self.rel_error.cpu(),
            "steps": self.steps.cpu(),
            "seed_distance": self.seed_distance.cpu(),
            "settings": dict(self.settings),
            "key": self.key,
        }

    @classmethod
    def from_state(cls, state: dict[str, Any], device: torch.device | str | None = None) -> IRISet:
        """Rebuild a set saved with [`to_state`][to_state]; ``inputs`` moved to ``device`` when given."""
        inputs = state["inputs"]
        if device is not None:
            inputs = inputs.to(device)
        return cls(inputs, state["rel_error"], state["steps"], state["seed_distance"], dict(state["settings"]),
                   {"from_cache": True}, state.get("key"))

    def __repr__(self) -> str:
        s = self.summary
        return (f"IRISet(n={s['n']}, preset={self.settings.get('preset')!r}, median_error={s['median_error']:.4g}, "
                f"p95_error={s['p95_error']:.4g}, "
                f"converged={s['converged_fraction']:.1%}, mean_seed_distance={s['mean_seed_distance']:.4g})")
