"""A model's own preprocessing (resize, centre crop, normalisation) as differentiable tensor operations inside the
model: `preprocessed(model, config)` takes images in [0, 1] of any size, so every model of a comparison reads
the same pixels, each through its own preprocessing, and IRIs are still searched in pixel space.

The preprocessing comes from timm's ``pretrained_cfg`` (`timm.data.resolve_data_config`), a torchvision
weights' ``transforms()``, a Hugging Face image processor, or an explicit dict (`CONFIG_KEYS`). The model
returned shares the wrapped model's modules, parameters and buffers and has the same module names, so layer
names stay the wrapped model's; the wrapped model itself is not changed.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import torch
import torch.fx
import torch.nn.functional as F
from torch import nn

from ..networks.wrapped import ReadsSamples
from ..utils.text import did_you_mean
from .reading import wrapper_reading

#: the keys of an explicit ``config`` dict
CONFIG_KEYS = ("resize", "crop", "mean", "std", "interpolation")
#: the resampling modes (torch.nn.functional.interpolate's; bilinear and bicubic antialiased, as torchvision)
INTERPOLATIONS = ("bilinear", "bicubic", "nearest", "nearest-exact")
_PIL_RESAMPLE = {0: "nearest", 2: "bilinear", 3: "bicubic"}  # PIL's and Hugging Face's resample numbers


class Preprocessing(NamedTuple):
    """What `preprocess_images` does, in order: resize, centre crop, normalise (a step that is None is skipped).

    ``resize``: an int (the shorter side to this many pixels, the aspect ratio kept, as torchvision's
    ``Resize(int)``) or ``(height, width)``; ``crop``: ``(height, width)`` of the centre crop; ``mean``,
    ``std``: per-channel values in [0, 1] units; ``interpolation``: one of `INTERPOLATIONS`.
    """

    resize: int | tuple[int, int] | None = None
    crop: tuple[int, int] | None = None
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    interpolation: str = "bilinear"


def _resized_size(height: int, width: int, resize: int | tuple[int, int]) -> tuple[int, int]:
    """The output size of torchvision's ``Resize(resize)`` on a ``height x width`` image."""
    if not isinstance(resize, int):
        return int(resize[0]), int(resize[1])
    short, long = (width, height) if width <= height else (height, width)
    new_short, new_long = resize, int(resize * long / short)
    return (new_long, new_short) if width <= height else (new_short, new_long)


