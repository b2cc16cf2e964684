"""``compare``: ask every selected metric plugin for a score at every requested layer."""

from __future__ import annotations

import copy
import math
import numbers
import time
import traceback
from typing import Any, Iterable, Sequence

import torch
from torch import nn
from tqdm.auto import tqdm

from .context import Context
from .contract import missing_splits
from .data import Data
from .manager import get_plugin_manager
from .networks import _check_layer, model_device, preserved
from .ranks import agree_on_result, check_ranks_agree
from .registry import options_for_metrics, select_metrics
from .repeats import check_repeats, is_deterministic, run_repeated
from .results import LayerPair, Report, SimilarityResult, as_layer_pair
from .rng import isolated_rng, seed_all

LayerSpec = "str | tuple[str, str] | LayerPair"


def as_layer_list(layer: Any) -> list[LayerPair]:
    """Normalise one layer, one pair, or a list of them (a sweep) to a list of :class:`LayerPair`."""
    if isinstance(layer, (str, LayerPair)):
        return [as_layer_pair(layer)]
    if isinstance(layer, tuple) and len(layer) == 2 and all(isinstance(s, str) for s in layer):
        return [as_layer_pair(layer)]
    if isinstance(layer, (list, tuple)) and layer:
        return [as_layer_pair(item) for item in layer]
    raise TypeError(f"layer must be a module name, a (front_layer, end_layer) pair or a list of them; got {layer!r}")


