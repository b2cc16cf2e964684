"""``compile=True`` against the eager front: warm-up, time per batch step after it, and the IRIs' figures.

    python lab/iri_compile_check.py --cases resnet18:layer3,resnet18:layer4 --seeds 16 [--device cuda]

Uses the benchmark donors (``benchmarks/bench_iri.py``: torchvision models trained 2 epochs on 3x32x32
digits, cached). For each case: one eager run, then one ``compile=True`` run, each with ``generate_iris``'s
defaults; prints wall time, the compiled run's warm-up (``stats["compile_s"]``: the evaluations during which
TorchDynamo compiled a graph; ``compiled_graphs``), wall time after it per forward+backward sample-step,
batch steps, median error and converged fraction. Set ``TORCHINDUCTOR_CACHE_DIR`` to an empty folder to
measure a cold compile.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))


def main(argv: list[str] | None = None) -> None:
    """Run the cases and print one JSON line per run."""
    import bench_iri as bench

    from similarity_plugins.iri import generate_iris

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", default="resnet18:layer3,resnet18:layer4")
    p.add_argument("--seeds", type=int, default=16)
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    for spec in args.cases.split(","):
        arch, layer = spec.split(":")
        model, seeds = bench.case_inputs(arch, args.seeds)
        model, seeds = model.to(args.device), seeds.to(args.device)
        for compiled in (False, True):
            t0 = time.perf_counter()
            iris = generate_iris(model, layer, seeds, progress="never", compile=compiled)
            wall = time.perf_counter() - t0
            st, s = iris.stats, iris.summary
            row = {"case": spec, "compile": compiled, "wall_s": round(wall, 2), "compile_s": round(st["compile_s"], 2),
                   "compiled_graphs": st["compiled_graphs"], "after_warm_up_s": round(wall - st["compile_s"], 2),
                   "batch_steps": st["batch_steps"],
                   "sample_steps": st["sample_steps"],
                   "ms_per_sample_step_after_warm_up": round(1e3 * (wall - st["compile_s"]) / st["sample_steps"], 3),
                   "median_error": round(s["median_error"], 5), "converged": s["converged_fraction"],
                   "optimizer": iris.settings["optimizer"]}
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
