"""Standard benchmark workloads: two trained donors, a layer, data and fast per-family metric options.

A workload is everything a metric needs besides its own work, built once per process and deterministic
(seeded initial weights, seeded training on scikit-learn digits; nothing is downloaded):

- ``small`` (default): two `SmallCNN` (width 16) on digits at 1x32x32,
  trained 2 epochs each (seeds 0 and 1), compared at ``block3`` (16 x 4 x 4 = 256 values; ``cca`` and
  ``pwcca`` at ``block4``, 64 values, since CCA needs more samples than both widths together); 512 training
  / 450 test images. Seconds per metric on 2 CPU cores.
- ``resnet18``: two torchvision ResNet-18 (10 classes, standard stem) on digits at 3x32x32 (grey replicated),
  trained 1 epoch each, compared at ``layer3`` (256 x 2 x 2 = 1,024 values); 512 training / 256 test images.

Metric options are the library's defaults shortened so that a round takes seconds: stitching metrics
(``stitch-*``, ``iri-*``) train 2 epochs from the least-squares start; IRI metrics optimise a few seeds
(64) for a short budget (100 steps; their IRIs do not converge: the timing, not the score, is the point here). A metric
outside these families gets no options (its own defaults).
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable

import torch
from torch import nn

from ...networks.data import Data

STITCH_FAST = {"epochs": 2, "batch_size": 128, "ls_samples": 512}
IRI_FAST = {**STITCH_FAST, "batch_size": 32, "ls_samples": 64, "iri_max_seeds": 64, "iri_steps": 100, "iri_batch_size": 64}


@dataclass(frozen=True)
class Donors:
    """What one workload hands every metric: ``front`` and ``end`` (trained, eval mode, CPU), the
    ``layer`` they are compared at (a module name present in both) and the ``data`` (train and test)."""

    front: nn.Module
    end: nn.Module
    layer: str
    data: Data


@dataclass(frozen=True)
class Workload:
    """A named benchmark workload (see the module docstring).

    ``build(seed)`` returns the `Donors` (called through `donors`, which caches per process);
    ``family_options`` maps metric-name wildcards to option dicts merged in order for a matching metric;
    ``rounds`` and ``warmup_rounds`` are the default timed and untimed rounds of one benchmark.
    """

    name: str
    description: str
    build: Callable[[int], Donors]
    family_options: tuple[tuple[str, dict], ...] = field(default=(("stitch-*", STITCH_FAST), ("iri-*", IRI_FAST)))
    rounds: int = 3
    warmup_rounds: int = 1
    family_layers: tuple[tuple[str, str], ...] = ()

    def layer_for(self, metric: str, donors: Donors) -> str:
        """The layer ``metric`` is timed at: the first matching ``family_layers`` entry, else ``donors.layer``."""
        return next((layer for pattern, layer in self.family_layers if fnmatch.fnmatchcase(metric, pattern)),
                    donors.layer)

    def donors(self, seed: int = 0) -> Donors:
        """The workload's donors and data for ``seed`` (trained on first use, then cached for the process)."""
        return _cached_donors(self.name, self.build, int(seed))

    def options_for(self, metric: str, extra: dict | None = None, takes: dict | None = None) -> dict:
        """Options for ``metric``: every matching family's, then the user's ``extra`` on top (its global
        entries, then its per-metric dict ``extra[metric]``; other metrics' dicts are skipped). With
        ``takes`` (the metric's declared options; None: it takes anything) only the options it takes."""
        options: dict[str, Any] = {}
        for pattern, values in self.family_options:
            if fnmatch.fnmatchcase(metric, pattern):
                options.update(values)
        extra = extra or {}
        options.update({k: v for k, v in extra.items() if not isinstance(v, dict)})
        if isinstance(extra.get(metric), dict):
            options.update(extra[metric])
        return options if takes is None else {k: v for k, v in options.items() if k in takes}


@lru_cache(maxsize=8)
def _cached_donors(name: str, build: Callable[[int], Donors], seed: int) -> Donors:
    return build(seed)


def _digits_subset(size: int, channels: int, n_train: int, n_test: int, seed: int) -> Data:
    """Digits at ``size`` x ``size`` with ``channels`` channels: the first ``n_train`` / ``n_test`` images
    of a seeded permutation of each split (1,347 / 450 available)."""
    from ...datasets import ImageTensors, digits

    splits = []
    for split, limit, offset in (("train", n_train, 0), ("test", n_test, 1)):
        base = digits(split, size=size)
        order = torch.randperm(len(base), generator=torch.Generator().manual_seed(seed + offset))[:limit].sort().values
        x = base.x[order].repeat(1, channels, 1, 1) if channels > 1 else base.x[order]
        splits.append(ImageTensors(x.contiguous(), base.y[order], num_classes=10))
    return Data(train=splits[0], test=splits[1])


def _trained(spec: str, train: Any, seed: int, epochs: int, in_channels: int) -> nn.Module:
    from ..training import train_classifier
    from ..zoo import build_model

    model = build_model(spec, num_classes=10, in_channels=in_channels, seed=seed)
    train_classifier(model, train, epochs=epochs, lr=3e-3, batch_size=64, seed=seed, progress="never")
    return model.eval()


def _small(seed: int) -> Donors:
    full = _digits_subset(32, 1, 1347, 450, seed)
    data = _digits_subset(32, 1, 512, 450, seed)
    front = _trained("small-cnn?width=16", full.train, seed, 2, 1)
    end = _trained("small-cnn?width=16", full.train, seed + 1, 2, 1)
    return Donors(front, end, "block3", data)


def _resnet18(seed: int) -> Donors:
    data = _digits_subset(32, 3, 512, 256, seed)
    front = _trained("torchvision:resnet18", data.train, seed, 1, 3)
    end = _trained("torchvision:resnet18", data.train, seed + 1, 1, 3)
    return Donors(front, end, "layer3", data)


WORKLOADS: dict[str, Workload] = {
    # CCA needs more test samples than the two layers' widths together (n - 1 > Dx + Dy): 450 digits are too few
    # at block3 (256 + 256 values), so the CCA family is timed at block4 (64 + 64)
    "small": Workload("small", "SmallCNN width 16, digits 1x32x32, block3 (cca, pwcca: block4), 512 train / 450 test",
                      _small, family_layers=(("cca", "block4"), ("pwcca", "block4"))),
    "resnet18": Workload("resnet18", "ResNet-18, digits 3x32x32, layer3, 512 train / 256 test", _resnet18,
                         rounds=2, warmup_rounds=1),
}
DEFAULT_WORKLOAD = "small"


def get_workload(workload: str | Workload) -> Workload:
    """The `Workload` named ``workload`` (a ``Workload`` is returned as is).

    Raises ``ValueError`` naming the valid workloads for an unknown name.
    """
    if isinstance(workload, Workload):
        return workload
    if not isinstance(workload, str) or workload.strip() not in WORKLOADS:
        raise ValueError(f"unknown workload {workload!r}; valid workloads: {', '.join(WORKLOADS)}")
    return WORKLOADS[workload.strip()]


def select_workloads(text: str | None) -> list[Workload]:
    """Comma-separated workload names (``"small,resnet18"``; None: the default) as `Workload` objects."""
    names = [n.strip() for n in (text or DEFAULT_WORKLOAD).split(",") if n.strip()]
    if not names:
        raise ValueError(f"no workload given; valid workloads: {', '.join(WORKLOADS)}")
    return [get_workload(n) for n in dict.fromkeys(names)]
