"""One forward+backward of an IRI front: the model as it is vs the private copies ``generate_iris`` runs.

Run: ``python -m pytest benchmarks/bench_iri_front.py --benchmark-only`` (a minute on 2 cores).

Per case (torchvision architecture and cut at 3x32x32, untrained weights: the cost does not depend on them;
16 samples, the gradient with respect to the input only, as in the IRI optimiser), one benchmark ``group``
with three contenders:

- ``model``: the user's model cut at the layer (``SplitNetwork.front``), as the plain loop runs it;
- ``folded``: the private copy with BatchNorm folded into the convolutions (``iri/front.py``);
- ``private``: that copy with the convolution taps that only read padding cut (``iri/front.py``) and an
  average pool that spreads values folded into the linear layer after it (``iri/front.py``), which
  is what ``generate_iris`` runs wherever ``fold_bn`` is on (``front.private_front``).

``extra_info``: ``model_over_private`` and ``folded_over_private`` (median time ratios, > 1: the private
copy is faster), ``convs_cropped`` and ``linears_folded``. ResNet ``layer4`` at 32x32 sees 1x1 maps, where
three of ResNet-18's four 3x3 convolutions multiply eight of their nine taps by padding; VGG-16-BN's
``classifier.1`` reads 25,088 copies of 512 values; ``layer3`` (2x2 maps) and VGG-16-BN's last pool have
neither and are the controls.
"""

from __future__ import annotations

from functools import lru_cache

import pytest
import torch
import torchvision
from ratios import record, share_ratio

from similarity_plugins.iri.front import folded_front, private_front
from similarity_plugins.networks.model_state import frozen
from similarity_plugins.networks.split import SplitNetwork

CASES = [("resnet18", "layer4"), ("resnet34", "layer4"), ("vgg16_bn", "classifier.1"), ("resnet18", "layer3"),
         ("vgg16_bn", "features.43")]
BATCH = 16
_CHANGED: dict[str, dict[str, list[str]]] = {}


@lru_cache(maxsize=2)
def _model(arch: str) -> torch.nn.Module:
    torch.manual_seed(0)
    return getattr(torchvision.models, arch)(num_classes=10).eval()


def _front(arch: str, layer: str, which: str):
    """The callable front ``which`` of the case, and the input batch (BATCH, 3, 32, 32)."""
    model = _model(arch)
    split = SplitNetwork(model, layer)
    x = torch.rand(BATCH, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    if which == "model":
        return split.front, x
    if which == "folded":
        return folded_front(split.front_graph), x
    front, _CHANGED[f"{arch}/{layer}"] = private_front(split.front_graph, x[:1])
    return front, x


@pytest.mark.parametrize("arch,layer,which", [(a, lay, w) for a, lay in CASES for w in ("model", "folded", "private")],
                         ids=[f"{a}-{lay}-{w}" for a, lay in CASES for w in ("model", "folded", "private")])
def test_front_pass(benchmark, arch, layer, which):
    benchmark.group = f"iri-front-{arch}-{layer}"
    front, x = _front(arch, layer, which)
    x.requires_grad_(True)

    def run() -> None:
        torch.autograd.grad(front(x).sum(), x)

    with frozen(_model(arch)):
        benchmark.pedantic(run, rounds=15, iterations=2, warmup_rounds=2)
    key = f"{arch}/{layer}"
    benchmark.extra_info.update(case=key, batch=BATCH, which=which)
    record(f"{key}/{which}", benchmark)
    if which == "private":
        benchmark.extra_info.update(_CHANGED[key])
    share_ratio("model_over_private", f"{key}/model", f"{key}/private")
    share_ratio("folded_over_private", f"{key}/folded", f"{key}/private")
