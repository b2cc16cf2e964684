"""The digits ResNet-18 donor run through a twin whose forward calls ``F.relu`` (its own modules, no
``nn.ReLU`` module in the front): ``generate_iris``'s defaults, which since round 9 rewrite functional ReLUs
as modules of a private copy (``similarity_plugins/iri/modular.py``), against Adam's defaults, which is what
such a front ran before.

    python lab/iri_functional_relu_check.py --cases layer3,layer4 --seeds 16   # about a minute on 2 cores

Round 9 of docs/iri_depth.md: ``layer3`` 161 steps to the median and ``layer4`` 199, every sample
converged, as the module version's 161 / 199; Adam's defaults 596 steps (88% converged) and never (0.0115).
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks"))


class FunctionalBlock(nn.Module):
    """A torchvision BasicBlock's modules, run with ``F.relu``."""

    def __init__(self, block: nn.Module) -> None:
        super().__init__()
        self.conv1, self.bn1, self.conv2, self.bn2 = block.conv1, block.bn1, block.conv2, block.bn2
        self.downsample = block.downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        return F.relu(self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x))))) + identity)


class FunctionalResNet(nn.Module):
    """A torchvision ResNet's stem and stages (up to ``layer4``), sharing its modules, with ``F.relu``."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.conv1, self.bn1, self.maxpool = model.conv1, model.bn1, model.maxpool
        for name in ("layer1", "layer2", "layer3", "layer4"):
            setattr(self, name, nn.Sequential(*[FunctionalBlock(b) for b in getattr(model, name)]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(F.relu(self.bn1(self.conv1(x))))
        return self.layer4(self.layer3(self.layer2(self.layer1(x))))


def main() -> None:
    """Print steps to the median, median, converged fraction and seed distance per cut and variant."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", default="layer3,layer4")
    p.add_argument("--seeds", type=int, default=16)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    import bench_iri as bench

    from similarity_plugins.networks.model_state import frozen
    from similarity_plugins.networks.split import SplitNetwork

    model, seeds = bench.case_inputs("resnet18", args.seeds)
    twin = FunctionalResNet(model).eval()
    with frozen(twin):
        bench.warm_up(SplitNetwork(twin, "layer3").front, seeds)
    for layer in args.cases.split(","):
        for name, options in (("auto (round 9)", {}), ("Adam's defaults (before)", {"optimizer": "adam"})):
            r = bench.ours(twin, layer, seeds, 1000, **options)
            print(f"{layer} {name} [{r['optimizer']}]: steps to median {r['steps_to_1e-2']:.0f} "
                  f"({r['seconds_to_1e-2']:.1f} s), median {r['median']:.4f}, converged {r['converged']:.2f}, "
                  f"seed distance {r['seed_distance']:.3f}", flush=True)


if __name__ == "__main__":
    main()
