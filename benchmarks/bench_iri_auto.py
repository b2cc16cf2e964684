"""``precision="auto"`` against ``"float32"`` per converged IRI, on four deep cuts of four architectures.

Run: ``python -m pytest benchmarks/bench_iri_auto.py --benchmark-only -s``. One group per cut, each with the
same donor and seeds in ``"float32"`` and ``"auto"`` (and, when asked, ``"bfloat16"`` forced: what ``auto`` runs
on a device with bfloat16 matrix units where the probe finds it faster; on a CPU without them ``auto`` is
float32):

- ``resnet18-layer3.1``: ResNet-18 with the CIFAR stem (the paper's scale), 32x32 inputs;
- ``resnet34-layer3``: torchvision's ResNet-34 (its own stem: stride-2 convolution and max-pool), 32x32 inputs;
- ``vgg11bn-pool4``: VGG-11 with batch norm, cut after its fourth max-pool (``features.21``), 32x32 inputs;
- ``vit-block3``: a torchvision VisionTransformer (32x32, patch 4, 6 blocks, width 192), cut after block 3.

``extra_info``: seconds per converged IRI, the converged fraction, the precision that ran and why, how many
samples left bfloat16 and why (``lowp_switched_close`` / ``_stalled`` / ``_budget``) and the median step they
did so at, how many a check of the bfloat16 gradient sent on in plain float32 (``float32_fallbacks``) and the
phase each sample finished in (``finished_in``); on the ``auto`` and ``bfloat16`` runs,
``per_converged_float32_over_<mode>`` (above 1: faster per converged IRI than float32) and
``converged_minus_float32``. Weights are seeded random (no download) unless
``SP_BENCH_AUTO_EPOCHS`` > 0 trains each donor that many epochs on 32x32 digits in RGB first; convergence
depends on the weights, the cost of a step does not. Defaults: 64 seeds at the paper-scale cut and 24 at the
others, 1000 steps (the default budget), tol 1e-2, the modes ``float32`` and ``auto``; ``SP_BENCH_AUTO_SEEDS``
(every cut), ``SP_BENCH_AUTO_STEPS``, ``SP_BENCH_AUTO_CUTS`` and ``SP_BENCH_AUTO_MODES`` (comma-separated, e.g.
``float32,auto,bfloat16``) change them.
"""

from __future__ import annotations

import os
from functools import lru_cache

import pytest
import torch
import torchvision
from ratios import RUNS, record

from similarity_plugins.iri import generate_iris

SEEDS = {"resnet18-layer3.1": 64, "resnet34-layer3": 24, "vgg11bn-pool4": 24, "vit-block3": 24}
if os.environ.get("SP_BENCH_AUTO_SEEDS"):
    SEEDS = dict.fromkeys(SEEDS, int(os.environ["SP_BENCH_AUTO_SEEDS"]))
STEPS = int(os.environ.get("SP_BENCH_AUTO_STEPS", "1000"))
EPOCHS = int(os.environ.get("SP_BENCH_AUTO_EPOCHS", "0"))
CUTS = {"resnet18-layer3.1": ("resnet18", "layer3.1"), "resnet34-layer3": ("resnet34", "layer3"),
        "vgg11bn-pool4": ("vgg11_bn", "features.21"), "vit-block3": ("vit", "encoder.layers.encoder_layer_3")}
CHOSEN = os.environ.get("SP_BENCH_AUTO_CUTS", ",".join(CUTS)).split(",")
MODES = os.environ.get("SP_BENCH_AUTO_MODES", "float32,auto").split(",")


def _cifar_resnet(arch: str) -> torch.nn.Module:
    model = getattr(torchvision.models, arch)(num_classes=10)
    model.conv1 = torch.nn.Conv2d(3, 64, 3, 1, 1, bias=False)
    model.maxpool = torch.nn.Identity()
    return model


def _build(arch: str) -> torch.nn.Module:
    if arch == "resnet18":
        return _cifar_resnet(arch)
    if arch.startswith("resnet"):
        return getattr(torchvision.models, arch)(num_classes=10)
    if arch == "vgg11_bn":
        model = torchvision.models.vgg11_bn(num_classes=10)
        model.avgpool = torch.nn.AdaptiveAvgPool2d(7)
        return model
    return torchvision.models.VisionTransformer(image_size=32, patch_size=4, num_layers=6, num_heads=6,
                                                hidden_dim=192, mlp_dim=384, num_classes=10)


@lru_cache(maxsize=None)
def donor(arch: str) -> torch.nn.Module:
    """The seeded donor of ``arch`` (trained ``EPOCHS`` epochs on RGB digits when asked), in eval mode."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = _build(arch)
    if EPOCHS > 0:
        from torch.utils.data import TensorDataset

        from similarity_plugins.apps.training import train_classifier
        from similarity_plugins.datasets import digits_data

        x, y = digits_data(size=32).train.tensors
        rgb = TensorDataset(x.expand(-1, 3, -1, -1).contiguous(), y)
        train_classifier(model, rgb, epochs=EPOCHS, lr=1e-3, seed=0, progress="never")
    return model.eval()


def _images(n: int) -> torch.Tensor:
    """Smooth random RGB images (n, 3, 32, 32) in [0, 1], seeded."""
    low = torch.rand(n, 3, 8, 8, generator=torch.Generator().manual_seed(1))
    return torch.nn.functional.interpolate(low, size=(32, 32), mode="bilinear", align_corners=False).clamp(0, 1)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("cut", CHOSEN)
def test_iri_auto(benchmark, cut, mode):
    benchmark.group = f"iri-auto-{cut}"
    arch, layer = CUTS[cut]
    n = SEEDS[cut]
    model, seeds, out = donor(arch), _images(n), {}

    def run() -> None:
        out["iris"] = generate_iris(model, layer, seeds, steps=STEPS, tol=1e-2, precision=mode,
                                    batch_size=min(n, 128), progress="never")

    benchmark.pedantic(run, rounds=1, iterations=1)
    iris = out["iris"]
    converged = int(iris.converged.sum())
    seconds = float(benchmark.stats.stats.median)
    record(f"{cut}/{mode}", benchmark)
    stats = iris.stats
    benchmark.extra_info.update(
        cut=cut, seeds=n, steps=STEPS, trained_epochs=EPOCHS, ran=iris.settings["precision"],
        rule=iris.settings["precision_rule"], converged_fraction=round(converged / len(iris), 3),
        s_per_converged=round(seconds / converged, 3) if converged else None,
        median_steps=float(iris.steps.double().median()),
        **{k: stats[k] for k in stats if k.startswith(("lowp_", "grad16_", "float32_", "finished_in"))})
    for other in ("auto", "bfloat16"):
        _compare(cut, other)


def _compare(cut: str, other: str) -> None:
    """``per_converged_float32_over_<other>`` and ``converged_minus_float32`` once both runs of ``cut`` ran."""
    base, run = RUNS.get(f"{cut}/float32"), RUNS.get(f"{cut}/{other}")
    if base is None or run is None:
        return
    run.extra_info["converged_minus_float32"] = round(run.extra_info["converged_fraction"]
                                                      - base.extra_info["converged_fraction"], 3)
    if base.extra_info["s_per_converged"] and run.extra_info["s_per_converged"]:
        ratio = base.extra_info["s_per_converged"] / run.extra_info["s_per_converged"]
        for r in (base, run):
            r.extra_info[f"per_converged_float32_over_{other}"] = round(ratio, 3)
