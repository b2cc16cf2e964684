"""Network splitting: front, end and native activations agree with the whole model."""

from __future__ import annotations

import pytest
import timm
import torch
import torchvision
from torch import nn

from similarity_plugins import LayerNotFound, layers
from similarity_plugins.networks.model_state import frozen
from similarity_plugins.networks.split import SplitNetwork
from tests.helpers.models import TwoHeaded, assert_unchanged, snapshot, tiny_cnn


def _check_split(model: nn.Module, x: torch.Tensor, names: list[str]) -> None:
    model.eval()
    with torch.no_grad():
        ref = model(x)
        for name in names:
            split = SplitNetwork(model, name)
            h = split.front(x)
            logits, taps = split.end_with_taps(h)
            act, native_logits, native_taps = split.native(x)
            assert torch.allclose(logits, ref, atol=1e-5), name
            assert torch.allclose(native_logits, ref, atol=1e-5), name
            assert torch.equal(act, h), name
            assert len(taps) == len(native_taps) == len(split.taps)
            for a, b in zip(taps, native_taps):
                assert torch.allclose(a, b, atol=1e-5), name


@pytest.mark.parametrize("name", ["resnet18", pytest.param("resnet50", marks=pytest.mark.slow)])
def test_resnet_layers_and_split(name):
    model = torchvision.models.get_model(name, weights=None, num_classes=10)
    names = layers(model)
    assert names[0] == "maxpool" and names[-1] == "avgpool"
    assert "layer1.0" in names and "layer4.1" in names
    assert names.index("layer1.0") < names.index("layer2.0") < names.index("layer4.1")
    chosen = names if name == "resnet18" else ["maxpool", "layer2.3", "avgpool"]
    _check_split(model, torch.rand(2, 3, 32, 32), chosen + ["layer1", "layer3"])


class _VGGLike(nn.Module):
    """torchvision's VGG, narrow: a ``features`` stack from its ``make_layers``, ``avgpool``, a small
    ``classifier`` and VGG's forward. The layer list reads the structure, never the class."""

    def __init__(self) -> None:
        super().__init__()
        self.features = torchvision.models.vgg.make_layers([8, "M", 16, 16, "M", 16, "M"])
        self.avgpool = nn.AdaptiveAvgPool2d(2)
        self.classifier = nn.Sequential(nn.Linear(64, 32), nn.ReLU(True), nn.Dropout(), nn.Linear(32, 32), nn.ReLU(True),
                                        nn.Dropout(), nn.Linear(32, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


def test_vgg_look_alike_layers_and_split():
    """The fast suite's VGG: torchvision's own VGGs (a 100M-parameter classifier, seconds to build) run below."""
    model = _VGGLike()
    assert layers(model) == ["features.1", "features.2", "features.4", "features.6", "features.7", "features.9",
                             "features.10", "avgpool", "classifier.1", "classifier.4"]
    _check_vgg(model)


@pytest.mark.slow  # builds torchvision's VGG11 (a 100M-parameter classifier); its look-alike runs in the fast suite
@pytest.mark.parametrize("name", ["vgg11", "vgg11_bn"])
def test_vgg_layers_and_split(name):
    # any weights do for the split; init_weights=False leaves PyTorch's initialisation (VGG's own re-draws 100M values)
    _check_vgg(torchvision.models.get_model(name, weights=None, num_classes=10, init_weights=False))


def _check_vgg(model: nn.Module) -> None:
    names = layers(model)
    assert names[-1].startswith("classifier.") and "avgpool" in names
    assert all(isinstance(dict(model.named_modules())[n], (nn.ReLU, nn.MaxPool2d, nn.AdaptiveAvgPool2d)) for n in names)
    _check_split(model, torch.rand(2, 3, 32, 32), names[::3] + names[-2:])


def test_timm_vit_layers_and_split():
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=10, img_size=32, patch_size=4)
    names = layers(model)
    assert names[0] == "patch_embed" and names[1] == "blocks.0" and names[-1] == "norm"
    assert len([n for n in names if n.startswith("blocks.")]) == len(model.blocks)
    split = SplitNetwork(model, "blocks.5")
    assert split.front(torch.rand(2, 3, 32, 32)).shape == (2, 65, 192)  # 64 patches + CLS token
    assert split.taps == tuple(f"blocks.{i}" for i in range(6, 12)) + ("norm",)
    _check_split(model, torch.rand(2, 3, 32, 32), ["patch_embed", "blocks.0", "blocks.5", "blocks.11", "norm"])


def test_sequential_and_generic_tree():
    model = tiny_cnn()
    assert layers(model) == ["block1", "block2", "block3", "pool"]
    _check_split(model, torch.rand(3, 1, 16, 16), layers(model) + ["block2.2"])


def test_front_runs_only_up_to_the_cut():
    model = tiny_cnn()
    called = []
    for name, module in model.named_children():
        module.register_forward_hook(lambda *a, n=name: called.append(n))
    SplitNetwork(model, "block2").front(torch.rand(1, 1, 16, 16))
    assert called == ["block1", "block2"]
    called.clear()
    split = SplitNetwork(model, "block2")
    split.end(torch.rand(1, 16, 4, 4))
    assert called == ["block3", "pool", "flatten", "fc"]  # the end never recomputes block1/block2


def test_unknown_layer_lists_valid_ones():
    model = torchvision.models.resnet18(num_classes=10)
    with pytest.raises(LayerNotFound) as info:
        SplitNetwork(model, "layer9")
    message = str(info.value)
    assert "layer9" in message and "layer1.0" in message and "maxpool" in message


def test_not_a_clean_cut_is_explained():
    model = torchvision.models.resnet18(num_classes=10)
    split = SplitNetwork(model, "layer1.0.conv1")  # the residual connection skips around it
    assert split.front(torch.rand(1, 3, 32, 32)).shape == (1, 64, 8, 8)
    assert not split.can_end
    with pytest.raises(RuntimeError, match="not a clean cut"):
        split.end(torch.rand(1, 64, 8, 8))


@pytest.mark.parametrize("layer", ["layer1.0.conv1", "layer2.0.bn2", "layer2.0.downsample.1", "layer3.1.relu"])
def test_cuts_inside_a_residual_block_still_trace_their_front(layer):
    """IRIs need only the front: at a cut the skip connection goes around, it is still a traced graph (no
    hook per call, BatchNorm foldable), equal to the model's own value there."""
    from similarity_plugins.networks.layer_calls import front_by_hook as _front_by_hook

    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10).eval()
    if layer == "layer3.1.relu":   # called twice in the block: its activation is ambiguous, refused saying so
        with pytest.raises(ValueError, match="called 2 times in one forward pass"):
            SplitNetwork(model, layer)
        return
    split = SplitNetwork(model, layer)
    x = torch.rand(2, 3, 32, 32)
    assert split.front_graph is not None and not split.can_end
    assert torch.equal(split.front_graph(x), _front_by_hook(model, layer, x))
    called = [n.target for n in split.front_graph.graph.nodes if n.op == "call_module"]
    assert called[-1] == layer and not any(t.startswith(("layer3", "layer4", "fc")) for t in called)
    if "downsample" in layer:   # the block's main branch runs before it in the trace but does not feed it
        assert "layer2.0.conv1" not in called and "layer1.1" in called


