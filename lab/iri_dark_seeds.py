"""Why dark seeds converge slowly: the same IRI run from noise starts of other brightness (a study, not an option).

    IRI_BENCH_DATA=patches python lab/iri_dark_seeds.py --case resnet18:layer3 --seeds 64 --centres 0.5,0.25,seed

``generate_iris`` starts every sample from ``0.5 + randn/20`` (the paper's start). This script runs the defaults
once per start centre: ``0.5`` is that start; a number ``c`` shifts the same noise to ``c + randn/20``;
``seed`` shifts it to the seed's own mean brightness. ``--noise D`` scales the noise to ``randn/D``;
``--option KEY=VALUE`` passes options to ``generate_iris`` (``relu_leak=0.2``, ``fake_relu=none``, ``seed=1``,
``steps=3000``, ...); ``--indices`` keeps only those seeds (round 7 of docs/iri_depth.md used
``--indices 10,29,38,40,48,0,1,2``: the five unconverged of 64 and three converged). It swaps the start
function of the run module for the duration (a study of the method, not a setting the library offers).
Printed per centre: converged fraction, median / p95 error, mean steps, mean RMS seed distance, every
sample's final error, and for the darkest tenth of the seeds (by mean pixel value) their converged
fraction, mean steps and mean seed distance.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))


def shifted_starts(centre: str, noise: float = 20.0):
    """A replacement for ``run.initial_inputs``: the default noise moved to ``centre`` (a number or "seed")
    and scaled from ``randn/20`` to ``randn/noise``."""
    import similarity_plugins.iri.run as run

    default = run.initial_inputs

    def starts(seeds: torch.Tensor, indices, settings, donors) -> torch.Tensor:
        x = 0.5 + (default(seeds, indices, settings, donors) - 0.5) * (20.0 / noise)
        if centre == "seed":
            c = seeds[torch.as_tensor(np.asarray(indices))].mean(dim=tuple(range(1, seeds.dim())), keepdim=True)
        else:
            c = float(centre)
        return (x - 0.5 + c).clamp(0.0, 1.0)

    return default, starts


def main(argv: list[str] | None = None) -> None:
    """Run the default optimiser from each start centre and print one JSON line each."""
    import bench_iri as bench

    import similarity_plugins.iri.run as run
    from similarity_plugins.iri import generate_iris
    from similarity_plugins.utils.text import parse_assignments

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--case", default="resnet18:layer3")
    p.add_argument("--seeds", type=int, default=64)
    p.add_argument("--centres", default="0.5,0.25,seed")
    p.add_argument("--noise", type=float, default=20.0, help="start noise randn / NOISE (the default start: 20)")
    p.add_argument("--option", action="append", metavar="KEY=VALUE", help="an option of generate_iris")
    p.add_argument("--indices", default=None, help="comma-separated seed indices to keep (default: all)")
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    arch, layer = args.case.split(":")
    model, seeds = bench.case_inputs(arch, args.seeds)
    if args.indices:
        seeds = seeds[[int(i) for i in args.indices.split(",")]]
    options = parse_assignments(args.option or [], what="--option")
    brightness = seeds.mean(dim=(1, 2, 3)).numpy()
    dark = brightness <= np.quantile(brightness, 0.1)
    for centre in args.centres.split(","):
        default, starts = shifted_starts(centre, args.noise)
        run.initial_inputs = starts
        try:
            iris = generate_iris(model, layer, seeds, progress="never", **options)
        finally:
            run.initial_inputs = default
        err, steps, dist = iris.rel_error.numpy(), iris.steps.numpy(), iris.seed_distance.numpy()
        ok = err <= iris.settings["tol"]
        print(json.dumps({
            "case": args.case, "centre": centre, "noise": args.noise, "options": options, "seeds": len(seeds),
            "errors": [round(float(e), 4) for e in err], "converged": float(ok.mean()),
            "median": float(np.median(err)), "p95": float(np.percentile(err, 95)), "mean_steps": float(steps.mean()),
            "seed_distance": float(dist.mean()), "dark_seeds": int(dark.sum()),
            "dark_mean_pixel": float(brightness[dark].mean()), "dark_converged": float(ok[dark].mean()),
            "dark_mean_steps": float(steps[dark].mean()), "dark_seed_distance": float(dist[dark].mean()),
            "iri_mean_pixel_dark": float(iris.inputs[torch.as_tensor(dark)].mean()),
        }), flush=True)


if __name__ == "__main__":
    main()
