"""Models: a small CNN for quick experiments, and [`build_model`][similarity_plugins.apps.zoo.build_model] to turn a
spec string into a network (the spec grammar is written there)."""

from __future__ import annotations

import importlib
import inspect
import os
from typing import Any, Callable, Mapping

import numpy as np
import torch
from torch import nn

from ..utils.text import did_you_mean, parse_assignment

MODEL_SPEC_FORMS = (
    "small-cnn[?width=32]",
    "torchvision:NAME[?cifar_stem=true]     e.g. torchvision:resnet18",
    "timm:NAME[?key=value&...]              e.g. timm:vit_tiny_patch16_224?img_size=32&patch_size=4",
    "python:MODULE:CALLABLE[?key=value&...]",
    "hf:ID[@REVISION][?pooling=last&...]    a Hugging Face hub id or save_pretrained folder, e.g. hf:EleutherAI/pythia-70m",
    "any of these followed by @WEIGHTS.pt   e.g. small-cnn@runs/donor.pt",
)


def _conv_block(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, kernel_size=3, padding=1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=False),
        nn.MaxPool2d(2),
    )


class SmallCNN(nn.Module):
    """Four conv blocks (conv3x3 -> BatchNorm -> ReLU -> MaxPool2d(2)) named ``block1``..``block4``, then
    ``pool`` (global average), ``flatten`` and ``fc``.

    Input (B, in_channels, H, W) in [0, 1]; each block halves H and W and has ``width`` channels, so at
    32x32 the outputs are width x 16x16, 8x8, 4x4, 2x2 (block3 at width 32: 512 values, fewer than the 1,024
    input pixels). Output (B, num_classes) logits.
    """

    def __init__(self, in_channels: int = 1, num_classes: int = 10, width: int = 32) -> None:
        super().__init__()
        self.block1 = _conv_block(in_channels, width)
        self.block2 = _conv_block(width, width)
        self.block3 = _conv_block(width, width)
        self.block4 = _conv_block(width, width)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.block4(self.block3(self.block2(self.block1(x))))
        return self.fc(self.flatten(self.pool(x)))


# --------------------------------------------------------------------------- spec parsing


