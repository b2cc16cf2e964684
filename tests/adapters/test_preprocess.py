"""sp.preprocessed: a model's own resize, centre crop and normalisation inside the model, equal to timm's,
torchvision's and Hugging Face's transforms, differentiable, with the wrapped model's layer names."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import TensorDataset

import similarity_plugins as sp
from similarity_plugins.adapters.preprocess import Preprocessing, preprocess_images, preprocessing_of
from tests.helpers.models import tiny_cnn

pytestmark = pytest.mark.usefixtures("one_torch_thread")
TINY = {"resize": 18, "crop": 16, "mean": (0.5,), "std": (0.25,), "interpolation": "bilinear"}
TOL = 1e-5  # the same float32 operations in another order (torchvision's kernels vs ours) round differently


def _images(n: int, channels: int, h: int, w: int, seed: int = 0) -> torch.Tensor:
    return torch.rand(n, channels, h, w, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("size", [(300, 260), (200, 320), (224, 224)])
def test_timm_pretrained_cfg_equals_timm_eval_transform(size):
    import timm
    from timm.data import create_transform, resolve_data_config

    model = timm.create_model("resnet18", pretrained=False, num_classes=10)
    transform = create_transform(**resolve_data_config({}, model=model))
    x = _images(2, 3, *size)
    ours = preprocess_images(x, sp.preprocessed(model)._sp_preprocessing)
    assert torch.allclose(ours, torch.stack([transform(img) for img in x]), atol=TOL, rtol=0)


def test_timm_squash_config_equals_timm():
    from timm.data import create_transform

    cfg = {"input_size": (3, 24, 20), "interpolation": "bilinear", "mean": (0.4, 0.5, 0.6), "std": (0.2, 0.3, 0.4),
           "crop_pct": 0.9, "crop_mode": "squash"}
    x = _images(2, 3, 37, 29)
    ours = preprocess_images(x, preprocessing_of(tiny_cnn(), cfg))
    assert torch.allclose(ours, torch.stack([create_transform(**cfg)(img) for img in x]), atol=TOL, rtol=0)


def test_torchvision_weights_transforms_equal_torchvision():
    from torchvision.models import ResNet18_Weights

    transform = ResNet18_Weights.DEFAULT.transforms()
    x = _images(2, 3, 250, 300)
    for config in (transform, ResNet18_Weights.DEFAULT):
        ours = preprocess_images(x, preprocessing_of(tiny_cnn(), config))
        assert torch.allclose(ours, transform(x), atol=TOL, rtol=0)


def test_gradients_reach_the_input_and_the_model_is_unchanged():
    model = tiny_cnn(width=4).eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    wrapped = sp.preprocessed(model, TINY)
    x = _images(3, 1, 23, 19).requires_grad_(True)
    wrapped(x).square().sum().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0
    assert type(model).__name__ == "Sequential" and not hasattr(model, "_sp_preprocessing")
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    expected = model(preprocess_images(x.detach(), wrapped._sp_preprocessing))
    assert torch.equal(wrapped(x.detach()), expected)
    assert isinstance(wrapped, type(model)) and wrapped.block1 is model.block1  # shared, not copied


def test_copies_and_saved_models_keep_the_preprocessing(tmp_path):
    import copy

    wrapped = sp.preprocessed(tiny_cnn(width=4).eval(), TINY)
    torch.save(wrapped, tmp_path / "m.pt")
    x = _images(2, 1, 21, 17)
    for other in (copy.deepcopy(wrapped), torch.load(tmp_path / "m.pt", weights_only=False)):
        assert type(other) is type(wrapped) and other._sp_preprocessing == wrapped._sp_preprocessing
        assert torch.equal(other(x), wrapped(x))


def test_layer_names_stay_the_models_and_compare_runs_with_them():
    model = tiny_cnn(width=4).eval()
    wrapped = sp.preprocessed(model, TINY)
    assert sp.layers(wrapped) == sp.layers(model)
    assert [n for n, _ in wrapped.named_modules()] == [n for n, _ in model.named_modules()]
    data = sp.Data(test=TensorDataset(_images(24, 1, 20, 22), torch.zeros(24, dtype=torch.long)))
    row = sp.compare(wrapped, wrapped, "block2", data, "cka-linear")["cka-linear"]
    assert row.ok and row.score == pytest.approx(1.0, abs=1e-9)


@pytest.mark.filterwarnings("ignore:IRIs at block2 did not converge")  # 10 steps: the run, not the quality
def test_an_iri_metric_runs_on_a_preprocessed_model_in_pixel_space():
    model = tiny_cnn(width=4).eval()
    wrapped = sp.preprocessed(model, TINY)
    x = _images(48, 1, 20, 22)
    labels = torch.randint(0, 10, (48,), generator=torch.Generator().manual_seed(1))
    data = sp.Data(train=TensorDataset(x[:32], labels[:32]), test=TensorDataset(x[32:], labels[32:]))
    options = {"iri_max_seeds": 8, "iri_steps": 10, "iri_batch_size": 8, "epochs": 1, "batch_size": 8}
    row = sp.compare(wrapped, wrapped, "block2", data, "iri-dm", options=options)["iri-dm"]
    assert row.ok, row.error


def test_a_hugging_face_vision_model_with_its_image_processor():
    from transformers import CLIPImageProcessor, ViTConfig, ViTImageProcessor, ViTModel

    torch.manual_seed(0)
    vit = ViTModel(ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                             intermediate_size=64)).eval()
    processor = ViTImageProcessor(size={"height": 32, "width": 32}, image_mean=[0.5, 0.4, 0.3],
                                  image_std=[0.2, 0.25, 0.3])
    x = _images(2, 3, 40, 48)
    wrapped = sp.preprocessed(vit, processor)
    pixels = processor(images=list(x), do_rescale=False, return_tensors="pt")["pixel_values"]
    assert torch.allclose(preprocess_images(x, wrapped._sp_preprocessing), pixels, atol=TOL, rtol=0)
    with torch.no_grad():
        assert torch.allclose(wrapped(x).last_hidden_state, vit(pixel_values=pixels).last_hidden_state, atol=TOL)
    assert sp.layers(wrapped) == sp.layers(vit)
    assert [n for n, _ in wrapped.named_modules()] == [n for n, _ in vit.named_modules()]
    data = sp.Data(test=TensorDataset(_images(12, 3, 36, 40), torch.zeros(12, dtype=torch.long)))
    block = next(n for n, _ in vit.named_modules() if n.endswith((".layer.0", "layers.0")))  # transformers' name
    assert sp.compare(wrapped, wrapped, block, data, "cka-linear")["cka-linear"].score == pytest.approx(1.0, abs=1e-9)
    clip = CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 28, "width": 28})
    pixels = clip(images=list(x), do_rescale=False, return_tensors="pt")["pixel_values"]
    assert torch.allclose(preprocess_images(x, preprocessing_of(vit, clip)), pixels, atol=TOL, rtol=0)


def test_configs_it_cannot_read_are_refused_naming_the_fix():
    with pytest.raises(ValueError, match="has no preprocessing of its own.*config="):
        sp.preprocessed(tiny_cnn())
    with pytest.raises(ValueError, match="unknown key 'resise'.*resize"):
        sp.preprocessed(tiny_cnn(), {"resise": 16})
    with pytest.raises(ValueError, match="interpolation 'bilinera'.*bilinear"):
        sp.preprocessed(tiny_cnn(), {"interpolation": "bilinera"})
    with pytest.raises(TypeError, match="not a preprocessing"):
        sp.preprocessed(tiny_cnn(), 3.5)
    with pytest.raises(ValueError, match=r"\(N, C, H, W\)"):
        sp.preprocessed(tiny_cnn(), TINY)(torch.rand(1, 16, 16))
    with pytest.raises(ValueError, match="already applies its preprocessing"):
        sp.preprocessed(sp.preprocessed(tiny_cnn(), TINY), TINY)
    assert preprocessing_of(tiny_cnn(), {}) == Preprocessing()  # every key optional: nothing applied
    assert "Preprocessing(resize=18" in repr(sp.preprocessed(tiny_cnn(), TINY))
