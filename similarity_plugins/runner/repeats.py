"""``compare(..., repeats=k)``: run a metric with seeds ``seed, seed+1, ..., seed+k-1`` and aggregate.

The row's ``score`` is the mean of the k scores; ``details["scores"]`` lists them, ``details["seeds"]``
their seeds and ``details["seed_ci95"]`` is a 95% Student-t interval of the mean over seeds (it covers the
randomness of stitch initialisation, data order and IRI starts, not the test-sample uncertainty, which a
metric may report per run as ``details["test_ci95"]``; the rows average it). A metric plugin that declares
``deterministic = True`` (CKA; `MetricInfo.deterministic`) is computed once: its ``score`` is that value,
``scores`` is ``[value] * k``, ``seed_ci95`` is ``[value, value]`` (exactly, not a float mean of equal values) and
``details["deterministic"]`` is True.
"""

from __future__ import annotations

import copy
import math
import numbers
from typing import Any, Callable

from ..host.results import SEED_INTERVAL, TEST_INTERVAL, SimilarityResult


def check_repeats(repeats: Any) -> int:
    """``repeats`` as an int >= 1; ``TypeError``/``ValueError`` naming the problem otherwise."""
    if isinstance(repeats, bool) or not isinstance(repeats, numbers.Integral):
        raise TypeError(f"repeats must be a whole number of seeds (1, 2, 3, ...), got {repeats!r}")
    if int(repeats) < 1:
        raise ValueError(f"repeats must be at least 1 (the number of seeds per metric), got {repeats}")
    return int(repeats)


def exact_mean(values: list[float]) -> float:
    """The mean of ``values`` (floats); exactly ``v`` when every value is ``v`` (a float sum of k equal values,
    divided by k, is not always ``v``), so a repeated constant never drifts in its last bit."""
    first = values[0]
    if all(v == first for v in values):
        return first
    return math.fsum(values) / len(values)


def mean_interval(values: list[float], level: float = 0.95) -> tuple[float, float]:
    """Student-t interval of the mean of ``values`` (floats); exactly ``(v, v)`` for one value or zero spread."""
    k = len(values)
    mean = exact_mean(values)
    if k < 2 or all(v == values[0] for v in values):
        return mean, mean
    from scipy.stats import t

    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (k - 1))
    half = float(t.ppf(0.5 + level / 2, k - 1)) * sd / math.sqrt(k)
    return mean - half, mean + half


def run_repeated(run_once: Callable[[int], SimilarityResult], seed: int, repeats: int, *, deterministic: bool = False,
                 context: Any = None) -> SimilarityResult:
    """Call ``run_once(s)`` for ``s = seed .. seed+repeats-1`` (once when ``deterministic``) and aggregate.

    ``context``: when given, its ``seed`` attribute is set to ``s`` for each call and restored after.
    ``repeats == 1`` returns the single result unchanged. Failed runs are left out of the mean; when every
    run fails the first failure is returned. See the module docstring for the details added.
    """
    seeds = [seed + i for i in range(1 if deterministic else repeats)]
    saved = context.seed if context is not None else None
    runs = []
    try:
        for s in seeds:
            if context is not None:
                context.seed = s
            runs.append(run_once(s))
    finally:
        if context is not None:
            context.seed = saved
    if repeats == 1:
        return runs[0]
    ok = [r for r in runs if r.ok]
    if not ok:
        return runs[0]
    failures = [f"seed {s}: {r.error}" for s, r in zip(seeds, runs) if not r.ok]
    scores = [float(r.score) for r in ok]
    if deterministic:
        scores, seeds = scores * repeats, [seed + i for i in range(repeats)]
    else:
        seeds = [s for s, r in zip(seeds, runs) if r.ok]
    return _aggregate(ok, scores, seeds, repeats, deterministic, sum(r.seconds for r in runs), failures)


def _aggregate(ok: list[SimilarityResult], scores: list[float], seeds: list[int], repeats: int, deterministic: bool,
               seconds: float, failures: list[str]) -> SimilarityResult:
    first = ok[0]
    details = copy.deepcopy(first.details)
    for key, value in first.details.items():  # average the float details every run has (accuracies, errors)
        if isinstance(value, float) and all(isinstance(r.details.get(key), float) for r in ok):
            details[key] = exact_mean([r.details[key] for r in ok])
    intervals = [r.details.get(TEST_INTERVAL) for r in ok]   # a metric's own interval over test samples
    if all(isinstance(i, (list, tuple)) and len(i) == 2 for i in intervals):
        details[f"{TEST_INTERVAL}_per_seed"] = [list(i) for i in intervals]
        details[TEST_INTERVAL] = [exact_mean([i[0] for i in intervals]), exact_mean([i[1] for i in intervals])]
    warnings = list(dict.fromkeys(w for r in ok for w in (r.details.get("warnings") or [])))
    warnings += [f"{f} (left out of the mean)" for f in failures]
    if warnings:
        details["warnings"] = warnings
    details.update({"scores": scores, "seeds": seeds, "repeats": repeats, SEED_INTERVAL: list(mean_interval(scores)),
                    "deterministic": deterministic})
    return SimilarityResult(first.metric, exact_mean(scores), details, seconds, None, first.layer)
