"""The measurement behind the "smooth" preset: candidate presets on fronts whose activations are not ReLU.

Small CNNs with GELU, SiLU or ReLU6 (conv-BN-act blocks, two max-pools; trained 3 epochs on 32x32 digits) and
a timm ViT (GELU, LayerNorm; 4x4 patches at 32x32, random weights) are cut at a pooled and at a deep layer; each
candidate preset runs on the same seeds. Printed per (net, cut, preset): sample-steps per sample until the
median error reaches 1e-2, the final median and 95th percentile error and the converged fraction. Run from the repository root:

    PYTHONPATH=. python lab/iri_smooth_presets.py --seeds 8 --steps 1000
"""

from __future__ import annotations

import argparse

import torch
from iri_schedule_grid import summary_line, timed_curve  # lab/ is the script's folder
from torch import nn

from tests.helpers.iri import fit_adam

CANDIDATES = ("adam", "pool-expanding", "resnet", "vgg-last-pool", "vgg-deep-pool", "wide")


def smooth_cnn(act: type[nn.Module], width: int = 16) -> nn.Sequential:
    """Six conv-BN-act layers (1 -> ``width`` channels), max-pools after the 2nd and 4th, then a linear head."""
    layers: list[nn.Module] = []
    for i in range(6):
        layers += [nn.Conv2d(1 if i == 0 else width, width, 3, padding=1), nn.BatchNorm2d(width), act()]
        if i in (1, 3):
            layers.append(nn.MaxPool2d(2))
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width, 10))


def cases(seeds: int) -> list[tuple[str, nn.Module, list[str], torch.Tensor]]:
    """(name, model, cuts, seeds) for every net of the study."""
    from similarity_plugins.datasets import digits_data
    from similarity_plugins.networks.data import load_all

    data = digits_data(size=32, seed=0)
    x, y = load_all(data.train)
    out = []
    for act in (nn.GELU, nn.SiLU, nn.ReLU6):
        torch.manual_seed(0)
        model = fit_adam(smooth_cnn(act), x, y, lr=1e-3)
        out.append((f"cnn-{act.__name__}", model, ["6", "13", "19"], x[-seeds:].clone()))
    try:
        import timm

        torch.manual_seed(0)
        vit = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, patch_size=4, in_chans=1,
                                num_classes=10).eval()
        out.append(("vit-tiny", vit, ["blocks.1", "blocks.5"], x[-seeds:].clone()))
    except Exception as exc:  # noqa: BLE001 - timm is optional
        print(f"(no timm ViT: {exc})")
    return out


def main(argv: list[str] | None = None) -> None:
    """Run every candidate on every case and print one line each."""
    from similarity_plugins.iri import generate_iris

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=8)
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--presets", default=",".join(CANDIDATES))
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    for name, model, cuts, seeds in cases(args.seeds):
        for layer in cuts:
            auto = generate_iris(model, layer, seeds[:1], steps=1, progress="never").settings["preset"]
            print(f"{name} {layer}: auto picks {auto}", flush=True)
            for preset in args.presets.split(","):
                iris, reach, _, seconds = timed_curve(model, layer, seeds, args.steps, tuning={"preset": preset})
                print(f"{name:12s} {layer:9s} {preset:15s} steps to median 1e-2: {reach:6.0f}  "
                      + summary_line(iris, seconds), flush=True)


if __name__ == "__main__":
    main()
