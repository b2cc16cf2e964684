"""One metric call, the same in `compare`, `score` and grids: the checks before it, the hook's arguments, and
the row its return value (or its exception) becomes."""

from __future__ import annotations

import copy
import math
import numbers
import traceback
from typing import Any, Callable

import torch

from ..host.contract import missing_splits
from ..host.results import LayerPair, SimilarityResult
from ..host.values import coerce_option_values


def refusal(pm, name: str, data: Any, options: dict, layer: str) -> tuple[SimilarityResult | None, dict]:
    """The row of a metric that cannot run (it failed to load, a split it needs is missing, an option value is
    bad), or None; and the options it receives (`metric_options`)."""
    if name in pm.load_errors:
        return SimilarityResult.failed(name, pm.load_errors[name], layer, error_type=pm.info[name].error_type), options
    missing = missing_splits(name, pm.info[name].needs, data)
    options, problem = metric_options(options, pm.info[name].option_types)
    if missing or problem:
        return SimilarityResult.from_exception(name, ValueError(missing or problem), layer), options
    return None, options


def hook_call(pm, name: str, arguments: dict[str, Any]) -> Callable[[], Any]:
    """The call of the metric ``name`` through the plugin manager (`host.dispatch`: its ``similarity`` hookimpl inside
    every wrapper of the hook), bound to ``arguments`` (every argument of the hookspec but ``metric``, which is
    ``name``); each hookimpl receives those it names. Calling it returns the metric's value (or a wrapper's)."""
    call, arguments = pm.metric_call(name), {**arguments, "metric": name}
    return lambda: call(**arguments)


def to_row(value: Any, metric: str, layer: str, bounds: tuple[float, float] | None = None) -> SimilarityResult:
    """A plugin's return value as a new row of ``metric`` at ``layer`` (always those, whatever a returned
    [`SimilarityResult`][SimilarityResult] says: it may be another call's row, which is left as it was), with a warning
    for a non-finite score and the declared ``bounds`` applied (`check_range`)."""
    if isinstance(value, SimilarityResult):
        result = SimilarityResult(metric, as_float(value.score) if value.score is not None else None,
                                  copy.deepcopy(value.details), value.seconds, value.error, layer, value.error_type)
    elif isinstance(value, dict) and "score" in value:
        result = SimilarityResult(metric, as_float(value["score"]), dict(value.get("details", {})), layer=layer)
    else:
        result = SimilarityResult(metric, as_float(value), {}, layer=layer)
    if result.score is not None and not math.isfinite(result.score):
        result.details.setdefault("warnings", []).append(f"score is {result.score}")
    elif result.score is not None and bounds is not None:
        check_range(result, bounds)
    return result


#: How far (relative to the bound's size, at least 1) a score may pass its declared range and count as rounding.
RANGE_ROUNDING = 1e-9


def check_range(result: SimilarityResult, bounds: tuple[float, float]) -> None:
    """Clamp a score that passes the declared ``(lo, hi)`` by a rounding error (`RANGE_ROUNDING`) to the
    bound; keep a score beyond that as it is, flagged by a warning in its row (a bug in the metric, not noise)."""
    lo, hi = bounds
    score = result.score
    if lo <= score <= hi:
        return
    edge = lo if score < lo else hi
    if abs(score - edge) <= RANGE_ROUNDING * max(1.0, abs(edge)):
        result.score = edge
    else:
        result.details.setdefault("warnings", []).append(
            f"score {score!r} is outside the metric's declared range [{lo}, {hi}]")


def error_row(exc: BaseException, metric: str, layer: str) -> SimilarityResult:
    """The row of a metric call that raised ``exc`` (any exception, ``SystemExit`` and ``GeneratorExit``
    included): no score, the error as ``"Type: message"`` and a short traceback in the details."""
    return SimilarityResult.from_exception(metric, exc, layer, details={"traceback": short_traceback(exc)})


class ReturnedError(RuntimeError):
    """The error of a row a metric returned (a `SimilarityResult` with ``error`` set) instead of raising, raised after
    the call so that under torchrun every rank reports it (the message is the row's error)."""


#: What a metric call may raise and still become that metric's error row (Ctrl-C stops the run instead).
METRIC_ERRORS = (Exception, SystemExit, GeneratorExit)


def as_float(value: Any) -> float | None:
    if value is None:
        raise TypeError("the plugin returned None; a metric must return a float, a dict with 'score', or a SimilarityResult")
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise TypeError(f"the plugin returned a tensor of shape {tuple(value.shape)}; return one number")
        return float(value.item())
    if isinstance(value, numbers.Real) or hasattr(value, "__float__"):
        return float(value)
    raise TypeError(f"the plugin returned {type(value).__name__}; return a float, a dict with 'score', or a SimilarityResult")


def metric_options(options: dict, rules: dict) -> tuple[dict, str | None]:
    """One metric's options for its call: a private deep copy (a plugin that changes it changes nothing for the
    next metric or the caller) with every value read by its option's rule (`coerce_option_values`; ``rules``: the
    metric's ``option_types``); and the first bad value's message (then the dict is the copy as given)."""
    try:
        options = copy.deepcopy(dict(options))
    except Exception:  # noqa: BLE001 - a value that cannot be copied (a lock, a file) is handed as it is
        options = dict(options)
    try:
        return coerce_option_values(options, rules), None
    except ValueError as exc:
        return options, str(exc)


def short_traceback(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)[-3:]
    return " <- ".join(f"{f.name} ({f.filename.rsplit('/', 1)[-1]}:{f.lineno})" for f in reversed(frames))



def interrupted_row(name: str, layer: str | LayerPair) -> SimilarityResult:
    """The row of a metric that Ctrl-C (or SIGTERM) stopped before it finished."""
    return SimilarityResult.from_exception(name, KeyboardInterrupt("interrupted before this metric finished"), layer)