def _centre_crop(x: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """torchvision's ``center_crop``: zero padding first when the image is smaller than the crop."""
    h, w = x.shape[-2:]
    if height > h or width > w:
        left, top = max(0, (width - w) // 2), max(0, (height - h) // 2)
        x = F.pad(x, [left, max(0, (width - w + 1) // 2), top, max(0, (height - h + 1) // 2)])
        h, w = x.shape[-2:]
    top, left = int(round((h - height) / 2.0)), int(round((w - width) / 2.0))
    return x[..., top:top + height, left:left + width]


def preprocess_images(x: torch.Tensor, spec: Preprocessing) -> torch.Tensor:
    """``spec``'s resize, centre crop and normalisation of a batch of images, differentiable in ``x``.

    Args:
        x: (N, C, H, W) float images in [0, 1], any H and W.
        spec: the steps (`Preprocessing`).

    Returns:
        (N, C, h, w) in the dtype and on the device of ``x``: (h, w) the crop's size (or the resized size).
    """
    if x.dim() != 4:
        raise ValueError(f"a preprocessed model takes a batch of images (N, C, H, W), got shape {tuple(x.shape)}")
    if spec.resize is not None:
        size = _resized_size(int(x.shape[-2]), int(x.shape[-1]), spec.resize)
        if size != tuple(x.shape[-2:]):
            smooth = spec.interpolation in ("bilinear", "bicubic")
            x = F.interpolate(x, size=size, mode=spec.interpolation, align_corners=False if smooth else None,
                              antialias=smooth)
    if spec.crop is not None:
        x = _centre_crop(x, int(spec.crop[0]), int(spec.crop[1]))
    if spec.mean is not None:
        x = x - torch.tensor(spec.mean, dtype=x.dtype, device=x.device).view(1, -1, 1, 1)
    if spec.std is not None:
        x = x / torch.tensor(spec.std, dtype=x.dtype, device=x.device).view(1, -1, 1, 1)
    return x


torch.fx.wrap("preprocess_images")  # one opaque call in a traced graph (its sizes depend on the input's shape)


# -- where the preprocessing comes from ------------------------------------------------------------------------


def _pair(value: Any, what: str) -> tuple[int, int]:
    if isinstance(value, int) and not isinstance(value, bool):
        return value, value
    if isinstance(value, (list, tuple)) and len(value) == 1:
        return int(value[0]), int(value[0])
    if isinstance(value, (list, tuple)) and len(value) == 2:
        return int(value[0]), int(value[1])
    raise ValueError(f"preprocessing {what}: expected an int or (height, width), got {value!r}")


def _interpolation(value: Any) -> str:
    name = getattr(value, "value", value)  # torchvision's InterpolationMode and PIL's Resampling are enums
    if isinstance(name, int) and not isinstance(name, bool):
        if name not in _PIL_RESAMPLE:
            raise ValueError(f"preprocessing interpolation: resample {name} (PIL numbering) has no tensor "
                             f"equivalent; one of {_PIL_RESAMPLE} or an explicit config with interpolation in "
                             f"{INTERPOLATIONS}")
        name = _PIL_RESAMPLE[name]
    name = str(name).lower()
    if name not in INTERPOLATIONS:
        raise ValueError(f"preprocessing interpolation {name!r} is not supported{did_you_mean(name, INTERPOLATIONS)}; "
                         f"one of {', '.join(INTERPOLATIONS)}")
    return name


def _from_dict(config: dict) -> Preprocessing:
    unknown = [k for k in config if k not in CONFIG_KEYS]
    if unknown:
        raise ValueError(f"preprocessing config: unknown key {unknown[0]!r}{did_you_mean(str(unknown[0]), CONFIG_KEYS)};"
                         f" the keys: {', '.join(CONFIG_KEYS)} (or a timm data config with input_size)")
    resize = config.get("resize")
    if resize is not None and not (isinstance(resize, int) and not isinstance(resize, bool)):
        resize = _pair(resize, "resize")
    crop = _pair(config["crop"], "crop") if config.get("crop") is not None else None
    mean, std = config.get("mean"), config.get("std")
    if std is not None and any(float(s) <= 0 for s in std):
        raise ValueError(f"preprocessing std must be positive, got {std!r}")
    return Preprocessing(resize, crop, tuple(map(float, mean)) if mean is not None else None,
                         tuple(map(float, std)) if std is not None else None,
                         _interpolation(config.get("interpolation", "bilinear")))


def _from_timm(cfg: dict) -> Preprocessing:
    """timm's evaluation transform (``transforms_imagenet_eval``) of a resolved data config."""
    size = tuple(cfg["input_size"][-2:])
    crop_pct = cfg.get("crop_pct") or 0.875  # timm's DEFAULT_CROP_PCT
    mode = cfg.get("crop_mode") or "center"
    scale = tuple(math.floor(s / crop_pct) for s in size)
    if mode == "squash":
        resize: Any = scale
    elif mode == "center" and scale[0] == scale[1]:
        resize = scale[0]
    else:
        raise ValueError(f"timm crop_mode {mode!r} with input size {size} is not supported; pass an explicit "
                         f"config dict with keys {', '.join(CONFIG_KEYS)}")
    return Preprocessing(resize, (int(size[0]), int(size[1])), tuple(map(float, cfg["mean"])),
                         tuple(map(float, cfg["std"])), _interpolation(cfg.get("interpolation", "bilinear")))


def _from_torchvision(t: Any) -> Preprocessing:
    """A torchvision weights' ``transforms()`` (``ImageClassification``): resize, crop, normalise."""
    resize = list(t.resize_size)
    return Preprocessing(resize[0] if len(resize) == 1 else _pair(resize, "resize_size"), _pair(list(t.crop_size), "crop_size"),
                         tuple(map(float, t.mean)), tuple(map(float, t.std)), _interpolation(t.interpolation))


def _hf_size(size: Any, what: str) -> int | tuple[int, int]:
    if isinstance(size, int):
        return size
    size = dict(size) if not isinstance(size, dict) else size
    if "height" in size and "width" in size:
        return int(size["height"]), int(size["width"])
    if "shortest_edge" in size and not size.get("longest_edge"):
        return int(size["shortest_edge"])
    raise ValueError(f"Hugging Face image processor {what} {size!r} is not supported (height/width or "
                     f"shortest_edge); pass an explicit config dict with keys {', '.join(CONFIG_KEYS)}")


def _from_hf(p: Any) -> Preprocessing:
    """A Hugging Face image processor: ``do_resize``/``size``/``resample``, ``do_center_crop``/``crop_size``,
    ``do_normalize``/``image_mean``/``image_std`` (its ``do_rescale`` maps 0..255 to the [0, 1] taken here)."""
    resize = _hf_size(p.size, "size") if getattr(p, "do_resize", False) else None
    crop = getattr(p, "crop_size", None) if getattr(p, "do_center_crop", False) else None
    normalise = getattr(p, "do_normalize", False)
    return Preprocessing(resize, _pair(_hf_size(crop, "crop_size"), "crop_size") if crop is not None else None,
                         tuple(map(float, p.image_mean)) if normalise else None,
                         tuple(map(float, p.image_std)) if normalise else None,
                         _interpolation(getattr(p, "resample", 2)))


def preprocessing_of(model: nn.Module, config: Any = None) -> Preprocessing:
    """The `Preprocessing` of ``model`` from ``config``, or from the model's own timm ``pretrained_cfg``.

    Args:
        model: the model (read only for its timm ``pretrained_cfg`` when ``config`` is None).
        config: None, a `Preprocessing`, a dict with keys `CONFIG_KEYS` or a timm data config (``input_size``,
            ``mean``, ``std``, ``crop_pct``, ``interpolation``), a torchvision weights enum or its
            ``transforms()``, or a Hugging Face image processor.

    Returns:
        The `Preprocessing`. ``ValueError`` when none can be found or a value is not supported, naming the fix.
    """
    if isinstance(config, Preprocessing):
        return config
    if config is None:
        if getattr(model, "pretrained_cfg", None) is None:
            raise ValueError(f"{type(model).__name__} has no preprocessing of its own (a timm model's pretrained_cfg); "
                             "pass config=: a torchvision weights' transforms(), a Hugging Face image processor or "
                             f"a dict with keys {', '.join(CONFIG_KEYS)}")
        from timm.data import resolve_data_config

        return _from_timm(resolve_data_config({}, model=model))
    if isinstance(config, dict):
        return _from_timm(config) if "input_size" in config else _from_dict(config)
    if hasattr(config, "transforms") and hasattr(config, "meta"):  # a torchvision weights enum member
        config = config.transforms()
    if all(hasattr(config, a) for a in ("crop_size", "resize_size", "mean", "std")):
        return _from_torchvision(config)
    if all(hasattr(config, a) for a in ("image_mean", "image_std", "size")):
        return _from_hf(config)
    raise TypeError(f"config of type {type(config).__name__} is not a preprocessing; pass a torchvision weights' "
                    f"transforms(), a Hugging Face image processor, a timm data config or a dict with keys "
                    f"{', '.join(CONFIG_KEYS)}")


# -- the model that applies it ---------------------------------------------------------------------------------

_CLASSES: dict[type, type] = {}


def _preprocessed_class(base: type) -> type:
    """The subclass of ``base`` whose ``forward(x)`` is ``base.forward(preprocess_images(x, preprocessing))``."""
    if base not in _CLASSES:
        def forward(self, x: torch.Tensor) -> Any:
            return base.forward(self, preprocess_images(x, self._sp_preprocessing))

        def __reduce_ex__(self, protocol: int) -> tuple:  # the class is made at run time: pickle the model and spec
            return preprocessed, (_plain(self, base), self._sp_preprocessing)

        def extra_repr(self) -> str:
            own = base.extra_repr(self)
            return f"{own}, {self._sp_preprocessing!r}" if own else repr(self._sp_preprocessing)

        reads = issubclass(base, ReadsSamples)

        def reading_settings(self) -> dict[str, Any]:  # ReadsSamples: the preprocessing changes the rows
            inherited = base.reading_settings(self) if reads else {}
            return {**inherited, **wrapper_reading({"sp_preprocessing": self._sp_preprocessing})}

        doc = f"{base.__name__} taking images in [0, 1] of any size, its own preprocessing applied first."
        _CLASSES[base] = type(f"Preprocessed{base.__name__}", (base,), {
            "forward": forward, "__reduce_ex__": __reduce_ex__, "extra_repr": extra_repr,
            "reading_settings": reading_settings, "__module__": __name__, "__doc__": doc})
    return _CLASSES[base]


def _plain(view: nn.Module, base: type) -> nn.Module:
    """A ``base`` module sharing ``view``'s tables, without the preprocessing (what pickling stores)."""
    plain = base.__new__(base)
    plain.__dict__.update({k: v for k, v in view.__dict__.items() if k != "_sp_preprocessing"})
    return plain


def preprocessed(model: nn.Module, config: Any = None) -> nn.Module:
    """``model`` taking images in [0, 1] of any size, with its own resize, centre crop and normalisation applied
    inside it as differentiable tensor operations.

    Args:
        model: an image model (a timm model, a torchvision model, a Hugging Face vision model whose forward takes
            ``pixel_values`` first, any ``nn.Module`` taking (N, C, H, W)).
        config: where the preprocessing comes from (see `preprocessing_of`): None (the timm model's own
            ``pretrained_cfg``), a torchvision weights enum or its ``transforms()``, a Hugging Face image
            processor, a timm data config, or a dict ``{"resize", "crop", "mean", "std", "interpolation"}``
            (``resize``: an int for the shorter side or ``(height, width)``; ``crop``: an int or
            ``(height, width)``; every key optional).

    Returns:
        A module of a subclass of ``type(model)`` that shares the model's submodules, parameters and buffers
            (same ``named_modules()`` names, so [`layers`][similarity_plugins.layers] and every layer name are the
            model's): ``forward(x)`` with ``x`` (N, C, H, W) in [0, 1] runs the preprocessing, then the model. The
            model itself is not changed. ``ValueError``/``TypeError`` for a config it cannot read, naming the fix.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"preprocessed takes a torch.nn.Module, got {type(model).__name__}")
    if type(model) in _CLASSES.values():
        raise ValueError(f"this {type(model).__name__} already applies its preprocessing "
                         f"({model._sp_preprocessing!r}); pass the model itself to preprocessed")
    spec = preprocessing_of(model, config)
    view = _preprocessed_class(type(model)).__new__(_preprocessed_class(type(model)))
    for key, value in model.__dict__.items():  # the module's own tables copied, their entries shared
        view.__dict__[key] = value.copy() if isinstance(value, (dict, set)) else value
    view._sp_preprocessing = spec
    return view
