"""SmallCNN and build_model (every scheme, weights loading and its errors)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from similarity_plugins.apps.training import save_weights
from similarity_plugins.apps.zoo import SmallCNN, build_model, load_weights, split_model_spec
from tests.helpers.tolerance import FLOAT32_PATHS

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def tiny_net(num_classes: int = 10, hidden: int = 4) -> nn.Module:
    """A callable for the python: scheme (accepts num_classes)."""
    return nn.Sequential(nn.Flatten(), nn.Linear(16, hidden), nn.ReLU(), nn.Linear(hidden, num_classes))


def not_a_model() -> int:
    return 3


def test_small_cnn_shapes():
    m = SmallCNN(width=32).eval()
    names = [n for n, _ in m.named_children()]
    assert names == ["block1", "block2", "block3", "block4", "pool", "flatten", "fc"]
    x = torch.rand(2, 1, 32, 32)
    h = x
    shapes = []
    for name in ["block1", "block2", "block3", "block4"]:
        h = getattr(m, name)(h)
        shapes.append(tuple(h.shape[1:]))
    assert shapes == [(32, 16, 16), (32, 8, 8), (32, 4, 4), (32, 2, 2)]
    assert 32 * 4 * 4 < 32 * 32  # block3 holds fewer values than the input has pixels
    assert m(x).shape == (2, 10)
    assert SmallCNN(in_channels=3, num_classes=5, width=8)(torch.rand(1, 3, 32, 32)).shape == (1, 5)


def test_split_model_spec():
    assert split_model_spec("timm:vit_tiny_patch16_224?img_size=32&patch_size=4@w.pt") == (
        "timm", "vit_tiny_patch16_224", {"img_size": 32, "patch_size": 4}, "w.pt")
    assert split_model_spec("small-cnn") == ("small-cnn", "", {}, None)
    assert split_model_spec("torchvision:resnet18?cifar_stem=true&drop=0.5&act=gelu&x=none")[2] == {
        "cifar_stem": True, "drop": 0.5, "act": "gelu", "x": None}
    with pytest.raises(ValueError, match="key=value"):
        split_model_spec("small-cnn?width")


def test_build_small_cnn_options():
    m = build_model("small-cnn?width=8", num_classes=3, in_channels=3)
    assert isinstance(m, SmallCNN) and m.fc.out_features == 3 and m.block1[0].in_channels == 3
    assert m.fc.in_features == 8 and not m.training


def test_build_torchvision_resnet18():
    m = build_model("torchvision:resnet18", num_classes=10)
    assert m.fc.out_features == 10
    assert m(torch.rand(2, 3, 32, 32)).shape == (2, 10)
    s = build_model("torchvision:resnet18?cifar_stem=true", num_classes=10)
    assert s.conv1.kernel_size == (3, 3) and s.conv1.stride == (1, 1) and isinstance(s.maxpool, nn.Identity)
    assert s(torch.rand(1, 3, 32, 32)).shape == (1, 10)


@pytest.mark.slow  # a 130M-parameter VGG
def test_build_torchvision_vgg11_bn():
    m = build_model("torchvision:vgg11_bn", num_classes=10)
    assert m.classifier[-1].out_features == 10
    assert any(isinstance(x, nn.BatchNorm2d) for x in m.features)
    assert m(torch.rand(1, 3, 32, 32)).shape == (1, 10)


def test_build_timm_vit_tiny_small_images():
    m = build_model("timm:vit_tiny_patch16_224?img_size=32&patch_size=4", num_classes=10)
    assert m.patch_embed.patch_size == (4, 4)
    assert m(torch.rand(2, 3, 32, 32)).shape == (2, 10)


def test_build_python_callable():
    m = build_model(f"python:{__name__}:tiny_net?hidden=6", num_classes=7)
    assert m[1].out_features == 6 and m[-1].out_features == 7
    m2 = build_model("python:similarity_plugins.apps.zoo:SmallCNN?width=4")
    assert isinstance(m2, SmallCNN) and m2.fc.in_features == 4


@pytest.mark.parametrize(
    "spec, pattern",
    [
        ("keras:resnet", "unknown model scheme"),
        ("torchvision:resnet81", "resnet18"),  # close names are suggested
        ("timm:vit_tiny_patch16_22", "vit_tiny_patch16_224"),
        ("python:no_such_module_xyz:f", "cannot import"),
        (f"python:{__name__}:tiny_nett", "tiny_net"),
        ("python:justmodule", "python:MODULE:CALLABLE"),
        ("torchvision:", "needs a name"),
        ("small-cnn:big", "no name"),
        ("", "valid forms"),
    ],
)
def test_build_model_spec_errors(spec, pattern):
    with pytest.raises(ValueError, match=pattern):
        build_model(spec)


def test_build_python_not_a_module():
    with pytest.raises(TypeError, match="not a torch.nn.Module"):
        build_model(f"python:{__name__}:not_a_model")


def test_no_download_options_refused():
    with pytest.raises(ValueError, match="downloaded"):
        build_model("timm:resnet18?pretrained=true")
    with pytest.raises(ValueError, match="downloaded"):
        build_model("torchvision:resnet18?weights=DEFAULT")


def _perturbed_small_cnn(width: int = 8) -> SmallCNN:
    torch.manual_seed(0)
    m = SmallCNN(width=width)
    with torch.no_grad():
        m.block1[1].running_mean.uniform_()
        m.fc.bias.uniform_()
    return m


def test_weights_roundtrip(tmp_path):
    m = _perturbed_small_cnn()
    path = save_weights(m, tmp_path / "sub" / "w.pt")
    assert sorted(p.name for p in (tmp_path / "sub").iterdir()) == ["w.pt"]  # no temp file left
    loaded = build_model(f"small-cnn?width=8@{path}")
    for (k, a), (k2, b) in zip(m.state_dict().items(), loaded.state_dict().items()):
        assert k == k2 and torch.equal(a, b)
    x = torch.rand(3, 1, 32, 32)
    assert torch.allclose(m.eval()(x), loaded(x), **FLOAT32_PATHS)


@pytest.mark.parametrize("wrap", ["state_dict", "model", "module"])
def test_weights_wrapped_forms(tmp_path, wrap):
    m = _perturbed_small_cnn()
    sd = m.state_dict()
    obj = {f"module.{k}": v for k, v in sd.items()} if wrap == "module" else {wrap: sd, "epoch": 3}
    torch.save(obj, tmp_path / "w.pt")
    loaded = build_model(f"small-cnn?width=8@{tmp_path / 'w.pt'}")
    assert torch.equal(loaded.fc.bias, m.fc.bias)


def test_bad_weights_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="not found"):
        build_model(f"small-cnn@{tmp_path / 'missing.pt'}")
    (tmp_path / "junk.pt").write_bytes(b"this is not a checkpoint")
    with pytest.raises(ValueError, match="not a loadable state dict"):
        build_model(f"small-cnn@{tmp_path / 'junk.pt'}")
    torch.save([1, 2, 3], tmp_path / "list.pt")
    with pytest.raises(ValueError, match="not a state dict"):
        build_model(f"small-cnn@{tmp_path / 'list.pt'}")
    torch.save(nn.Linear(2, 2), tmp_path / "module.pt")  # a pickled module: refused by weights_only
    with pytest.raises(ValueError, match="state dict"):
        build_model(f"small-cnn@{tmp_path / 'module.pt'}")


def test_mismatched_weights_list_keys(tmp_path):
    save_weights(SmallCNN(width=8), tmp_path / "w8.pt")
    with pytest.raises(ValueError, match=r"shape mismatches: block1\.0\.weight"):
        build_model(f"small-cnn?width=16@{tmp_path / 'w8.pt'}")
    with pytest.raises(ValueError, match=r"26 missing keys: 0\.block1\.0\.weight.*26 unexpected keys: block1") as err:
        load_weights(nn.Sequential(SmallCNN(width=8)), tmp_path / "w8.pt")
    assert "(+21 more)" in str(err.value)  # long lists are cut to the first few
    with pytest.raises(ValueError, match="missing keys"):
        build_model(f"python:{__name__}:tiny_net@{tmp_path / 'w8.pt'}")


def test_build_model_seed_fixes_initial_weights_and_keeps_global_rng():
    before = torch.random.get_rng_state()
    a = build_model("small-cnn", num_classes=10, in_channels=1, seed=3)
    torch.rand(5)
    b = build_model("small-cnn", num_classes=10, in_channels=1, seed=3)
    c = build_model("small-cnn", num_classes=10, in_channels=1, seed=4)
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not torch.equal(sa["fc.weight"], sc["fc.weight"])
    torch.random.set_rng_state(before)
    x = torch.rand(3)
    torch.random.set_rng_state(before)
    build_model("small-cnn", num_classes=10, in_channels=1, seed=3)
    assert torch.equal(torch.rand(3), x)
    for bad in ("3", 1.5, True):
        with pytest.raises(ValueError, match="seed must be an integer"):
            build_model("small-cnn", num_classes=10, in_channels=1, seed=bad)
