"""``compare``: ask every selected metric plugin for a score at every requested layer."""

from __future__ import annotations

import copy
import time
from typing import Any, Iterable, Sequence

import torch
from torch import nn

from ..host.manager import get_plugin_manager
from ..host.registry import declared_meanings, options_for_metrics, select_metrics
from ..host.results import LayerPair, Report, SimilarityResult, as_layer_pair
from ..networks.context import Context
from ..networks.data import Data
from ..networks.layer_lists import check_layer
from ..networks.model_state import model_device, on_device, preserved
from ..networks.wrapped import source_of
from ..utils.progress import Progress, check_progress, progress_bar
from ..utils.rng import check_seed, isolated_rng, seed_all
from .call import METRIC_ERRORS, ReturnedError, error_row, hook_call, interrupted_row, refusal, to_row
from .guard import settle
from .isolation import Donors, MetricTimeout, call_with_timeout, check_timeout, forget_changed_donors
from .process import outside_inference_mode, process_state, restore_process_state
from .provenance import provenance, splits_read
from .ranks import agree_on_result, check_ranks_agree
from .repeats import check_repeats, run_repeated


def as_layer_list(layer: Any) -> list[LayerPair]:
    """Normalise one layer, one pair, or a list of them (a sweep) to a list of [`LayerPair`][LayerPair]."""
    if isinstance(layer, (str, LayerPair)):
        return [as_layer_pair(layer)]
    if isinstance(layer, tuple) and len(layer) == 2 and all(isinstance(s, str) for s in layer):
        return [as_layer_pair(layer)]
    if isinstance(layer, (list, tuple)) and layer:
        return [as_layer_pair(item) for item in layer]
    raise TypeError(f"layer must be a module name, a (front_layer, end_layer) pair or a list of them; got {layer!r}")


