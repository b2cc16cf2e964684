"""Sweep the point where a sample leaves bfloat16 (precision.SWITCH_TOL_FACTOR / SWITCH_FLOOR_FACTOR) at one cut.

Run from the repository root: ``python lab/iri_switch_sweep.py SEEDS STEPS CUT`` (e.g. 16 1000
layer3.1). Float32 runs first and last, to see the drift of the machine.
"""

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))

from bench_iri_precision import _images, resnet18_cifar  # noqa: E402

from similarity_plugins.iri import generate_iris  # noqa: E402
from similarity_plugins.iri import precision as P  # noqa: E402
from similarity_plugins.networks.model_state import frozen  # noqa: E402

seeds_n, steps, cut = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
model, seeds = resnet18_cifar(), _images(seeds_n)
cases = [("float32", None, None)] + [("bfloat16", f, fl) for f, fl in [(2, 2), (4, 2), (8, 2), (16, 4)]]
cases.append(("float32", None, None))
with frozen(model):
    for prec, factor, floor in cases:
        if factor:
            P.SWITCH_TOL_FACTOR, P.SWITCH_FLOOR_FACTOR = float(factor), float(floor)
        start = time.perf_counter()
        iris = generate_iris(model, cut, seeds, steps=steps, tol=1e-2, precision=prec,
                             batch_size=min(seeds_n, 128), progress="never")
        seconds = time.perf_counter() - start
        converged, sample_steps = int(iris.converged.sum()), int(iris.steps.sum())
        print(f"{prec:8s} tol x{factor} floor x{floor}: {seconds:6.1f} s, {converged}/{len(iris)} converged, "
              f"median error {float(iris.rel_error.median()):.5f}, {sample_steps} sample steps, "
              f"{seconds / max(converged, 1):.3f} s per converged, {seconds / max(sample_steps, 1):.4f} s per step",
              flush=True)
