"""Which layers of a network are its cut points: ``layers(model)``, the canonical stitchable layers in forward
order, and the check that a layer name exists.

- torchvision ResNet: ``maxpool``, every residual block (``layer1.0`` ... ``layer4.1``), ``avgpool``;
- torchvision VGG: every ReLU and MaxPool of ``features``, ``avgpool``, the ReLUs of ``classifier``;
- timm VisionTransformer: ``patch_embed``, every block (``blocks.0`` ...), ``norm``;
- a wrapped transformers model (`hf`): the embedding output and every block's output;
- any ``nn.Sequential`` and any other module tree: the root's children except the last (and
  except Flatten, Identity and Dropout, which repeat the previous layer's values).

Every family uses these lists (a CKA sweep, a grid's ``layers="all"``, a stitch); the module knows
architectures by their structure, never by class name, so look-alikes (a timm ResNet) get the same list.
"""

from __future__ import annotations

from torch import nn

from ..utils.text import did_you_mean
from .wrapped import WrappedModel


class LayerNotFound(ValueError):
    """A layer name that the model does not have (the message lists the valid ones)."""


def _is_resnet(model: nn.Module) -> bool:
    return all(hasattr(model, a) for a in ("conv1", "layer1", "layer2", "layer3", "layer4", "fc"))


def _is_vgg(model: nn.Module) -> bool:
    return isinstance(getattr(model, "features", None), nn.Sequential) and isinstance(
        getattr(model, "classifier", None), nn.Sequential
    )


def _is_vit(model: nn.Module) -> bool:
    return isinstance(getattr(model, "blocks", None), nn.Sequential) and hasattr(model, "patch_embed")


def _canonical_layers(model: nn.Module) -> list[str]:
    if isinstance(model, WrappedModel):  # a wrapper that knows its model's cut points (`similarity_plugins.hf`)
        return model.canonical_layers()
    if _is_resnet(model):
        names = ["maxpool"] if hasattr(model, "maxpool") else []
        for stage in ("layer1", "layer2", "layer3", "layer4"):
            names += [f"{stage}.{child}" for child, _ in getattr(model, stage).named_children()]
        return names + (["avgpool"] if hasattr(model, "avgpool") else [])
    if _is_vgg(model):
        names = [f"features.{n}" for n, m in model.features.named_children() if isinstance(m, (nn.ReLU, nn.MaxPool2d))]
        if hasattr(model, "avgpool"):
            names.append("avgpool")
        return names + [f"classifier.{n}" for n, m in model.classifier.named_children() if isinstance(m, nn.ReLU)]
    if _is_vit(model):
        names = ["patch_embed"] + [f"blocks.{n}" for n, _ in model.blocks.named_children()]
        return names + (["norm"] if isinstance(getattr(model, "norm", None), nn.Module) else [])
    children = list(model.named_children())[:-1]
    # parameter-free reshapes and no-ops repeat the previous layer's values; leave them out
    return [n for n, m in children if not isinstance(m, (nn.Flatten, nn.Identity, nn.Dropout))]


def layers(model: nn.Module) -> list[str]:
    """Stitchable layer names of ``model`` in forward order (``named_modules()`` names).

    The last entry is the penultimate representation (the layer that feeds the classifier), so the
    list never contains the output layer itself. Returns a new list.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"expected a torch.nn.Module, got {type(model).__name__}")
    return list(_canonical_layers(model))


def check_layer(model: nn.Module, layer: str) -> None:
    """Raise `LayerNotFound` naming the closest names and the canonical layers unless ``layer`` is a module
    of ``model`` (any non-root name from ``named_modules()``)."""
    names = dict(model.named_modules())
    if layer in names and layer != "":
        return
    valid = layers(model)
    raise LayerNotFound(
        f"layer {layer!r} not found in {type(model).__name__}{did_you_mean(str(layer), names, cutoff=0.6)}; "
        f"available: {', '.join(valid)} (any clean-cut module name from named_modules() also works)"
    )
