"""GPU check for the IRI optimiser: a standalone script (not collected by pytest).

    python lab/gpu_iri.py --out DIR

Measures, on one CUDA GPU, and prints + writes ``DIR/gpu_iri.json``:
1. update-step time, CuPy fused kernel vs the torch reference, Adam, on 512 x 3 x 224 x 224
   inputs (``--update-shape`` to change), median of ``--repeats`` timed calls after warm-up;
2. IRIs per second for torchvision ResNet-18 (random weights, 10 classes) at ``layer3`` and ``layer4``,
   on 32x32 inputs (512 seeds, 1,000-step budget, tol 1e-2, batch 512), eager and with ``compile=True``
   (its warm-up ``compile_s`` and the rate after it), and on 224x224 inputs (64 seeds, 200-step budget,
   batch 64); each with its error summary and the optimiser's overhead share;
3. ``pytest tests/iri/test_gpu.py`` (exit code and tail of its output).

Fails loudly (exit 2) when CUDA is missing. Without CuPy the CuPy figures are recorded as errors and the
rest still runs. Sized to finish in well under 5 minutes on one H200. ``--device cpu --small`` runs the
same code paths on a CPU with tiny sizes (used by the CPU test suite to keep this script working).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from typing import Any, Callable

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from similarity_plugins.iri import generate_iris  # noqa: E402
from similarity_plugins.iri.backends import Backend, cupy_backend, numpy_backend, torch_backend  # noqa: E402
from similarity_plugins.iri.kernels import update_kernel  # noqa: E402


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_update_step(backend: Backend, optimizer: str, shape: tuple[int, ...], device: torch.device,
                     repeats: int = 20) -> dict[str, Any]:
    """Median seconds of one in-place update over a (B, D) state, D = prod(shape[1:])."""
    b, d = shape[0], int(np.prod(shape[1:]))
    gen = torch.Generator(device=device).manual_seed(0)
    x = torch.rand(b, d, device=device, generator=gen)
    g = torch.randn(b, d, device=device, generator=gen)
    best = x.clone()
    m, v = torch.zeros_like(x), torch.zeros_like(x)
    kernel = update_kernel(backend, (0.9, 0.999, 1e-8))
    col = lambda a: backend.column(np.asarray(a, dtype=np.float32), device)  # noqa: E731
    imp = col(np.arange(b) % 2 == 0)
    lr = col(np.full(b, 0.01))
    bc1, bc2 = col(np.full(b, 0.1)), col(np.full(b, 0.001))

    def once() -> None:
        with backend.stream(device):
            xs, gs, bs = backend.view(x), backend.view(g), backend.view(best)
            kernel(xs, gs, backend.view(m), backend.view(v), bs, imp, lr, bc1, bc2)

    for _ in range(3):
        once()
    _sync(device)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        once()
        _sync(device)
        times.append(time.perf_counter() - t0)
    gbytes = 5 * x.numel() * 4 * 2 / 1e9  # rough read+write traffic
    med = float(np.median(times))
    return {"backend": backend.name, "optimizer": optimizer, "shape": list(shape), "median_s": med,
            "min_s": float(np.min(times)), "approx_GBps": gbytes / med}


def iris_per_second(layer: str, size: int, seeds: int, steps: int, batch: int, device: torch.device,
                    backend: str = "auto", optimizer: str = "auto", compile: bool = False) -> dict[str, Any]:
    """Generate IRIs for random-weight ResNet-18 at ``layer`` on ``size`` x ``size`` inputs; report rate and quality."""
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10).to(device).eval()
    x = torch.rand(seeds, 3, size, size, generator=torch.Generator().manual_seed(1))
    x = (0.5 + (x - 0.5) * 0.8).to(device)
    _sync(device)
    t0 = time.perf_counter()
    iris = generate_iris(model, layer, x, steps=steps, tol=1e-2, batch_size=batch, backend=backend,
                         optimizer=optimizer, progress="never", profile=True, compile=compile)
    _sync(device)
    wall = time.perf_counter() - t0
    s, st = iris.summary, iris.stats
    return {"layer": layer, "optimizer": iris.settings["optimizer"], "input": f"3x{size}x{size}",
            "weights": "random", "seeds": seeds, "steps": steps,
            "batch": batch, "backend": st["backend"], "compile": compile, "compile_s": st["compile_s"],
            "compiled_graphs": st["compiled_graphs"], "wall_s": wall, "iris_per_s": seeds / wall,
            # the evaluations that compiled (a few batch steps) are left out of the time, not of the IRIs
            "iris_per_s_after_warm_up": seeds / max(wall - st["compile_s"], 1e-9),
            "median_error": s["median_error"], "p95_error": s["p95_error"],
            "converged_fraction": s["converged_fraction"], "mean_seed_distance": s["mean_seed_distance"],
            "mean_steps": s["mean_steps"], "front_s": st["front_s"], "update_s": st["update_s"],
            "overhead_share": (st["wall_s"] - st["front_s"] - st["target_s"]) / st["wall_s"]}


def _guard(name: str, fn: Callable[[], Any], report: dict[str, Any]) -> None:
    t0 = time.perf_counter()
    try:
        report[name] = fn()
    except Exception as exc:  # noqa: BLE001 - record and go on; the JSON says what failed
        report[name] = {"error": f"{type(exc).__name__}: {exc}"}
    print(f"[{time.perf_counter() - t0:6.1f}s] {name}: {json.dumps(report[name], default=str)[:600]}", flush=True)


def _update_steps(report: dict[str, Any], args: argparse.Namespace, device: torch.device) -> None:
    """Part 1: the update step, torch vs CuPy (GPU) or NumPy (CPU dry run), Adam, into ``report``."""
    shape = (8, 3, 16, 16) if args.small else tuple(int(s) for s in args.update_shape.split(","))
    repeats = 3 if args.small else args.repeats
    fast = numpy_backend() if device.type == "cpu" else None
    for opt in ("adam",):
        _guard(f"update_{opt}_torch", lambda: time_update_step(torch_backend(), opt, shape, device, repeats), report)
        if device.type == "cuda":
            _guard(f"update_{opt}_cupy", lambda: time_update_step(cupy_backend(), opt, shape, device, repeats), report)
        else:
            _guard(f"update_{opt}_numpy", lambda: time_update_step(fast, opt, shape, device, repeats), report)
        a, b = report.get(f"update_{opt}_torch", {}), report.get(f"update_{opt}_cupy", {})
        if "median_s" in a and "median_s" in b:
            report[f"update_{opt}_speedup_cupy_vs_torch"] = a["median_s"] / b["median_s"]


def _iri_rates(report: dict[str, Any], small: bool, device: torch.device) -> None:
    """Part 2: IRIs per second at ResNet-18 cuts, eager and compiled (see the module docstring), into ``report``."""
    runs = [("layer3", 32, 512, 1000, 512, "auto", False), ("layer4", 32, 512, 1000, 512, "auto", False),
            ("layer3", 32, 512, 1000, 512, "auto", True), ("layer4", 32, 512, 1000, 512, "auto", True),
            ("layer4", 32, 512, 1000, 512, "adam", False), ("layer4", 224, 64, 200, 64, "auto", False)]
    if small:
        runs = [("layer3", 16, 3, 2, 2, "auto", False), ("layer4", 16, 2, 2, 2, "adam", False)]
    for layer, size, n, steps, batch, opt, comp in runs:
        name = f"iris_{layer}_{size}_{opt}" + ("_compiled" if comp else "")
        _guard(name, lambda: iris_per_second(layer, size, n, steps, batch, device, optimizer=opt, compile=comp),
               report)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="folder for gpu_iri.json")
    ap.add_argument("--device", default="cuda", help="cuda (default) or cpu (with --small, for a dry run)")
    ap.add_argument("--small", action="store_true", help="tiny sizes (a smoke test of the script itself)")
    ap.add_argument("--update-shape", default="512,3,224,224")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--skip-tests", action="store_true")
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("ERROR: CUDA is not available: this script measures the GPU path and needs a CUDA device "
              "(for a CPU dry run: --device cpu --small)", file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    report: dict[str, Any] = {
        "torch": torch.__version__, "python": platform.python_version(), "device": str(device),
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor(),
    }
    try:
        import cupy  # type: ignore[import-not-found]

        report["cupy"] = cupy.__version__
    except Exception as exc:  # noqa: BLE001
        report["cupy"] = f"unavailable: {type(exc).__name__}: {exc}"

    _update_steps(report, args, device)
    _iri_rates(report, args.small, device)

    if not args.skip_tests:
        def tests() -> dict[str, Any]:
            proc = subprocess.run([sys.executable, "-m", "pytest", os.path.join(ROOT, "tests", "iri", "test_gpu.py"),
                                   "-q", "-rs"], cwd=ROOT, capture_output=True, text=True, timeout=240)
            return {"returncode": proc.returncode, "tail": (proc.stdout + proc.stderr)[-3000:]}

        _guard("tests_gpu", tests, report)

    path = os.path.join(args.out, "gpu_iri.json")
    with open(path, "w") as f:
        json.dump(report, f, indent=2, default=str)
    print(f"wrote {path}")
    failed = [k for k, v in report.items() if isinstance(v, dict) and "error" in v]
    if isinstance(report.get("tests_gpu"), dict) and report["tests_gpu"].get("returncode") not in (0, None):
        failed.append("tests_gpu")
    if failed:
        print(f"FAILED parts: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
