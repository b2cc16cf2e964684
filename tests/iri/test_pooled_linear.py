"""An average pool that spreads values, then a linear layer: folded into one linear layer of the private
front copy (``iri/front.py``)."""

from __future__ import annotations

import pytest
import torch
import torchvision
from torch import nn

from similarity_plugins.iri import generate_iris
from similarity_plugins.iri.front import fold_pooled_linear
from similarity_plugins.networks.split import SplitNetwork
from tests.helpers.iri import checked_torchvision_iris, torchvision_cut


class _Head(nn.Module):
    """conv -> adaptive average pool -> flatten (three spellings) -> linear -> ReLU."""

    def __init__(self, out: int, flatten: str):
        super().__init__()
        self.conv, self.pool = nn.Conv2d(3, 4, 3, padding=1), nn.AdaptiveAvgPool2d(out)
        self.flat, self.how = nn.Flatten(), flatten
        self.fc, self.act = nn.Linear(4 * out * out, 5), nn.ReLU()

    def forward(self, x):
        x = self.pool(self.conv(x))
        x = {"function": lambda t: torch.flatten(t, 1), "method": lambda t: t.flatten(1),
             "module": self.flat, "all": lambda t: torch.flatten(t)[None]}[self.how](x)
        return self.act(self.fc(x))


@pytest.mark.parametrize("how", ["function", "method", "module"])
@pytest.mark.parametrize("size,out,folds", [(1, 3, True), (2, 3, True), (4, 3, False), (3, 3, False)])
def test_fold_is_the_same_function_where_the_pool_spreads(how, size, out, folds):
    """1x1 -> 3x3 copies, 2x2 -> 3x3 averages overlapping windows: both fold; 4x4 -> 3x3 and 3x3 -> 3x3 do
    not spread, and are left alone."""
    torch.manual_seed(0)
    model = _Head(out, how).eval()
    front = torch.fx.symbolic_trace(model)
    x = torch.rand(6, 3, size, size)
    with torch.no_grad():
        ref = model(x)
        assert fold_pooled_linear(front, x[:1]) == (["fc"] if folds else [])
        torch.testing.assert_close(front(x), ref, rtol=1e-5, atol=1e-6)
    if folds:
        assert front.fc.in_features == 4 * size * size and not front.fc.weight.requires_grad
        assert not any(n.op == "call_module" and n.target == "pool" for n in front.graph.nodes)
    assert model.fc.in_features == 4 * out * out   # the traced copy shares nothing it changed


def test_fold_needs_flatten_from_dim_1_and_a_pool_with_one_user():
    torch.manual_seed(0)
    model = _Head(3, "all").eval()   # torch.flatten(t) flattens the batch too: not the pattern
    front = torch.fx.symbolic_trace(model)
    assert fold_pooled_linear(front, torch.rand(1, 3, 1, 1)) == []

    class TwoUsers(_Head):
        def forward(self, x):
            pooled = self.pool(self.conv(x))
            return self.fc(torch.flatten(pooled, 1)).sum(1) + pooled.sum((1, 2, 3))

    front = torch.fx.symbolic_trace(TwoUsers(3, "function").eval())
    assert fold_pooled_linear(front, torch.rand(1, 3, 1, 1)) == []


@pytest.mark.slow  # builds torchvision's VGG16-BN
def test_vgg16_bn_head_at_32_pixels_folds_into_a_512_input_layer():
    model, _, x, front, ref = torchvision_cut("vgg16_bn", "classifier.1", (3, 3, 32, 32))
    with torch.no_grad():
        assert fold_pooled_linear(front, x[:1]) == ["classifier.0"]
        torch.testing.assert_close(front(x), ref, rtol=1e-4, atol=1e-5 * float(ref.abs().max()))
    assert front.get_submodule("classifier.0").in_features == 512
    assert model.classifier[0].in_features == 25088


@pytest.mark.slow  # IRIs through a VGG16-BN front
def test_generate_iris_reports_the_folded_head_and_true_errors():
    _, _, iris = checked_torchvision_iris("vgg11_bn", "classifier.6")
    assert iris.stats["linears_folded"] == ["classifier.0"]


@pytest.mark.slow  # seconds of IRI steps; the fast suite keeps the README's time limit
def test_fronts_without_batchnorm_get_the_private_copy_too():
    """torchvision's vgg11 has no BatchNorm to fold; its head is still folded (and nothing else changes)."""
    from similarity_plugins.iri.front import private_front

    torch.manual_seed(0)
    model = torchvision.models.vgg11(num_classes=10).eval()
    iris = generate_iris(model, "classifier.6", torch.rand(2, 3, 32, 32), steps=2, progress="never")
    assert iris.settings["fold_bn"] is True
    assert (iris.stats["bn_folded"], iris.stats["convs_cropped"], iris.stats["linears_folded"]) == \
        (False, [], ["classifier.0"])
    plain = nn.Sequential(nn.Conv2d(3, 2, 3), nn.ReLU(), nn.Conv2d(2, 2, 3)).eval()
    front, changes = private_front(SplitNetwork(plain, "2").front_graph, torch.rand(1, 3, 8, 8))
    assert front is None and changes == {"bn_folded": False, "convs_cropped": [], "linears_folded": []}
