"""How much the ``iri-slm`` score depends on ``iri_tol`` and ``iri_max_seeds``: the shortcut study's pair
clean A -> shortcut S at ``block3`` / ``block4``, one ``compare`` per setting, with 95% intervals over test
samples (and the IRIs' median error and converged fraction); ``--resnet`` adds a deep ResNet cut: two
torchvision ResNet-18 (seeds 0 and 1) trained 2 epochs on the 3x32x32 digits' training split, A -> B at
``layer3`` (L-BFGS). Run from the repository root:

    python lab/iri_sensitivity.py --layers block3,block4 --tols 0.005,0.01,0.02,0.05 --seeds 64,128,256,all
    python lab/iri_sensitivity.py --resnet --layers layer3 --seeds 128,256,512

Each setting generates its own IRIs (separate runs; the IRIs of a looser tolerance are not the snapshots of
one run at the tightest). Everything else is the shortcut study's configuration (``DemoConfig``).
"""

from __future__ import annotations

import argparse
import time

import torch


def donors(cfg, seed: int = 0):
    """(clean A, shortcut S, data) as the shortcut study trains and compares them (every image marked)."""
    from similarity_plugins.apps.studies.common import DonorPool
    from similarity_plugins.apps.studies.shortcut import train_donors
    from similarity_plugins.datasets import PixelShortcut, digits_data
    from similarity_plugins.networks.data import Data

    clean = digits_data(size=32, seed=seed)
    models = train_donors(cfg, clean.train, seed, False, DonorPool())
    data = Data(train=PixelShortcut(clean.train, seed=seed + 3), test=PixelShortcut(clean.test, seed=seed + 4))
    return models["clean A"], models["shortcut S"], data


def resnets(epochs: int = 2):
    """(ResNet-18 A, ResNet-18 B, data): trained ``epochs`` epochs of Adam (lr 1e-3, batch 64) on 3x32x32 digits."""
    import torchvision
    from torch import nn

    from similarity_plugins.datasets import ImageTensors, digits_data
    from similarity_plugins.networks.data import Data, load_all

    clean = digits_data(size=32, seed=0)
    (xtr, ytr), (xte, yte) = load_all(clean.train), load_all(clean.test)
    train, test = ImageTensors(xtr.repeat(1, 3, 1, 1), ytr, 10), ImageTensors(xte.repeat(1, 3, 1, 1), yte, 10)
    models = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        model = torchvision.models.resnet18(num_classes=10)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        g = torch.Generator().manual_seed(seed)
        model.train()
        for _ in range(epochs):
            for idx in torch.randperm(len(train.x), generator=g).split(64):
                opt.zero_grad()
                nn.functional.cross_entropy(model(train.x[idx]), train.y[idx]).backward()
                opt.step()
        models.append(model.eval())
    return models[0], models[1], Data(train=train, test=test)


def main(argv: list[str] | None = None) -> None:
    """Print one line per (layer, setting): score [interval], IRI median error, converged fraction, seconds."""
    from similarity_plugins.apps.studies.common import ci_text, study_options
    from similarity_plugins.apps.studies.shortcut import DemoConfig
    from similarity_plugins.runner.compare import compare

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", default="block3,block4")
    p.add_argument("--tols", default="0.005,0.01,0.02,0.05")
    p.add_argument("--seeds", default="64,128,256,all")
    p.add_argument("--resnet", action="store_true", help="the ResNet-18 pair instead of the shortcut study's")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    cfg = DemoConfig()
    a, s, data = resnets() if args.resnet else donors(cfg)
    base = study_options(cfg)
    if args.resnet:   # the library's defaults for the IRIs (auto: L-BFGS at layer3), the study's for the stitch
        base = {k: v for k, v in base.items() if k not in ("iri_cycle_steps", "iri_tuning")}
    settings = [("iri_tol", float(t)) for t in args.tols.split(",")]
    settings += [("iri_max_seeds", None if n == "all" else int(n)) for n in args.seeds.split(",")]
    pair = "ResNet-18 A -> B" if args.resnet else "clean A -> shortcut S"
    print(f"{pair}, iri-slm; base: tol {cfg.iri_tol}, seeds {cfg.iri_seeds}, steps {cfg.iri_steps}")
    for layer in args.layers.split(","):
        for name, value in settings:
            start = time.perf_counter()
            r = compare(a, s, layer, data, ["iri-slm"], options={**base, name: value}, progress="never")["iri-slm"]
            d = r.details
            if r.error:
                print(f"{layer} {name}={value}: error: {r.error}", flush=True)
                continue
            print(f"{layer} {name}={value}: {ci_text(r)} preset {d.get('iri_preset')}  "
                  f"IRI median {d.get('iri_median_error', float('nan')):.4f} "
                  f"converged {d.get('iri_converged_fraction', float('nan')):.2f}  "
                  f"{time.perf_counter() - start:.0f} s", flush=True)


if __name__ == "__main__":
    main()
