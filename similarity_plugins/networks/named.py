"""The models and layers of a grid (``compare_grid``, ``extract``, a store-backed grid) in one form: models as
``{name: module}``, layers as ``{model name: [layer, ...]}``, every name checked."""

from __future__ import annotations

from typing import Any, Mapping

from torch import nn

from ..utils.text import did_you_mean
from .layer_lists import check_layer


def as_models(models: Any) -> dict[str, nn.Module]:
    """``models`` as ``{name: module}`` (a list gets the names ``m0``, ``m1``, ...)."""
    if isinstance(models, nn.Module):
        models = [models]
    if isinstance(models, Mapping):
        named = {}
        for key, model in models.items():
            if str(key) in named:
                other = next(k for k in models if str(k) == str(key))
                raise ValueError(f"models {other!r} and {key!r} have the same name {str(key)!r} once written as text; "
                                 "give each model its own name")
            named[str(key)] = model
    elif isinstance(models, (list, tuple)):
        named = {f"m{i}": m for i, m in enumerate(models)}
    else:
        raise TypeError(f"models must be a dict name -> torch.nn.Module or a list of modules, got {type(models).__name__}")
    if not named:
        raise ValueError("models is empty; give at least one model (one model: its own layer x layer grid)")
    for name, model in named.items():
        if not isinstance(model, nn.Module):
            raise TypeError(f"model {name!r} must be a torch.nn.Module, got {type(model).__name__}")
    return named


def as_layers(layers: Any, models: dict[str, nn.Module]) -> dict[str, list[str]]:
    """``layers`` as ``{model name: [layer, ...]}``, every name checked against its model."""
    if isinstance(layers, str):
        layers = [layers]
    if isinstance(layers, Mapping):
        layers = {str(k): v for k, v in layers.items()}  # model names are text, as in `as_models`
        unknown = [k for k in layers if k not in models]
        if unknown:
            raise ValueError(f"layers names unknown model {unknown[0]!r}{did_you_mean(str(unknown[0]), models)}; "
                             f"models: {', '.join(models)}")
        missing = [m for m in models if m not in layers]
        if missing:
            raise ValueError(f"layers has no entry for model(s) {', '.join(map(repr, missing))}; give a list for "
                             "every model, or one list used for all")
        per = {m: [layers[m]] if isinstance(layers[m], str) else list(layers[m]) for m in models}
    elif isinstance(layers, (list, tuple)):
        per = {m: list(layers) for m in models}
    else:
        raise TypeError(f"layers must be a list of layer names or a dict model -> list, got {type(layers).__name__}")
    for name, names in per.items():
        if not names:
            raise ValueError(f"model {name!r} has no layers; give at least one")
        if len(set(names)) != len(names):
            raise ValueError(f"model {name!r} lists a layer twice: {names}")
        for layer in names:
            if not isinstance(layer, str):
                raise TypeError(f"layer names must be strings, got {layer!r} for model {name!r}")
            try:
                check_layer(models[name], layer)
            except ValueError as exc:
                raise type(exc)(f"model {name!r}: {exc}") from None
    return per
