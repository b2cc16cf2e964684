"""Steps per sample until the median IRI error reaches 1e-2, for several step-size schedules.

This is the study behind the IRI optimiser's default (per-sample cosine cycles of 300 then 600 steps) and
the demo's ``iri_cycle_steps=100``. Run from the repository root, with nothing else using the CPU:

    python lab/iri_schedule_grid.py --cases small3,rn3,rn4,demo2,demo3,demo4 --seeds 32

Cases: ``small3`` SmallCNN width 32 at block3 (the benchmark's model), ``rn3``/``rn4`` ResNet-18 at
layer3/layer4 on 3x32x32 digits (the benchmark's model), ``demoN`` the demo's clean donor A (SmallCNN width
16, PGD-trained) at blockN on its marked training digits. Each line: work per sample until the median
error over all seeds is <= 1e-2 (``inf``: never within the 1,000-step budget), total work per sample,
final median / 95th percentile error and converged fraction.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

# the benchmark models (bench_iri.small_cnn_digits, resnet18_digits) live in benchmarks/
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))

ADAM = {"preset": "adam"}   # plain Adam at every case, so that only the schedule differs
VARIANTS = {
    "one_cycle": dict(cycle_steps=0, tuning=ADAM),
    "cycles100": dict(cycle_steps=100, tuning=ADAM),
    "cycles100_decay0.5": dict(cycle_steps=100, tuning={**ADAM, "cycle_decay": 0.5}),
    "cycles300": dict(cycle_steps=300, tuning=ADAM),          # the adam preset
    "cycles100_mult3": dict(cycle_steps=100, tuning={**ADAM, "cycle_mult": 3.0}),
}


def _case(name: str, n: int):
    """(model, layer, seeds (n, C, 32, 32) in [0, 1]) for a case name."""
    import bench_iri as bench

    from similarity_plugins.datasets import digits
    from similarity_plugins.networks.data import load_all

    if name == "small3":
        return bench.small_cnn_digits(), "block3", load_all(digits("train"))[0][:n].contiguous()
    if name in ("rn3", "rn4"):
        return bench.resnet18_digits(), f"layer{name[-1]}", bench._digits_rgb32()[0][:n].clone()
    if name.startswith("demo"):
        from similarity_plugins.apps.studies.common import DonorPool
        from similarity_plugins.apps.studies.shortcut import DemoConfig, donor_spec
        from similarity_plugins.datasets import PixelShortcut, RandomMark, digits_data

        clean = digits_data(size=32, seed=0)
        shortcut_train = PixelShortcut(clean.train, swap_fraction=DemoConfig().swap_fraction, seed=0)
        model = DonorPool().get("marked-at-random", RandomMark(shortcut_train, seed=6), donor_spec(DemoConfig()), 0)
        return model, f"block{name[-1]}", load_all(PixelShortcut(clean.train, seed=3))[0][:n].contiguous()
    raise SystemExit(f"unknown case {name!r}; use small3, rn3, rn4, demo1..demo4")


def timed_curve(model, layer: str, seeds, steps: int, **options) -> tuple:
    """``generate_iris`` on all ``seeds`` in one batch: (the IRISet, sample-steps per sample until the median error
    is <= 1e-2 (inf: never), total sample-steps per sample, wall seconds)."""
    from similarity_plugins.iri import generate_iris

    curve: list[tuple[int, float]] = []
    start = time.perf_counter()
    iris = generate_iris(model, layer, seeds, steps=steps, batch_size=len(seeds), progress="never",
                         callback=lambda i: curve.append((i["sample_steps"], i["median_error"])), **options)
    reach = next((w for w, m in curve if m <= 1e-2), math.inf) / len(seeds)
    return iris, reach, curve[-1][0] / len(seeds), time.perf_counter() - start


def summary_line(iris, seconds: float) -> str:
    """The final median and 95th percentile error, the converged fraction and the wall seconds of a run."""
    s = iris.summary
    return (f"median {s['median_error']:.4f}  p95 {s['p95_error']:.4f}  converged {s['converged_fraction']:.2f}  "
            f"{seconds:.0f} s")


def main(argv: list[str] | None = None) -> None:
    """Run the grid and print one line per (case, variant)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="small3,rn4")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--seeds", type=int, default=32)
    parser.add_argument("--steps", type=int, default=1000)
    args = parser.parse_args(argv)
    for case in args.cases.split(","):
        model, layer, seeds = _case(case, args.seeds)
        for name in args.variants.split(","):
            iris, reach, total, seconds = timed_curve(model, layer, seeds, args.steps, tol=1e-2, **VARIANTS[name])
            print(f"{case:6s} {name:20s} steps/sample to median 1e-2: {reach:6.0f}  total: {total:6.0f}  "
                  + summary_line(iris, seconds), flush=True)


if __name__ == "__main__":
    main()