class _InPlaceStatements(nn.Module):
    """In-place calls whose results are unused: their effect on ``x`` is what counts."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.act = nn.ReLU(inplace=True)
        self.out = nn.Identity()

    def forward(self, x):
        x = self.conv(x)
        x.relu_()
        x.mul_(-1.0)
        torch.nn.functional.relu(x, inplace=True)
        y = x * 2.0
        self.act(y)
        return self.out(y)


def test_front_keeps_in_place_statements_that_dead_code_elimination_would_drop():
    """The traced front removes unused nodes (dead skip branches), but not in-place calls whose result is
    unused: before, ``x.relu_()`` on a line of its own vanished and the front differed from the model."""
    from similarity_plugins.networks.layer_calls import front_by_hook as _front_by_hook

    torch.manual_seed(0)
    model = _InPlaceStatements().eval()
    x = torch.randn(2, 3, 8, 8)
    split = SplitNetwork(model, "out")
    assert split.front_graph is not None
    with torch.no_grad():
        torch.testing.assert_close(split.front(x), _front_by_hook(model, "out", x))
        assert float(split.front(x).abs().max()) == 0.0   # relu, negate, relu: all zero


def test_layer_output_not_a_tensor():
    model = TwoHeaded()
    with pytest.raises(TypeError, match="not a tensor"):
        SplitNetwork(model, "split").front(torch.rand(1, 1, 16, 16))


def test_split_leaves_model_unchanged_and_grads_reach_inputs():
    model = tiny_cnn()
    model.train()
    model.block2[0].weight.requires_grad_(False)
    before = snapshot(model)
    split = SplitNetwork(model, "block2")
    x = torch.rand(4, 1, 16, 16, requires_grad=True)
    h = split.front(x)
    split.end(h).sum().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0
    assert all(p.grad is None for p in model.parameters())
    assert_unchanged(model, before)


def test_frozen_restores_flags_on_error():
    model = tiny_cnn()
    model.train()
    before = snapshot(model)
    with pytest.raises(ZeroDivisionError):
        with frozen(model):
            assert not model.training
            assert not any(p.requires_grad for p in model.parameters())
            1 / 0
    assert_unchanged(model, before)
