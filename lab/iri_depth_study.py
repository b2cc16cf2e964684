"""IRIs at deep layers of standard architectures: our optimiser vs the best plain loop, in one run.

Run from the repository root (a few minutes per case at 16 seeds on an idle 2-core CPU):

    python lab/iri_depth_study.py --seeds 16 \\
        --cases resnet18:layer3,resnet18:layer4,vgg16_bn:features.33,vgg16_bn:features.43,small_cnn:block3

The donors, seeds, plain loop and figures are those of ``benchmarks/bench_iri.py`` (torchvision ResNet-18 /
VGG-16-BN trained 2 epochs on 3x32x32 digits, cached; SmallCNN at block3). Per case: the plain loop at lr
0.05, 0.1 and 0.2 (stopped once its median reaches 1e-2: the trajectory up to there is unchanged), then
each variant of ours; work in sample-steps (one sample's forward+backward), seconds measured in this same
process. ``--variants`` picks from ``VARIANTS`` (``default`` = ``generate_iris``'s defaults) or gives options
inline (``optimizer=adam+lr=0.02+cycle_steps=300``). ``IRI_BENCH_DATA=patches`` (and the other ``IRI_BENCH_*``
variables of the benchmark) switch the donors and seeds to natural-image patches.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from typing import Any

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))

VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},                                       # generate_iris's defaults (optimizer="auto")
    "lbfgs": dict(optimizer="lbfgs"),                    # the lbfgs preset: history 30, leaky gradients 0.1
    "lbfgs_leak0": dict(optimizer="lbfgs", tuning={"relu_leak": 0.0}),   # true gradients below the last ReLU
    "lbfgs_h20": dict(optimizer="lbfgs", tuning={"history": 20}),
    "lbfgs_h50": dict(optimizer="lbfgs", tuning={"history": 50}),
    "adam": dict(tuning={"preset": "adam"}),             # plain Adam: lr 0.2, cycles of 300, 600, ...
    "adam_c100": dict(cycle_steps=100, tuning={"preset": "adam"}),
}
METHOD = ("optimizer", "cycle_steps", "init")   # generate_iris's own keywords; every other key is a tuning value


def variant_options(name: str) -> dict[str, Any]:
    """Keywords of ``generate_iris`` for a variant: a name in ``VARIANTS``, or inline ``key=value`` pairs joined
    by ``+`` (``optimizer=adam+lr=0.02+cycle_steps=300``; values parsed as Python literals, else kept as
    strings), where ``optimizer``, ``cycle_steps`` and ``init`` are keywords and every other key (``preset``,
    ``lr``, ``beta1``, ...) goes into ``tuning``."""
    if "=" not in name:
        return VARIANTS[name]
    import ast

    options: dict[str, Any] = {}
    tuning: dict[str, Any] = {}
    for pair in name.split("+"):
        key, _, value = pair.partition("=")
        try:
            parsed = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            parsed = value
        (options if key in METHOD else tuning)[key] = parsed
    return {**options, "tuning": tuning} if tuning else options


def fmt(label: str, r: dict[str, Any]) -> str:
    """One printed line of figures."""
    return (f"{label:34s} to median 1e-2: {r['steps_to_1e-2']:6.0f} steps/sample {r['seconds_to_1e-2']:7.1f} s | "
            f"median {r['median']:.4f} p95 {r['p95']:.4f} conv {r['converged']:.2f} | seed dist "
            f"{r['seed_distance']:.3f} | total {r['total_steps']:.0f} steps/sample {r['total_s']:.0f} s")


def _stored_plain(path: str, spec: str, seeds: int, steps: int) -> dict[str, Any] | None:
    """The plain-loop record for ``spec`` in an earlier ``--json`` file, or None."""
    if not os.path.exists(path):
        return None
    with open(path) as fh:
        for line in fh:
            rec = json.loads(line)
            if rec["case"] == spec and rec["seeds"] == seeds and rec["budget"] == steps and "plain" in rec:
                plain = rec["plain"]
                for key in ("steps_to_1e-2", "seconds_to_1e-2"):
                    plain[key] = math.inf if plain[key] is None else plain[key]
                return plain
    return None


def main(argv: list[str] | None = None) -> None:
    """Parse the options, run the cases, print one line per run and optionally write JSON."""
    import bench_iri as bench

    from similarity_plugins.networks.model_state import frozen
    from similarity_plugins.networks.split import SplitNetwork

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", default="resnet18:layer4,vgg16_bn:features.43")
    p.add_argument("--variants", default="default")
    p.add_argument("--seeds", type=int, default=16)
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--plain-lrs", default="0.05,0.1,0.2", help="empty: skip the plain loop")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--size", type=int, default=0,
                   help="resize the seeds to SIZE x SIZE (bilinear; the donors stay trained at 32x32; 0: as they are)")
    p.add_argument("--json", default=None, help="append one JSON line per case to this file")
    p.add_argument("--plain-from", default=None, help="reuse the plain loops of an earlier --json file (same seeds)")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    for spec in args.cases.split(","):
        arch, layer = spec.split(":")
        if arch == "demo":   # the demo's donor A (SmallCNN width 16, PGD-trained), as in iri_schedule_grid.py
            import iri_schedule_grid

            model, layer, seeds = iri_schedule_grid._case(f"demo{layer[-1]}", args.seeds)
        else:
            model, seeds = bench.case_inputs(arch, args.seeds)
            if args.size:
                seeds = torch.nn.functional.interpolate(seeds, size=(args.size, args.size), mode="bilinear",
                                                        align_corners=False).clamp(0, 1)
        print(f"# {arch} {layer}: {len(seeds)} seeds, budget {args.steps}, {args.threads} thread(s)", flush=True)
        record: dict[str, Any] = {"case": spec, "seeds": len(seeds), "budget": args.steps}
        plain = _stored_plain(args.plain_from, spec, len(seeds), args.steps) if args.plain_from else None
        lrs = [float(v) for v in args.plain_lrs.split(",") if v]
        if plain is not None:
            print(fmt(f"plain lr {plain['lr']} (stored)", plain), flush=True)
            record["plain"], record["plain_stored"] = plain, True
        elif lrs:
            with frozen(model):
                plain = bench.best_plain(SplitNetwork(model, layer).front, seeds, args.steps, lrs, stop_at_tol=True)
            for r in plain["all"]:
                print(fmt(f"plain lr {r['lr']}", r), flush=True)
            record["plain"] = plain
        if plain is None or record.get("plain_stored"):
            with frozen(model):   # the plain loops warm a new donor up; without them, ours would pay its cold start
                bench.warm_up(SplitNetwork(model, layer).front, seeds)
        for name in args.variants.split(","):
            r = bench.ours(model, layer, seeds, args.steps, **variant_options(name))
            line = fmt(name, r)
            if plain is not None:
                q = bench.ratios(plain, r)
                r.update(q)
                line += f" | vs plain lr {plain['lr']} ({'reached' if q['plain_reached'] else 'NEVER reached'}): "
                line += (f"work x{q['work_ratio']:.2f} wall x{q['wall_ratio']:.2f}" if math.isfinite(r["steps_to_1e-2"])
                         else "no ratio (ours never reached 1e-2)")
            record[name] = r
            print(line, flush=True)
        if args.json:
            with open(args.json, "a") as fh:
                fh.write(json.dumps(record, default=lambda v: None if isinstance(v, float) and math.isinf(v) else v)
                         + "\n")


if __name__ == "__main__":
    main()
