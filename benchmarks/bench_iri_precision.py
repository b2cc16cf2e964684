"""IRIs in mixed precision, measured against this machine's own peak and against float32.

Run: ``python -m pytest benchmarks/bench_iri_precision.py --benchmark-only -s`` (minutes on 2 cores at the
reduced setting). Three groups:

- ``peak-gemm``: a 2048 x 2048 matrix product in float32 and in bfloat16: this processor's rate for the two
  precisions (GFLOP/s in ``extra_info["gflops"]``), the limit the IRI step is measured against;
- ``iri-step-<cut>``: one IRI evaluation (forward of the front plus the gradient to the input) of ResNet-18
  with the CIFAR stem at a cut, batch ``SP_BENCH_STEP_BATCH`` (32), in float32 / bfloat16 autocast and the
  default / channels_last layout. ``extra_info``: the FLOPs of the step (``torch.utils.flop_counter``), the
  achieved GFLOP/s, ``of_peak`` (that rate over the peak of the same precision) and ``over_float32`` (the
  float32 default-layout time over this one);
- ``iri-run-<cut>``: ``generate_iris`` at a cut with ``precision="float32"`` (the IRIs of the float32-only
  optimiser, bit for bit), ``"auto"`` (what this device gets by default) and ``"bfloat16"``: ``extra_info`` has
  the time per converged IRI, the converged fraction, the median float32 error and the precision that ran;
  ``per_converged_float32_over_auto`` / ``_bfloat16`` are the ratios of the times per converged IRI.

The paper's setting is 256 seeds, 1000 steps, tolerance 1e-2, at ``layer3.1`` (and ``layer2.1``,
``layer4.0``): ``SP_BENCH_IRI_SEEDS=256 SP_BENCH_IRI_STEPS=1000 SP_BENCH_IRI_CUTS=layer2.1,layer3.1,layer4.0``
(hours on 2 cores). The defaults are a reduced setting (16 seeds, 60 steps, ``layer3.1``) whose converged
fractions are low; its ratios are what it is for. Weights are seeded random (no download): the cost of a step
does not depend on them, convergence does.
"""

from __future__ import annotations

import copy
import os
from functools import lru_cache

import pytest
import torch
import torchvision
from ratios import RUNS, record, share_ratio

from similarity_plugins.iri import generate_iris
from similarity_plugins.networks.model_state import frozen
from similarity_plugins.networks.split import SplitNetwork

GEMM = 2048
STEP_BATCH = int(os.environ.get("SP_BENCH_STEP_BATCH", "32"))
STEP_CUTS = os.environ.get("SP_BENCH_STEP_CUTS", "layer3.1").split(",")
IRI_SEEDS = int(os.environ.get("SP_BENCH_IRI_SEEDS", "16"))
IRI_STEPS = int(os.environ.get("SP_BENCH_IRI_STEPS", "60"))
IRI_CUTS = os.environ.get("SP_BENCH_IRI_CUTS", "layer3.1").split(",")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
STEP_MODES = [("float32", "default"), ("float32", "channels_last"), ("bfloat16", "default"),
              ("bfloat16", "channels_last")]
_PEAK: dict[str, float] = {}


@lru_cache(maxsize=1)
def resnet18_cifar() -> torch.nn.Module:
    """ResNet-18 with the CIFAR stem (3x3 stride-1 conv1, no max-pool), 10 classes, seeded weights."""
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    model.conv1 = torch.nn.Conv2d(3, 64, 3, 1, 1, bias=False)
    model.maxpool = torch.nn.Identity()
    return model.eval()


def _images(n: int) -> torch.Tensor:
    """Smooth random RGB images (n, 3, 32, 32) in [0, 1], seeded."""
    low = torch.rand(n, 3, 8, 8, generator=torch.Generator().manual_seed(1))
    return torch.nn.functional.interpolate(low, size=(32, 32), mode="bilinear", align_corners=False).clamp(0, 1)


@pytest.mark.parametrize("precision", list(DTYPES))
def test_peak_gemm(benchmark, precision):
    benchmark.group = "peak-gemm"
    g = torch.Generator().manual_seed(0)
    a = torch.randn(GEMM, GEMM, generator=g).to(DTYPES[precision])
    b = torch.randn(GEMM, GEMM, generator=g).to(DTYPES[precision])
    benchmark.pedantic(torch.mm, args=(a, b), rounds=5, iterations=1, warmup_rounds=1)
    _PEAK[precision] = 2 * GEMM ** 3 / median_seconds_of(benchmark) / 1e9
    benchmark.extra_info.update(precision=precision, gflops=round(_PEAK[precision], 1))