def _parse_query(query: str, spec: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for part in filter(None, query.split("&")):
        try:
            key, value = parse_assignment(part)
        except ValueError:
            raise ValueError(f"bad option {part!r} in model spec {spec!r}; write key=value pairs joined by '&'") from None
        out[key] = value
    return out


def split_model_spec(spec: str) -> tuple[str, str, dict[str, Any], str | None]:
    """Split ``SCHEME:NAME?k=v&...@WEIGHTS`` into ``(scheme, name, kwargs, weights_path_or_None)``; an ``hf:`` spec
    ``hf:ID[@REVISION][?k=v&...]`` gives its revision as ``kwargs["revision"]`` and no weights."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError("empty model spec; valid forms:\n  " + "\n  ".join(MODEL_SPEC_FORMS))
    if spec.strip().partition(":")[0].strip().lower() == "hf":
        return _split_hf_spec(spec)
    body, weights = spec.strip(), None
    if "@" in body:
        body, _, weights = body.rpartition("@")
        if not weights:
            raise ValueError(f"model spec {spec!r} ends in '@' without a weights path")
    body, _, query = body.partition("?")
    kwargs = _parse_query(query, spec)
    scheme, _, name = body.partition(":")
    return scheme.strip().lower(), name.strip(), kwargs, weights


def _split_hf_spec(spec: str) -> tuple[str, str, dict[str, Any], None]:
    """``hf:ID[@REVISION][?k=v&...]`` (the query may also come before ``@REVISION``); an existing folder whose name
    holds ``@`` is the folder."""
    body = spec.strip().partition(":")[2]
    name, _, query = body.partition("?")
    revision = None
    if "@" in query:
        query, _, revision = query.rpartition("@")
    elif "@" in name and not os.path.isdir(name):
        name, _, revision = name.rpartition("@")
    kwargs = _parse_query(query, spec)
    if revision is not None:
        if not revision.strip():
            raise ValueError(f"model spec {spec!r} ends in '@' without a revision (a branch, tag or commit)")
        if "revision" in kwargs:
            raise ValueError(f"model spec {spec!r} gives the revision twice (@{revision} and ?revision=); give it once")
        kwargs["revision"] = revision.strip()
    return "hf", name.strip(), kwargs, None


# --------------------------------------------------------------------------- builders


def apply_cifar_stem(model: nn.Module, name: str) -> None:
    """Give a torchvision ResNet ``model`` the CIFAR stem in place: a 3x3 stride-1 ``conv1``, no max-pool."""
    conv1 = getattr(model, "conv1", None)
    if not isinstance(conv1, nn.Conv2d) or not hasattr(model, "maxpool"):
        raise ValueError(f"cifar_stem=true is for torchvision ResNets (conv1 + maxpool); {name!r} has no such stem")
    model.conv1 = nn.Conv2d(conv1.in_channels, conv1.out_channels, kernel_size=3, stride=1, padding=1, bias=False)
    model.maxpool = nn.Identity()


def _build_torchvision(name: str, kwargs: dict[str, Any], num_classes: int | None, in_channels: int | None) -> nn.Module:
    import torchvision.models as tvm

    available = tvm.list_models()
    if name not in available:
        raise ValueError(f"unknown torchvision model {name!r}{did_you_mean(name, available)} "
                         "(see torchvision.models.list_models())")
    if in_channels not in (None, 3):
        raise ValueError(f"torchvision models take 3-channel images; got in_channels={in_channels}. "
                         "Use 3-channel data (repeat a grey channel) or small-cnn / timm (in_chans)")
    cifar_stem = bool(kwargs.pop("cifar_stem", False))
    if num_classes is not None:
        kwargs["num_classes"] = num_classes
    if kwargs.pop("weights", None) is not None:
        raise ValueError("pretrained torchvision weights would be downloaded; load a local file with @PATH instead")
    model = tvm.get_model(name, weights=None, **kwargs)
    if cifar_stem:
        apply_cifar_stem(model, name)
    return model


def _build_timm(name: str, kwargs: dict[str, Any], num_classes: int | None, in_channels: int | None) -> nn.Module:
    import timm

    if not timm.is_model(name):
        raise ValueError(f"unknown timm model {name!r}{did_you_mean(name, timm.list_models())} (see timm.list_models())")
    if kwargs.pop("pretrained", False):
        raise ValueError("pretrained timm weights would be downloaded; load a local file with @PATH instead")
    if num_classes is not None:
        kwargs["num_classes"] = num_classes
    if in_channels is not None:
        kwargs["in_chans"] = in_channels
    return timm.create_model(name, pretrained=False, **kwargs)


def _accepts(fn: Callable, name: str) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def _build_python(target: str, kwargs: dict[str, Any], num_classes: int | None, in_channels: int | None) -> nn.Module:
    module_name, _, attr = target.rpartition(":")
    if not module_name or not attr:
        raise ValueError(f"python spec needs python:MODULE:CALLABLE, got python:{target}")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"cannot import module {module_name!r} for python:{target}: {exc}") from exc
    for part in attr.split("."):
        if not hasattr(obj, part):
            names = [n for n in dir(obj) if not n.startswith("_")]
            raise ValueError(f"{module_name} has no attribute {attr!r}{did_you_mean(part, names)}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(f"python:{target} is not callable")
    for key, value in (("num_classes", num_classes), ("in_channels", in_channels)):
        if value is not None and key not in kwargs and _accepts(obj, key):
            kwargs[key] = value
    model = obj(**kwargs)
    if not isinstance(model, nn.Module):
        raise TypeError(f"python:{target} returned {type(model).__name__}, not a torch.nn.Module")
    return model


def _build_small_cnn(name: str, kwargs: dict[str, Any], num_classes: int | None, in_channels: int | None) -> nn.Module:
    if name:
        raise ValueError(f"small-cnn takes no name (got small-cnn:{name}); options go after '?', e.g. small-cnn?width=16")
    if num_classes is not None:
        kwargs["num_classes"] = num_classes
    if in_channels is not None:
        kwargs["in_channels"] = in_channels
    return SmallCNN(**kwargs)


def _build_hf(name: str, kwargs: dict[str, Any], num_classes: int | None, in_channels: int | None) -> nn.Module:
    """A transformers model from a hub id or a ``save_pretrained`` folder (its own head; the data's classes are not
    used), wrapped by `adapters.hf.hf` with the query's options (pooling, exclude_special, view, revision, ...)."""
    from ..adapters.hf import hf

    valid = [p for p in inspect.signature(hf).parameters if p not in ("source", "tokenizer", "processor")]
    for key in kwargs:
        if key not in valid:
            raise ValueError(f"unknown option {key!r} for hf:ID{did_you_mean(key, valid)}; valid: {', '.join(valid)}")
    return hf(name, **kwargs)


_BUILDERS: dict[str, Callable[..., nn.Module]] = {
    "small-cnn": _build_small_cnn,
    "torchvision": _build_torchvision,
    "timm": _build_timm,
    "python": _build_python,
    "hf": _build_hf,
}


# --------------------------------------------------------------------------- weights


def _extract_state_dict(obj: Any, path: str) -> dict[str, torch.Tensor]:
    if isinstance(obj, Mapping):
        for key in ("state_dict", "model"):
            if isinstance(obj.get(key), Mapping):
                obj = obj[key]
                break
    if not isinstance(obj, Mapping) or not obj or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        kind = type(obj).__name__
        raise ValueError(
            f"{path} is not a state dict (got {kind}); save one with torch.save(model.state_dict(), path) "
            "or similarity_plugins.apps.training.save_weights(model, path)"
        )
    state = dict(obj)
    if all(k.startswith("module.") for k in state):
        state = {k[len("module."):]: v for k, v in state.items()}
    return state


def load_weights(model: nn.Module, path: str | os.PathLike) -> nn.Module:
    """Load a state dict file into ``model`` (in place, strict) and return it.

    Raises ``FileNotFoundError`` if the file is missing, ``ValueError`` if it is not a state dict or its keys
    or shapes do not match the model (listing the first few missing / unexpected / mismatched keys).
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"weights file {path} not found")
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # unpickling errors, zip errors, arbitrary objects refused by weights_only
        raise ValueError(f"{path} is not a loadable state dict ({type(exc).__name__}: {str(exc)[:200]})") from exc
    state = _extract_state_dict(obj, path)
    own = model.state_dict()
    missing = [k for k in own if k not in state]
    unexpected = [k for k in state if k not in own]
    mismatched = [f"{k}: file {tuple(state[k].shape)} vs model {tuple(own[k].shape)}"
                  for k in own if k in state and state[k].shape != own[k].shape]
    if missing or unexpected or mismatched:
        def few(items: list[str]) -> str:
            return ", ".join(items[:5]) + (f" (+{len(items) - 5} more)" if len(items) > 5 else "")
        parts = []
        if missing:
            parts.append(f"{len(missing)} missing keys: {few(missing)}")
        if unexpected:
            parts.append(f"{len(unexpected)} unexpected keys: {few(unexpected)}")
        if mismatched:
            parts.append(f"{len(mismatched)} shape mismatches: {few(mismatched)}")
        raise ValueError(f"weights in {path} do not match the model {type(model).__name__}: " + "; ".join(parts)
                         + ". Check the model spec (architecture, num_classes, options) the weights were saved from")
    model.load_state_dict(state, strict=True)
    return model


# --------------------------------------------------------------------------- public entry point


def build_model(spec: str, *, num_classes: int | None = None, in_channels: int | None = None,
                seed: int | None = None, **kwargs: Any) -> nn.Module:
    """Build a network from ``spec`` and load ``@WEIGHTS`` if given.

    Spec grammar (as typed on the command line):

    ```text
    SCHEME:NAME[?key=value&key=value][@path/to/weights.pt]

    small-cnn                       SmallCNN (keys: width, in_channels, num_classes)
    torchvision:NAME                torchvision.models.get_model(NAME, weights=None, ...)
                                    (ResNets accept cifar_stem=true: 3x3 stride-1 conv1, no maxpool)
    timm:NAME                       timm.create_model(NAME, pretrained=False, ...), e.g.
                                    timm:vit_tiny_patch16_224?img_size=32&patch_size=4
    python:MODULE:CALLABLE          MODULE.CALLABLE(**kwargs) must return an nn.Module
    hf:ID[@REVISION]                a transformers model: a hub id (EleutherAI/pythia-70m, loaded by
                                    transformers with your cache, token and HF_HUB_OFFLINE; @REVISION: a
                                    branch, tag or commit) or a save_pretrained folder, with its tokenizer or
                                    image processor (keys: pooling, exclude_special, view, padding_side,
                                    max_length, preprocess, dtype, device, local_files_only, tower)
    ```

    Values in the query are read by the one KEY=VALUE grammar of ``--option`` (`similarity_plugins.utils.text`):
    JSON numbers, lists and true/false/null, yes/no/on/off, none, else strings. ``@PATH`` loads a
    state dict with ``torch.load(PATH, weights_only=True)`` (a raw state dict, or a dict holding it under
    "state_dict" or "model"; a "module." prefix from DataParallel is stripped); for ``hf:`` it names the revision.
    Nothing is downloaded but a hub id you name, through transformers' own cache.

    ``num_classes``/``in_channels`` are passed to the builder when given (for ``python:`` only if the callable
    accepts them); extra ``kwargs`` merge with (and override) the ``?key=value`` options. The model is
    returned in eval mode on the CPU. ``seed`` (an integer): if given, the initial weights are drawn with the
    global generator seeded by it inside a fork (the caller's RNG state is left as it was), so the same seed
    gives the same network. Raises ``ValueError`` for a non-integer seed, a spec that does not resolve (with
    close names suggested), a file that is not a state dict, or weights that do not match the model.
    """
    scheme, name, options, weights = split_model_spec(spec)
    options.update(kwargs)
    if scheme not in _BUILDERS:
        raise ValueError(
            f"unknown model scheme {scheme!r} in {spec!r}{did_you_mean(scheme, list(_BUILDERS))}; valid forms:\n  "
            + "\n  ".join(MODEL_SPEC_FORMS)
        )
    if scheme != "small-cnn" and not name:
        raise ValueError(f"model spec {spec!r} needs a name after '{scheme}:'")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))):
        raise ValueError(f"seed must be an integer (it fixes the initial weights) or None, got {seed!r}")
    if seed is None:
        model = _BUILDERS[scheme](name, options, num_classes, in_channels)
    else:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(seed))
            model = _BUILDERS[scheme](name, options, num_classes, in_channels)
    if weights is not None:
        load_weights(model, weights)
    return model.eval()