def compare(
    front: nn.Module,
    end: nn.Module,
    layer: str | tuple[str, str] | Sequence[str | tuple[str, str]],
    data: Data | None = None,
    metrics: str | Iterable[str] | None = None,
    *,
    seed: int = 0,
    device: str | torch.device | None = None,
    options: dict | None = None,
    progress: Progress = "never",
    context: Context | None = None,
    repeats: int = 1,
    timeout: float | None = None,
) -> Report:
    """Score how similar ``front`` (network A) and ``end`` (network B) are, with every selected metric.

    Args:
        front: network A, a trained ``torch.nn.Module``; it is cut after ``layer`` (its front part is used).
        end: network B; it is cut at ``layer`` (its end part is used). Neither model is ever changed.
        layer: a module name present in both models, a pair ``(front_layer, end_layer)``, or a list of
            those (a layer sweep: one row per metric and layer). [`layers`][similarity_plugins.layers] lists them.
        data: [`Data`][Data] with ``train`` (fitting stitches, seeding IRIs) and ``test`` (scoring): datasets
            or loaders of ``(x, y)`` with x shaped as the models take it, (N, C, H, W) for images.
        metrics: names or wildcards (``"stitch-*"``), a comma-separated string, or ``None`` for all.
        seed: every random choice derives from it.
        device: where the donors run (a copy is made when a model lives elsewhere; the user's models are
            never moved); ``None``: the front's device.
        options: global options, plus per-metric dicts under metric names, e.g.
            ``{"epochs": 5, "stitch-dm": {"lr": 1e-2}}`` ([Options](../options.md) lists every metric's).
        progress: ``"never"`` (default) no bars; ``"auto"`` bars on stderr when it is a terminal; ``"always"``
            bars even into a file or pipe (`utils.progress`; ``False``/``True`` are deprecated spellings).
        context: reuse the caches of an earlier call (same models and data) to avoid recomputing; the
            context itself is not changed (this call works on a child that shares its memo).
        repeats: run every metric with seeds ``seed .. seed+repeats-1`` (stitch init and order, IRI starts);
            the score is their mean, ``details["scores"]`` the values, ``details["seed_ci95"]`` a 95% interval
            over seeds. Deterministic metrics (CKA) run once.
        timeout: seconds each metric call (one metric at one layer, one seed) may take; a late call gets a
            ``MetricTimeout`` error row and the others still run (the plugins then work on private copies of
            the donors, and a late call's thread is abandoned with them). ``None``: no limit.

    Returns:
        A [`Report`][Report]: one [`SimilarityResult`][similarity_plugins.SimilarityResult] row per metric
            and layer (score, details, wall seconds, error). A metric that raises gets a row with its error;
            the others still run. A metric whose ``needs`` names a split that ``data`` lacks gets an error row
            without running.

    Raises:
        LayerNotFound: a layer is not in a model (the message lists the valid ones).
        UnknownMetric: a name or wildcard matches no registered metric.
        UnknownOption: an option no selected metric takes (a ``ValueError``; raised before any work).
        KeyboardInterrupt: on Ctrl-C, as usual; its ``report`` attribute holds the rows that had finished,
            the others marked interrupted.

    The donors are guarded: a metric that changes one gets an error row naming the change, the donors are
    restored and later metrics see them as they were; grad mode, the default dtype and the global torch,
    NumPy and ``random`` generators are restored after every metric (each metric runs seeded with ``seed``).
    """
    seed = check_seed(seed)
    repeats = check_repeats(repeats)
    progress = check_progress(progress)
    timeout = check_timeout(timeout)
    data = data if data is not None else Data()
    if not isinstance(data, Data):
        raise TypeError(f"data must be a similarity_plugins.Data(train=..., test=...), got {type(data).__name__}")
    pairs = as_layer_list(layer)
    for pair in pairs:
        check_layer(front, pair.front)
        check_layer(end, pair.end)
    names = select_metrics(metrics)
    pm = get_plugin_manager()
    metric_options = options_for_metrics(names, options)

    device = torch.device(device) if device is not None else model_device(front)
    front_run = on_device(front, device, "front")
    end_run = on_device(end, device, "end")

    data = copy.copy(data)  # the context's own Data: a plugin that reassigns a split changes nothing for the caller
    if context is None:
        ctx = Context(data, seed=seed, device=device, options=options, progress=progress)
    else:  # reuse the caches (keyed by model, layer and split) with this call's settings
        ctx = context.for_call(data, seed=seed, device=device, options=options, progress=progress)
        forget_changed_donors(ctx, (front_run, end_run))  # a model changed in place since: its entries go
    if ctx.world.distributed:  # every rank must hold the same models, data and settings
        check_ranks_agree(ctx.world, front, end, data, ([str(p) for p in pairs], names, seed, options))
    donors = Donors(front_run, end_run, ctx, timeout)  # guarded after each metric; private copies with a timeout
    meta = {"front": type(front).__name__, "end": type(end).__name__, "layers": [str(p) for p in pairs],
            "metrics": names, "kinds": {n: pm.info[n].kind for n in names}, "seed": seed, "repeats": repeats,
            "device": str(device), "torch": torch.__version__, "world_size": ctx.world.size,
            **sources_of({"front": front, "end": end}), "info": declared_meanings(names),
            "provenance": provenance({"front": front, "end": end}, splits_read(data, (pm.info[n].needs for n in names)),
                                     options=options, device=device, batch_size=ctx.batch_size)}
    with preserved(front, end, front_run, end_run), isolated_rng(device) as cuda_rng:
        results = _run_jobs([(p, n) for p in pairs for n in names], pm, donors, data, metric_options, seed, repeats,
                            device, cuda_rng, progress, meta)
    if donors.abandoned:
        meta["abandoned_threads"] = donors.running
    return Report(results, meta)


def sources_of(models: dict[str, Any]) -> dict[str, dict]:
    """``{"sources": {name: model.source}}`` for the models that record where they came from (a wrapped Hugging Face
    model's folder, hub id, revision and commit: `hf`), or ``{}`` when none does; for a report's ``meta``."""
    found = {name: source for name, model in models.items() if (source := source_of(model)) is not None}
    return {"sources": found} if found else {}


