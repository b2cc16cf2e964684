"""IRIs at deep layers of standard architectures: our optimiser vs the best plain loop, in one run.

Run from the repository root (2 CPU threads; a few minutes per case at 16 seeds):

    python scripts/iri_depth_study.py --cases rn3,rn4,vgg33,vgg43 --seeds 16
    python scripts/iri_depth_study.py --cases small3 --variants default,adam

Donors (nothing is downloaded): torchvision ``resnet18(num_classes=10)`` and ``vgg16_bn(num_classes=10)``
trained ``--epochs`` (2) epochs of Adam (lr 1e-3, batch 64) on scikit-learn digits (grey replicated to 3
channels, upsampled to 32x32), cached under ``--donor-dir``. Cases: ``rn1``..``rn4`` ResNet-18 ``layerN``;
``vggN`` VGG-16-BN ``features.N`` (33 and 43 are the 4th and 5th max-pools); ``small3`` the library's
SmallCNN at block3; ``demoN`` the demo's donor A at blockN.

The plain loop: one batch, ``torch.optim.Adam`` on the whole batch, cosine over the budget, box projection,
true ReLU gradients, no per-sample stop, lr in ``--plain-lrs`` (best one reported). Work is counted in
sample-steps (one sample's forward+backward). Each line: steps per sample until the median error over all
seeds is <= 1e-2 (``inf``: never within the budget), final median / p95, converged fraction, mean RMS
distance from the seeds, wall seconds; for ours also the work and wall ratios against the best plain lr.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from typing import Any

import numpy as np
import torch
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))

VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "lbfgs_true_relu": dict(fake_relu=False),
    "lbfgs_h20": dict(history=20),
    "lbfgs_h5": dict(history=5),
    "adam": dict(optimizer="adam"),                      # the previous default
    "adam_c100": dict(optimizer="adam", iri_cycle_steps=100),
}


def digits_rgb32() -> tuple[torch.Tensor, torch.Tensor]:
    """scikit-learn digits as (1797, 3, 32, 32) in [0, 1] and labels."""
    from similarity_plugins.core.data import load_all
    from similarity_plugins.datasets import digits

    x, y = load_all(digits(None, size=32))
    return x.repeat(1, 3, 1, 1).contiguous(), y


def donor(arch: str, epochs: int, folder: str) -> nn.Module:
    """torchvision ``arch`` (10 classes) trained ``epochs`` epochs on 3x32x32 digits; cached in ``folder``."""
    import torchvision

    torch.manual_seed(0)
    model = getattr(torchvision.models, arch)(num_classes=10)
    path = os.path.join(folder, f"{arch}_digits_e{epochs}.pt")
    if os.path.exists(path):
        model.load_state_dict(torch.load(path))
        return model.eval()
    x, y = digits_rgb32()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(0)
    model.train()
    for _ in range(epochs):
        for idx in torch.randperm(len(x), generator=g).split(64):
            opt.zero_grad()
            nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        acc = float((model(x[:512]).argmax(1) == y[:512]).float().mean())
    print(f"# trained {arch} {epochs} epoch(s): train accuracy {acc:.3f}", flush=True)
    os.makedirs(folder, exist_ok=True)
    torch.save(model.state_dict(), path)
    return model


def case(name: str, n: int, epochs: int, folder: str) -> tuple[nn.Module, str, torch.Tensor]:
    """(model, layer, seeds (n, C, 32, 32) in [0, 1]) for a case name."""
    if name.startswith("rn"):
        return donor("resnet18", epochs, folder), f"layer{name[2:]}", digits_rgb32()[0][-n:].clone()
    if name.startswith("vgg"):
        return donor("vgg16_bn", epochs, folder), f"features.{name[3:]}", digits_rgb32()[0][-n:].clone()
    import iri_schedule_grid

    return iri_schedule_grid._case(name, n)


def plain_loop(front, seeds: torch.Tensor, steps: int, lr: float) -> dict[str, Any]:
    """The plain loop; returns work per sample to median 1e-2, final figures and wall time."""
    from similarity_plugins.iri.optimizer import initial_inputs, make_settings

    start = time.perf_counter()
    settings = make_settings(steps=steps, tol=1e-2, optimizer="adam", lr=lr, init="noise", seed=0)
    with torch.no_grad():
        target = front(seeds).flatten(1)
    tnorm = target.norm(dim=1)
    x = initial_inputs(seeds, range(len(seeds)), settings, None).requires_grad_(True)
    opt = torch.optim.Adam([x], lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
    reach, reach_t = math.inf, math.inf
    for step in range(steps + 1):
        err = (front(x).flatten(1) - target).norm(dim=1) / tnorm
        if math.isinf(reach) and float(err.detach().median()) <= 1e-2:
            reach, reach_t = step + 1, time.perf_counter() - start
        if step == steps:
            break
        opt.zero_grad()
        err.sum().backward()
        opt.step()
        sched.step()
        with torch.no_grad():
            x.clamp_(0.0, 1.0)
    e = err.detach().double()
    dist = (x.detach() - seeds).flatten(1).pow(2).mean(1).sqrt()
    return {"reach": reach, "reach_s": reach_t, "median": float(e.median()), "p95": float(e.quantile(0.95)),
            "converged": float((e <= 1e-2).double().mean()), "dist": float(dist.mean()),
            "total_s": time.perf_counter() - start, "total": steps + 1}


def ours(model: nn.Module, layer: str, seeds: torch.Tensor, steps: int, options: dict) -> dict[str, Any]:
    """``generate_iris`` with ``options``; the same figures as :func:`plain_loop`."""
    from similarity_plugins.iri import generate_iris

    options = {k.removeprefix("iri_"): v for k, v in options.items()}
    curve: list[tuple[int, float, float]] = []
    start = time.perf_counter()
    iris = generate_iris(model, layer, seeds, steps=steps, tol=1e-2, batch_size=len(seeds), progress=False,
                         callback=lambda i: curve.append((i["sample_steps"], i["median_error"], i["elapsed_s"])),
                         **options)
    hit = next(((w, t) for w, m, t in curve if m <= 1e-2), (math.inf, math.inf))
    s = iris.summary
    return {"reach": hit[0] / len(seeds), "reach_s": hit[1], "median": s["median_error"], "p95": s["p95_error"],
            "converged": s["converged_fraction"], "dist": s["mean_seed_distance"], "total_s": time.perf_counter() - start,
            "total": iris.stats["sample_steps"] / len(seeds), "rejected": iris.stats.get("rejected_trials", 0),
            "restarts": iris.stats.get("restarts", 0)}


def line(label: str, r: dict[str, Any], extra: str = "") -> str:
    """One printed line of figures."""
    return (f"{label:28s} to median 1e-2: {r['reach']:6.0f} steps/sample {r['reach_s']:7.1f} s | total {r['total']:6.0f}"
            f" | median {r['median']:.4f} p95 {r['p95']:.4f} conv {r['converged']:.2f} | seed dist {r['dist']:.3f}"
            f" | {r['total_s']:.0f} s {extra}")


def main(argv: list[str] | None = None) -> None:
    """Parse the options and print the study's lines."""
    from similarity_plugins.core.networks import SplitNetwork, frozen

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", default="rn3,rn4,vgg33,vgg43")
    p.add_argument("--variants", default="default")
    p.add_argument("--seeds", type=int, default=16)
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--plain-lrs", default="0.05,0.1,0.2")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--donor-dir", default=os.path.join(os.path.expanduser("~"), ".cache", "iri_depth_donors"))
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    for name in args.cases.split(","):
        model, layer, seeds = case(name, args.seeds, args.epochs, args.donor_dir)
        split = SplitNetwork(model, layer)
        print(f"# {name}: {layer}, {len(seeds)} seeds, budget {args.steps}", flush=True)
        plain = {}
        for lr in [float(v) for v in args.plain_lrs.split(",") if v]:
            with frozen(model):
                plain[lr] = plain_loop(split.front, seeds, args.steps, lr)
            print(line(f"{name} plain lr {lr}", plain[lr]), flush=True)
        best = min(plain.values(), key=lambda r: (r["reach"], r["median"])) if plain else None
        for variant in args.variants.split(","):
            r = ours(model, layer, seeds, args.steps, VARIANTS[variant])
            extra = f"| rejected {r['rejected']} restarts {r['restarts']}"
            if best is not None:
                ref_work = best["reach"] if math.isfinite(best["reach"]) else best["total"]
                ref_s = best["reach_s"] if math.isfinite(best["reach_s"]) else best["total_s"]
                extra += f" | work ratio {ref_work / r['reach']:.2f} wall ratio {ref_s / r['reach_s']:.2f}"
            print(line(f"{name} {variant}", r, extra), flush=True)


if __name__ == "__main__":
    main()
