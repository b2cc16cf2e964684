"""The shared stitching service used by the metric plugins: fit (memoised), evaluate, report.

[`stitch_result`][stitch_result] is what a stitching plugin calls. Within one ``compare`` (one
[`Context`][similarity_plugins.networks.context.Context]) it memoises, by key:

- the training inputs loaded from ``Data.train`` (``("stitch-train", id(split))``);
- the [`TrainingCache`][cache.TrainingCache] (A's activations and B's targets) per donor pair, layer pair and
  training set, shared by all four objectives;
- each [`FittedStitch`][trainer.FittedStitch] per (donors, layers, objective, training set, settings), so a
  second report or a sweep never refits it;
- the test-set arrays (A's activations and logits, B's logits, labels) per donor pair and layers.

Other inputs than ``Data.train`` (e.g. IRIs) come in as a [`TrainingSet`][TrainingSet] with their own key.
All but the test-set arrays depend on the training data alone (remembered ``train_only``), so a context made
with [`Context.with_test`][similarity_plugins.networks.context.Context.with_test] evaluates the same
stitches on another test split.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable

import torch
from torch import nn

from ..host.hookspecs import PluginContext
from ..host.results import LayerPair, SimilarityResult, as_layer_pair
from ..networks.data import iterate_batches, load_all
from ..networks.model_state import frozen
from .cache import TrainingCache, subset_indices
from .evaluate import evaluate_stitch
from .settings import StitchSettings, check_objective
from .trainer import FittedStitch, fit_stitch

MAX_LOSSES_IN_DETAILS = 60


@dataclass(eq=False)
class TrainingSet:
    """Inputs to train a stitch on: ``x`` (N, ...) float, ``y`` (N,) int64 labels or ``None``,
    ``key`` a hashable identity for memoisation (two sets with the same key are treated as the same
    data), ``name`` a label for the report ("train", "IRIs", ...)."""

    x: torch.Tensor
    y: torch.Tensor | None
    key: Hashable
    name: str = "train"


def training_set(context: PluginContext) -> TrainingSet:
    """``Data.train`` materialised as a [`TrainingSet`][TrainingSet] (memoised); clear error when it is missing."""
    split = context.data.train
    if split is None:
        raise ValueError(
            "stitching trains the stitch on Data.train, but no training split was given; "
            "pass Data(train=..., test=...) with a training dataset"
        )

    def load() -> TrainingSet:
        x, y = load_all(split, batch_size=context.batch_size, what="the train split")
        return TrainingSet(x, y, ("data.train", id(split)), "train")

    return context.remember(("stitch-train", id(split)), load, train_only=True)


def _cache(context: PluginContext, front: nn.Module, end: nn.Module, layer: LayerPair, train: TrainingSet,
           settings: StitchSettings) -> TrainingCache:
    def build() -> TrainingCache:
        x, y = train.x, train.y
        idx = subset_indices(len(x), settings.max_train, settings.seed)
        if idx is not None:
            x, y = x[idx], (None if y is None else y[idx])
        rows = context.world.shard(len(x)) if context.world.distributed else None  # this rank's share
        cache = TrainingCache(context.split(front, layer.front), context.split(end, layer.end), x, y,
                              device=context.device, batch_size=settings.eval_batch_size,
                              limit_bytes=settings.cache_limit_bytes, progress=context.progress, rows=rows)
        # the front's activations depend on the front node alone: one pass serves every end it is stitched to
        node = ("stitch-front", id(front), layer.front, train.key, subset, settings.cache_limit_mb,
                settings.eval_batch_size, rows)
        cache.stores["front"] = context.remember(node, lambda: cache.ensure(["front"]) or cache.stores["front"],
                                                 train_only=True)
        return cache

    subset = (settings.max_train, settings.seed) if settings.max_train else None
    key = ("stitch-cache", id(front), id(end), layer.front, layer.end, train.key, subset, settings.cache_limit_mb)
    return context.remember(key, build, train_only=True)


def _fit_key(front: nn.Module, end: nn.Module, layer: LayerPair, objective: str, train: TrainingSet,
             settings: StitchSettings) -> tuple:
    return ("stitch-fit", id(front), id(end), layer.front, layer.end, objective, train.key, settings)


def fitted_stitch(context: PluginContext, front: nn.Module, end: nn.Module, layer: LayerPair | str, objective: str,
                  options: dict | None = None, train_source: TrainingSet | None = None) -> FittedStitch:
    """The stitch from ``front`` at ``layer.front`` to ``end`` at ``layer.end`` trained with ``objective``, memoised
    in ``context``: one fit per donors, layers, objective, training set and settings, so a second report or a sweep
    never refits it.

    Args:
        context: the call's context; its ``seed`` seeds the fit.
        front: the model whose front half feeds the stitch.
        end: the model whose end half reads it.
        layer: the cut of each model (a `LayerPair`, or one name for both).
        objective: ``"hlm"``, ``"slm"``, ``"dm"`` or ``"fula"``.
        options: stitch settings, the fields of [`StitchSettings`][similarity_plugins.stitch.StitchSettings]
            (None: the defaults).
        train_source: the inputs to train on (default: ``Data.train``).

    Returns:
        The [`FittedStitch`][similarity_plugins.stitch.FittedStitch].
    """
    layer = as_layer_pair(layer)
    objective = check_objective(objective)
    settings = StitchSettings.from_options(options, seed=context.seed)
    train = train_source if train_source is not None else training_set(context)

    def fit() -> FittedStitch:
        cache = _cache(context, front, end, layer, train, settings)
        return fit_stitch(context.split(front, layer.front), context.split(end, layer.end), None, None, objective,
                          settings, device=context.device, progress=context.progress, cache=cache,
                          world=context.world)

    return context.remember(_fit_key(front, end, layer, objective, train, settings), fit, train_only=True)


def evaluation_arrays(context: PluginContext, front: nn.Module, end: nn.Module, layer: LayerPair, *,
                      end_acts: bool = False, batch_size: int = 256) -> dict:
    """Test-split arrays for evaluation, from one pass of each donor's native path (memoised).

    Returns ``{"front_acts": (N, *A's cut shape), "front_logits": (N, K_A), "end_logits": (N, K),
    "labels": (N,)}`` (CPU, float32/int64), plus ``"end_acts"`` (N, *B's cut shape) when ``end_acts``.
    All come from the same batches, so they stay aligned even for a shuffling ``DataLoader``. Under
    torch.distributed they cover this rank's share of the test split only (the counts are summed later).
    """
    front_net, end_net = context.split(front, layer.front), context.split(end, layer.end)

    def compute(test) -> tuple[torch.Tensor, ...]:
        out: dict[str, list] = {"front_acts": [], "front_logits": [], "end_logits": [], "labels": []}
        if end_acts:
            out["end_acts"] = []
        with torch.no_grad():
            for x, y in iterate_batches(test, batch_size):
                x = x.to(context.device)
                if front_net.can_end:
                    a, logits, _ = front_net.native(x)
                else:  # an untraceable front: its cut by hook, its logits from a plain forward
                    a = front_net.front(x)
                    with frozen(front):
                        logits = front(x)
                cut, end_logits, _ = end_net.native(x)
                out["front_acts"].append(a.float().cpu())
                out["front_logits"].append(logits.float().cpu())
                out["end_logits"].append(end_logits.float().cpu())
                out["labels"].append(y.long().cpu())
                if end_acts:
                    out["end_acts"].append(cut.float().cpu())
        return tuple(torch.cat(v) for v in out.values())

    names = ["front_acts", "front_logits", "end_logits", "labels"] + (["end_acts"] if end_acts else [])
    arrays, _ = context.run_sharded("test", compute, ("stitch-test", id(front), id(end), layer.front, layer.end,
                                                       end_acts, batch_size))
    return dict(zip(names, arrays))


def _reducer(context: PluginContext):
    """Sum evaluation counts over the ranks (None in one process)."""
    if not context.world.distributed:
        return None
    return lambda compute, like: context.world.reduce_sum(compute, like, "stitch evaluation")


def _short(losses: list[float]) -> list[float]:
    if len(losses) > MAX_LOSSES_IN_DETAILS:
        step = len(losses) / MAX_LOSSES_IN_DETAILS
        losses = [losses[int(i * step)] for i in range(MAX_LOSSES_IN_DETAILS - 1)] + [losses[-1]]
    return [float(f"{v:.6g}") for v in losses]


def stitch_result(context: PluginContext, front: nn.Module, end: nn.Module, layer: LayerPair | str, objective: str,
                  options: dict | None = None, train_source: TrainingSet | None = None) -> SimilarityResult:
    """Fit (memoised) and evaluate a stitch; the score is the relative accuracy on ``Data.test``.

    ``details`` holds: ``objective``, ``relative_accuracy``, ``test_ci95`` (95% bootstrap interval of the
    score over test samples), ``agreement``, ``stitched_accuracy``,
    ``front_accuracy``, ``end_accuracy`` (fractions), ``final_loss`` and ``losses`` (per epoch),
    ``dm_relative_error`` (DM only), ``train_size``, ``test_size``, ``train_source``, ``resized``,
    ``stitch`` (a description), ``front_shape``, ``end_shape``, ``init`` (method; least squares adds its
    relative residual), ``settings``, ``fit_seconds``; ``warnings`` notes a bilinear resize.
    Raises ``ValueError`` with a clear message for bad input (see [`fit_stitch`][trainer.fit_stitch]).
    """
    layer = as_layer_pair(layer)
    objective = check_objective(objective)
    from .lm import is_language_model, lm_stitch_result

    if is_language_model(front) or is_language_model(end):
        return lm_stitch_result(context, front, end, layer, objective, options)
    fitted = fitted_stitch(context, front, end, layer, objective, options, train_source)
    settings = fitted.settings
    train = train_source if train_source is not None else training_set(context)

    def evaluate() -> dict:
        arrays = evaluation_arrays(context, front, end, layer, end_acts=objective == "dm", batch_size=settings.eval_batch_size)
        return evaluate_stitch(fitted, context.split(end, layer.end), arrays["front_acts"], arrays["labels"],
                               arrays["end_logits"], front_logits=arrays["front_logits"],
                               end_acts=arrays.get("end_acts"), batch_size=settings.eval_batch_size,
                               reduce=_reducer(context))

    scores = context.remember(("stitch-eval",) + _fit_key(front, end, layer, objective, train, settings)[1:], evaluate)
    plan = fitted.plan
    details = {
        "objective": objective,
        **scores,
        "final_loss": fitted.final_loss,
        "losses": _short(fitted.losses),
        "train_size": fitted.train_size,
        "train_source": train.name,
        "resized": plan.resize is not None,
        "stitch": plan.describe(),
        "front_shape": list(plan.front_shape),
        "end_shape": list(plan.end_shape),
        "init": dict(fitted.init),
        "settings": settings.as_dict(),
        "fit_seconds": round(fitted.seconds, 3),
    }
    if plan.resize is not None:
        details["warnings"] = [
            f"the front's {plan.front_shape[1]}x{plan.front_shape[2]} map was resized bilinearly to "
            f"{plan.resize[0]}x{plan.resize[1]} to match the end's"
        ]
    return SimilarityResult("", float(scores["relative_accuracy"]), details)
