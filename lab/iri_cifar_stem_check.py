"""ResNet-18 with the CIFAR stem (3x3 conv, no max-pool) trained 2 epochs on 3x32x32 digits: generate_iris's
defaults (since round 7: the heavy-momentum Adam, ``AUTO_DEEP_ADAM``, at ``layer3``, whose cut has 1/4 of the
input's rows, and ``AUTO_WIDE_ADAM`` at ``layer4``, 1/8) vs one cosine over the budget with leaky gradients
below the last ReLU and the straight-through gradient at it vs the best plain loop, at deep cuts.

    python lab/iri_cifar_stem_check.py --cases layer4,layer3 --seeds 4     # about 10 minutes on 2 cores

The donor is cached next to the benchmark's (``IRI_BENCH_DONORS``, ``~/.cache/iri_depth_donors``). Round 6 of
docs/iri_depth.md used it to drop one cosine over the budget at wide deep ResNet cuts: at ``layer3`` (16,384
values from 3,072 pixels) it took 758 steps to the median, the heavy-momentum Adam 240. Round 7 used it to
give one cosine to wide cuts at 1/8 of the rows: at ``layer4`` the default now ends at 0.0122 (4 seeds; the
straight-through variant 0.0130, the plain loop 0.0138, the heavy-momentum Adam 0.0136 in round 6).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch
import torchvision
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))

ONE_COSINE = dict(optimizer="adam", cycle_steps=0, tuning={"relu_leak": 0.1, "fold_bn": True})
SHOWN = ("optimizer", "lr", "steps_to_1e-2", "median", "converged", "seed_distance", "total_s")


def cifar_stem_resnet18(bench) -> nn.Module:
    """torchvision ResNet-18 (10 classes) with the CIFAR stem, trained 2 epochs of Adam (lr 1e-3, batch 64) on
    ``bench.donor_data()``; cached in ``bench.DONORS``. Returns it in eval mode."""
    from similarity_plugins.apps.zoo import apply_cifar_stem

    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    apply_cifar_stem(model, "resnet18")
    path = os.path.join(bench.DONORS, f"resnet18cifar_{bench.DATA}_e2.pt")
    if os.path.exists(path):
        model.load_state_dict(torch.load(path))
        return model.eval()
    start = time.perf_counter()
    x, y = bench.donor_data()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(0)
    model.train()
    for _ in range(2):
        for idx in torch.randperm(len(x), generator=g).split(64):
            opt.zero_grad()
            nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
            opt.step()
    os.makedirs(bench.DONORS, exist_ok=True)
    torch.save(model.state_dict(), path)
    model.eval()
    with torch.no_grad():
        accuracy = float((model(x[:500]).argmax(1) == y[:500]).float().mean())
    print(f"trained in {time.perf_counter() - start:.0f} s, training accuracy {accuracy:.2f}", flush=True)
    return model


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", default="layer4,layer3", help="layers of the CIFAR-stem ResNet-18, comma-separated")
    p.add_argument("--seeds", type=int, default=4)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    import bench_iri as bench

    from similarity_plugins.networks.model_state import frozen
    from similarity_plugins.networks.split import SplitNetwork

    model = cifar_stem_resnet18(bench)
    seeds = bench.donor_data()[0][-args.seeds:].clone()
    for layer in args.cases.split(","):
        with frozen(model):
            plain = bench.best_plain(SplitNetwork(model, layer).front, seeds, bench.STEPS)
        print(layer, "plain", {k: plain[k] for k in SHOWN if k in plain}, flush=True)
        for name, options in (("default", {}), ("one cosine", ONE_COSINE)):
            mine = bench.ours(model, layer, seeds, bench.STEPS, **options)
            print(layer, name, {k: mine[k] for k in SHOWN if k in mine}, flush=True)


if __name__ == "__main__":
    main()