def median_seconds_of(benchmark) -> float:
    return float(benchmark.stats.stats.median)


def _step_flops(front: torch.nn.Module, x: torch.Tensor) -> int:
    from torch.utils.flop_counter import FlopCounterMode

    xx = x.clone().requires_grad_(True)
    counter = FlopCounterMode(display=False)
    with counter:
        torch.autograd.backward(front(xx).float().sum(), inputs=[xx])
    return int(counter.get_total_flops())


@pytest.mark.parametrize("cut", STEP_CUTS)
@pytest.mark.parametrize("precision,layout", STEP_MODES, ids=[f"{p}-{f}" for p, f in STEP_MODES])
def test_iri_step(benchmark, cut, precision, layout):
    benchmark.group = f"iri-step-{cut}"
    model = resnet18_cifar()
    front = copy.deepcopy(SplitNetwork(model, cut).front_graph).eval()
    for p in front.parameters():
        p.requires_grad_(False)
    fmt = torch.channels_last if layout == "channels_last" else torch.contiguous_format
    front = front.to(memory_format=fmt)
    x = _images(STEP_BATCH).contiguous(memory_format=fmt)

    def step() -> None:
        xx = x.detach().requires_grad_(True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bfloat16"):
            out = front(xx)
        torch.autograd.grad(out.float().sum(), xx)

    benchmark.pedantic(step, rounds=5, iterations=1, warmup_rounds=1)
    flops = _step_flops(front, x)
    rate = flops / median_seconds_of(benchmark) / 1e9
    name = f"step/{cut}/{precision}-{layout}"
    record(name, benchmark)
    benchmark.extra_info.update(cut=cut, batch=STEP_BATCH, precision=precision, layout=layout,
                                gflop_per_step=round(flops / 1e9, 2), gflops=round(rate, 1))
    if precision in _PEAK:
        benchmark.extra_info["of_peak"] = round(rate / _PEAK[precision], 3)
    share_ratio("over_float32", f"step/{cut}/float32-default", name)


@pytest.mark.parametrize("cut", IRI_CUTS)
@pytest.mark.parametrize("precision", ["float32", "auto", "bfloat16"])
def test_iri_run(benchmark, cut, precision):
    benchmark.group = f"iri-run-{cut}"
    model, seeds = resnet18_cifar(), _images(IRI_SEEDS)
    out = {}

    def run() -> None:
        out["iris"] = generate_iris(model, cut, seeds, steps=IRI_STEPS, tol=1e-2, precision=precision,
                                    batch_size=min(IRI_SEEDS, 128), progress="never")

    with frozen(model):
        benchmark.pedantic(run, rounds=1, iterations=1)
    iris = out["iris"]
    converged = int(iris.converged.sum())
    seconds, name = median_seconds_of(benchmark), f"run/{cut}/{precision}"
    record(name, benchmark)
    benchmark.extra_info.update(
        cut=cut, seeds=IRI_SEEDS, steps=IRI_STEPS, ran=iris.settings["precision"],
        rule=iris.settings["precision_rule"], converged_fraction=round(converged / len(iris), 3),
        median_error=round(float(iris.rel_error.median()), 5),
        s_per_converged=round(seconds / converged, 3) if converged else None,
        s_per_sample_step=round(seconds / max(int(iris.steps.sum()), 1), 4))
    for other in ("auto", "bfloat16"):
        share_ratio(f"float32_over_{other}", f"run/{cut}/float32", f"run/{cut}/{other}")
        _share_per_converged(cut, other)


def _share_per_converged(cut: str, other: str) -> None:
    """``per_converged_float32_over_<other>`` on both runs of ``cut`` once both ran and both converged some."""
    runs = [RUNS.get(f"run/{cut}/{p}") for p in ("float32", other)]
    if None in runs or None in [r.extra_info.get("s_per_converged") for r in runs]:
        return
    ratio = runs[0].extra_info["s_per_converged"] / runs[1].extra_info["s_per_converged"]
    for r in runs:
        r.extra_info[f"per_converged_float32_over_{other}"] = round(ratio, 3)
