"""Sweep the point where a sample leaves bfloat16 (precision.SWITCH_TOL_FACTOR / SWITCH_FLOOR_FACTOR) at one cut.

Run from the repository root: python docs/lab/scripts/iri_switch_sweep.py SEEDS STEPS CUT (e.g. 16 1000 layer3.1).
"""
import sys
import time

sys.path.insert(0, "benchmarks")
from bench_iri_precision import _images, resnet18_cifar

from similarity_plugins.iri import generate_iris
from similarity_plugins.iri import precision as P
from similarity_plugins.networks.split import frozen

seeds_n, steps, cut = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
model, seeds = resnet18_cifar(), _images(seeds_n)
cases = [("float32", None, None)] + [("auto", f, fl) for f, fl in [(2, 2), (4, 2), (8, 2), (16, 4)]] + [("float32", None, None)]
with frozen(model):
    for prec, f, fl in cases:
        if f: P.SWITCH_TOL_FACTOR, P.SWITCH_FLOOR_FACTOR = float(f), float(fl)
        t = time.perf_counter()
        iris = generate_iris(model, cut, seeds, steps=steps, tol=1e-2, precision=prec, batch_size=min(seeds_n,128), progress=False)
        dt = time.perf_counter() - t
        c = int(iris.converged.sum()); st = int(iris.steps.sum())
        extra = {k: iris.settings.get(k) for k in ("lowp_sample_steps", "lowp_switched") if k in iris.settings}
        print(f"{prec:8s} tolx={f} floorx={fl}: {dt:6.1f} s conv {c}/{len(iris)} median_err {float(iris.rel_error.median()):.5f} "
              f"sample_steps {st} s/conv {dt/max(c,1):.3f} s/step {dt/max(st,1):.4f} {extra}", flush=True)