def _place(model: nn.Module, device: torch.device | None, role: str) -> nn.Module:
    """The model itself when it is on ``device``; otherwise a copy moved there (the user's is never moved)."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"{role} must be a torch.nn.Module, got {type(model).__name__}")
    if device is None or model_device(model) == device:
        return model
    return copy.deepcopy(model).to(device)


def _to_result(value: Any, metric: str, layer: str) -> SimilarityResult:
    if isinstance(value, SimilarityResult):
        value.metric = value.metric or metric
        value.layer = value.layer or layer
        return value
    if isinstance(value, dict) and "score" in value:
        return SimilarityResult(metric, _as_float(value["score"]), dict(value.get("details", {})), layer=layer)
    return SimilarityResult(metric, _as_float(value), {}, layer=layer)


def _as_float(value: Any) -> float | None:
    if value is None:
        raise TypeError("the plugin returned None; a metric must return a float, a dict with 'score', or a SimilarityResult")
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise TypeError(f"the plugin returned a tensor of shape {tuple(value.shape)}; return one number")
        return float(value.item())
    if isinstance(value, numbers.Real) or hasattr(value, "__float__"):
        return float(value)
    raise TypeError(f"the plugin returned {type(value).__name__}; return a float, a dict with 'score', or a SimilarityResult")


def _short_traceback(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)[-3:]
    return " <- ".join(f"{f.name} ({f.filename.rsplit('/', 1)[-1]}:{f.lineno})" for f in reversed(frames))


def compare(
    front: nn.Module,
    end: nn.Module,
    layer: "str | tuple[str, str] | Sequence[str | tuple[str, str]]",
    data: Data | None = None,
    metrics: "str | Iterable[str] | None" = None,
    *,
    seed: int = 0,
    device: "str | torch.device | None" = None,
    options: dict | None = None,
    progress: bool = False,
    context: Context | None = None,
    repeats: int = 1,
) -> Report:
    """Score how similar ``front`` (network A) and ``end`` (network B) are, with every selected metric.

    - ``layer``: a module name present in both models, a pair ``(front_layer, end_layer)``, or a list
      of those (a layer sweep: one row per metric and layer).
    - ``data``: :class:`Data` with ``train`` (fitting stitches, seeding IRIs) and ``test`` (scoring).
    - ``metrics``: names or wildcards (``"stitch-*"``), a comma-separated string, or ``None`` for all.
    - ``seed``: every random choice derives from it. ``device``: where the donors run (a copy is made
      when a model lives elsewhere; the user's models are never moved). ``options``: global options,
      plus per-metric dicts under metric names, e.g. ``{"epochs": 5, "stitch-dm": {"lr": 1e-2}}``.
    - ``context``: reuse the caches of an earlier call (same models and data) to avoid recomputing;
      the context itself is not changed (this call works on a child that shares its memo).
    - ``repeats``: run every metric with seeds ``seed .. seed+repeats-1`` (stitch init and order, IRI
      starts); the score is their mean, ``details["scores"]`` the values, ``details["seed_ci95"]`` a 95%
      interval over seeds (see :mod:`~.repeats`). Deterministic metrics (CKA) run once.

    Returns a :class:`Report`. A metric that raises gets a row with its error; the others still run.
    Unknown layers, metrics and options raise at once, before any work, naming the valid ones
    (:class:`~similarity_plugins.core.contract.UnknownOption` for an option no selected metric takes).
    A metric whose ``needs`` names a split that ``data`` lacks gets an error row without running.
    Donor flags (``training``, ``requires_grad``) are restored afterwards whatever the plugins do, and
    the global torch, NumPy and ``random`` generators are as they were (each metric runs seeded with
    ``seed`` inside forked generators).
    """
    repeats = check_repeats(repeats)
    data = data if data is not None else Data()
    if not isinstance(data, Data):
        raise TypeError(f"data must be a similarity_plugins.Data(train=..., test=...), got {type(data).__name__}")
    pairs = as_layer_list(layer)
    for pair in pairs:
        _check_layer(front, pair.front)
        _check_layer(end, pair.end)
    names = select_metrics(metrics)
    pm = get_plugin_manager()
    metric_options = options_for_metrics(names, options)

    device = torch.device(device) if device is not None else model_device(front)
    front_run = _place(front, device, "front")
    end_run = _place(end, device, "end")

    if context is None:
        ctx = Context(data, seed=seed, device=device, options=options, progress=progress)
    else:  # reuse the caches (keyed by model, layer and split) with this call's settings
        ctx = context.for_call(data, seed=seed, device=device, options=options, progress=progress)
    if ctx.world.distributed:  # every rank must hold the same models, data and settings
        check_ranks_agree(ctx.world, front, end, data, ([str(p) for p in pairs], names, seed, options))
    results: list[SimilarityResult] = []
    jobs = [(p, n) for p in pairs for n in names]
    bar = tqdm(jobs, desc="compare", disable=not progress, leave=False)
    with preserved(front, end, front_run, end_run), isolated_rng(device) as cuda_rng:
        for pair, name in bar:
            bar.set_postfix_str(f"{name} @ {pair}")
            run = lambda s: _run_metric(pm, name, pair, front_run, end_run, data, ctx,  # noqa: E731
                                        metric_options[name], s, device, cuda_rng)
            deterministic = name not in pm.load_errors and is_deterministic(pm.hookimpl_for(name).plugin)
            results.append(run_repeated(run, seed, repeats, deterministic=deterministic, context=ctx))
    meta = {
        "front": type(front).__name__,
        "end": type(end).__name__,
        "layers": [str(p) for p in pairs],
        "metrics": names,
        "kinds": {n: pm.info[n].kind for n in names},
        "seed": seed,
        "repeats": repeats,
        "device": str(device),
        "torch": torch.__version__,
        "world_size": ctx.world.size,
    }
    return Report(results, meta)


def _run_metric(pm, name: str, pair: LayerPair, front: nn.Module, end: nn.Module, data: Data, ctx: Context,
                options: dict, seed: int, device: torch.device, cuda_rng: bool = False) -> SimilarityResult:
    layer_str = str(pair)
    if name in pm.load_errors:
        return SimilarityResult(name, None, {}, 0.0, pm.load_errors[name], layer_str)
    missing = missing_splits(name, pm.info[name].needs, data)
    if missing:
        return SimilarityResult(name, None, {}, 0.0, f"ValueError: {missing}", layer_str)
    impl = pm.hookimpl_for(name)
    arguments = {
        "front": front, "end": end, "layer": pair, "data": data, "options": dict(options),
        "context": ctx, "seed": seed, "device": device,
    }
    start = time.perf_counter()
    error = None
    try:
        seed_all(seed, cuda=cuda_rng)
        value = impl.function(**{a: arguments[a] for a in impl.argnames})
        result = _to_result(value, name, layer_str)
        if result.score is not None and not math.isfinite(result.score):
            result.details.setdefault("warnings", []).append(f"score is {result.score}")
    except Exception as exc:  # noqa: BLE001 - one metric's failure must not stop the others
        result = SimilarityResult(name, None, {"traceback": _short_traceback(exc)}, 0.0,
                                  f"{type(exc).__name__}: {exc}", layer_str)
        error = exc
    result.seconds = time.perf_counter() - start
    if ctx.world.distributed:
        result = agree_on_result(ctx.world, result, error)
    return result
