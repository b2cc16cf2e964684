"""One short run on a CUDA GPU: the IRI step and an IRI run of ResNet-18 (CIFAR stem) in float32 and bfloat16.

Run on a machine with a GPU: ``python lab/gpu_iri_precision.py --out gpu_precision.json`` (about two
minutes). Prints and writes, per cut: the step time (forward + gradient to the input, batch 128) in float32
(the user's TF32 settings) and under bfloat16 autocast, each in the default and the channels_last layout,
with the GFLOP/s achieved (FLOPs from ``torch.utils.flop_counter``) next to a 8192 x 8192 GEMM's rate in each
precision; then ``generate_iris`` with ``precision="float32"`` and ``"auto"`` (256 seeds, 300 steps, tol 1e-2):
seconds, converged fraction, median error, seconds per converged IRI and their ratio.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from bench_iri_precision import _images, _step_flops, resnet18_cifar  # noqa: E402

from similarity_plugins.iri import generate_iris  # noqa: E402
from similarity_plugins.networks.model_state import frozen  # noqa: E402
from similarity_plugins.networks.split import SplitNetwork  # noqa: E402


def _timed(fn, reps: int = 10) -> float:
    fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t)
    return best


def peak(dtype: torch.dtype, n: int = 8192) -> float:
    """GFLOP/s of an n x n matrix product in ``dtype`` on the GPU."""
    a, b = (torch.randn(n, n, device="cuda", dtype=dtype) for _ in range(2))
    return 2 * n ** 3 / _timed(lambda: a @ b, 5) / 1e9


def step_times(cut: str, batch: int = 128) -> list[dict]:
    """The IRI step of ``cut`` in the four precision/layout modes."""
    rows = []
    base = SplitNetwork(resnet18_cifar(), cut).front_graph
    for precision in ("float32", "bfloat16"):
        for fmt in (torch.contiguous_format, torch.channels_last):
            front = copy.deepcopy(base).cuda().eval().to(memory_format=fmt)
            for p in front.parameters():
                p.requires_grad_(False)
            x = _images(batch).cuda().contiguous(memory_format=fmt)

            def step() -> None:
                xx = x.detach().requires_grad_(True)
                with torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision == "bfloat16"):
                    out = front(xx)
                torch.autograd.grad(out.float().sum(), xx)

            seconds = _timed(step)
            flops = _step_flops(front, x)
            rows.append({"cut": cut, "precision": precision, "layout": str(fmt).split(".")[-1],
                         "ms": round(seconds * 1e3, 2), "gflops": round(flops / seconds / 1e9, 1)})
    return rows


def iri_runs(cut: str, seeds: int = 256, steps: int = 300) -> list[dict]:
    """generate_iris at ``cut`` with precision float32 and auto."""
    model, x = resnet18_cifar().cuda(), _images(seeds).cuda()
    rows = []
    for precision in ("float32", "auto"):
        with frozen(model):
            torch.cuda.synchronize()
            t = time.perf_counter()
            iris = generate_iris(model, cut, x, steps=steps, tol=1e-2, precision=precision, progress="never")
            torch.cuda.synchronize()
            seconds = time.perf_counter() - t
        converged = int(iris.converged.sum())
        rows.append({"cut": cut, "precision": precision, "ran": iris.settings["precision"], "seconds": round(seconds, 2),
                     "converged_fraction": converged / len(iris), "median_error": float(iris.rel_error.median()),
                     "s_per_converged": seconds / converged if converged else None})
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="gpu_precision.json")
    parser.add_argument("--cuts", default="layer2.1,layer3.1,layer4.0")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to measure")
        return 0
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "peak_gflops": {"float32": round(peak(torch.float32), 1), "bfloat16": round(peak(torch.bfloat16), 1)},
              "steps": [], "runs": []}
    for cut in args.cuts.split(","):
        result["steps"] += step_times(cut)
        result["runs"] += iri_runs(cut)
    print(json.dumps(result, indent=1))
    Path(args.out).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
