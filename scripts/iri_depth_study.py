"""IRIs at deep layers of standard architectures: our optimiser vs the best plain loop, in one run.

Run from the repository root (a few minutes per case at 16 seeds on an idle 2-core CPU):

    python scripts/iri_depth_study.py --seeds 16 \\
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
    "lbfgs": dict(optimizer="lbfgs"),                    # history 30, fake ReLU, relu_leak 0.1
    "lbfgs_leak0": dict(optimizer="lbfgs", relu_leak=0.0),   # the previous round's L-BFGS (true gradients
                                                             # below the last ReLU)
    "lbfgs_leak03": dict(optimizer="lbfgs", relu_leak=0.03),
    "lbfgs_leak03x": dict(optimizer="lbfgs", relu_leak=0.3),
    "adam_leak": dict(optimizer="adam", relu_leak=0.1),
    "adam_exp": dict(optimizer="adam", schedule="exp", lr_floor=0.01, lr=0.1),
    "lbfgs_fake_relu": dict(fake_relu=True),
    "lbfgs_stall20": dict(stall_patience=20),
    "lbfgs_h20": dict(history=20),
    "lbfgs_h50": dict(history=50),
    "lbfgs_h10_true_relu": dict(history=10, fake_relu=False),
    "lbfgs_h50_fake_relu": dict(history=50, fake_relu=True),
    "lbfgs_h100_fake_relu": dict(history=100, fake_relu=True),
    "lbfgs_stall50_to_adam": dict(stall_patience=50, phase_steps=1000),
    "lbfgs_stall20_plr05": dict(stall_patience=20, phase_lr=0.5),
    "lbfgs_warmup100": dict(warmup_steps=100),
    "adam": dict(optimizer="adam"),                      # the previous default
    "adam_c100": dict(optimizer="adam", cycle_steps=100),
}


def variant_options(name: str) -> dict[str, Any]:
    """Options of a variant: a name in ``VARIANTS``, or inline ``key=value`` pairs joined by ``+``
    (``optimizer=adam+lr=0.02+cycle_steps=300``; values parsed as Python literals, else kept as strings)."""
    if "=" not in name:
        return VARIANTS[name]
    import ast

    options: dict[str, Any] = {}
    for pair in name.split("+"):
        key, _, value = pair.partition("=")
        try:
            options[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            options[key] = value
    return options


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

    from similarity_plugins.core.networks import SplitNetwork, frozen

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