def _run_jobs(jobs: list[tuple[LayerPair, str]], pm, donors: Donors, data: Data, metric_options: dict, seed: int,
              repeats: int, device: torch.device, cuda_rng: bool, progress: Progress, meta: dict) -> list[SimilarityResult]:
    """One row per (layer pair, metric) job, in order. On Ctrl-C the ``KeyboardInterrupt`` gets a ``report``
    attribute: the rows that finished, the others marked interrupted, ``meta["interrupted"]`` true."""
    results: list[SimilarityResult] = []
    bar = progress_bar(jobs, progress=progress, desc="compare", leave=False)
    try:
        for pair, name in bar:
            bar.set_postfix_str(f"{name} @ {pair}")
            run = lambda s: run_metric(pm, name, pair, donors, data, metric_options[name], s,  # noqa: E731
                                       device, cuda_rng)
            results.append(run_repeated(run, seed, repeats, deterministic=pm.info[name].deterministic,
                                        context=donors.ctx))
    except KeyboardInterrupt as exc:  # the finished rows travel with the exception (the CLI writes them)
        exc.report = Report(results + [interrupted_row(n, p) for p, n in jobs[len(results):]], {**meta, "interrupted": True})
        raise
    return results


def _after_call(result: SimilarityResult, error: BaseException | None, donors: Donors, memo_before: set,
                saved: dict) -> tuple[SimilarityResult, BaseException | None]:
    """After one metric call: a timed-out call leaves its copies and context to its thread (later calls get new
    ones); any other call's donors and torch settings are checked and restored (`settle`), and a
    changed donor becomes the row's error (an exception, so that under torchrun every rank reports it)."""
    if isinstance(error, MetricTimeout):
        restore_process_state(saved)
        donors.renew(memo_before, error)
        return result, error
    result, changed = settle(result, donors.guard, donors.ctx.memo, memo_before, saved)
    if error is None and result.error:
        error = changed or ReturnedError(result.error)
    if donors.running:
        result.details.setdefault("warnings", []).append(
            f"{donors.running} timed-out metric thread(s) of this call were still running (they share CPU time and "
            "the global random generators with this metric)")
    return result, error


def run_metric(pm, name: str, pair: LayerPair, donors: Donors, data: Data, options: dict, seed: int,
               device: torch.device, cuda_rng: bool = False) -> SimilarityResult:
    """One metric's row at ``pair`` in `compare` and grids: the shared checks and call (`call`), inside the
    donors' guard, the forked RNGs, the timeout and, under torchrun, the ranks' agreement."""
    layer_str = str(pair)
    ctx, front, end = donors.ctx, donors.front, donors.end
    ctx.seed = seed
    if donors.halted and name not in pm.load_errors:
        return SimilarityResult.from_exception(name, MetricTimeout(donors.halted), layer_str)
    refused, options = refusal(pm, name, data, options, layer_str)
    if refused is not None:
        return refused
    call = hook_call(pm, name, {"front": front, "end": end, "layer": pair, "data": copy.copy(data),
                                "options": options, "context": ctx, "seed": seed, "device": device})
    start = time.perf_counter()
    error = None
    memo_before, saved, splits = set(ctx.memo), process_state(), (data.train, data.test)
    try:
        with isolated_rng(device), outside_inference_mode():  # a caller's inference mode would make the
            seed_all(seed, cuda=cuda_rng)                           # cached tensors unusable outside it
            value = call() if donors.timeout is None else call_with_timeout(call, donors.timeout,
                                                                           f"metric {name!r} at layer {layer_str}")
        result = to_row(value, name, layer_str, pm.info[name].range)
    except METRIC_ERRORS as exc:  # one metric's failure (even sys.exit) must not stop the others
        result, error = error_row(exc, name, layer_str), exc
    except KeyboardInterrupt:
        settle(SimilarityResult(name, None), donors.guard, ctx.memo, memo_before, saved)  # the donors restored first
        ctx.drop_changed()
        raise
    result, error = _after_call(result, error, donors, memo_before, saved)
    donors.ctx.data, (data.train, data.test) = data, splits  # a plugin may have reassigned context.data's splits
    dropped = ctx.drop_changed()
    if dropped:
        result.details.setdefault("warnings", []).append(
            f"metric {name!r} wrote into shared tensors in place ({'; '.join(dropped)}); the next metric gets them "
            "anew (work on a copy: x = x.clone())")
    result.seconds = time.perf_counter() - start
    if ctx.world.distributed:
        result, failed_types = agree_on_result(donors.world, result, error)
        donors.after_agreement(result, failed_types)
    return result
