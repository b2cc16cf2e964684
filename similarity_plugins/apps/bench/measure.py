"""One metric on one workload, timed by pytest-benchmark: the body of the ``similarity_benchmark`` fixture
and of every ``similarity-plugins bench`` benchmark.

Each round scores the metric with a fresh [`Context`][similarity_plugins.networks.context.Context] (built in the
untimed ``setup`` of ``benchmark.pedantic``), so activations, network splits, stitch training caches, fitted
stitches and IRIs are recomputed every round: a round times ``compare(front, end, layer, data, [metric])``,
i.e. the metric's real work plus the few milliseconds of ``compare``'s own checks. Not timed: building and
training the donors and loading the data (once per process, see `workloads`), importing and
registering the plugin, and the warm-up rounds.
"""

from __future__ import annotations

from typing import Any

from ...host.registry import UnknownMetric, select_metrics
from ...host.results import SimilarityResult
from ...networks.context import Context
from ...runner.compare import compare
from .workloads import Workload, get_workload


class MetricFailed(RuntimeError):
    """A benchmarked metric returned an error row instead of a score (the message is that error)."""


def resolve_metric(metric: str) -> str:
    """The registered name of ``metric`` (an exact name, or a wildcard matching exactly one metric).

    Raises [`UnknownMetric`][similarity_plugins.host.registry.UnknownMetric] naming the registered metrics.
    """
    names = select_metrics([metric])
    if len(names) != 1:
        raise UnknownMetric(f"{metric!r} matches {len(names)} metrics ({', '.join(names)}); benchmark one at a time")
    return names[0]


def benchmark_metric(benchmark: Any, metric: str, workload: str | Workload = "small", *,
                     rounds: int | None = None, warmup_rounds: int | None = None, options: dict | None = None,
                     seed: int = 0) -> SimilarityResult:
    """Time ``metric`` on ``workload`` with pytest-benchmark's ``benchmark`` fixture; return its result.

    - ``rounds`` / ``warmup_rounds``: timed and untimed rounds (default: the workload's, e.g. 3 and 1 for
      ``small``); one iteration per round, each with a fresh [`Context`][Context] (see the module docstring).
    - ``options``: metric options merged over the workload's fast defaults for the metric's family (global
      ones, and per-metric dicts under metric names); the metric gets those it declares.
    - ``seed``: the donors' seed and ``compare(seed=...)``.

    Sets ``benchmark.group`` to ``"workload <name>"`` unless the caller set a group, and
    ``benchmark.extra_info`` to ``metric``, ``workload``, ``layer``, ``package``, ``score`` (the last
    round's, a float) and ``error`` (None, or the metric's error). Raises `MetricFailed` (inside the
    timed call, so pytest-benchmark marks the benchmark as errored and saves no timing for it) when the
    metric returns an error row, and ``ValueError`` for an unknown metric or workload.
    """
    from ...host.registry import metric_info

    name = resolve_metric(metric)
    chosen = get_workload(workload)
    donors = chosen.donors(seed)
    metric_options = chosen.options_for(name, options, metric_info(name).options)
    layer = chosen.layer_for(name, donors)
    if benchmark.group is None:
        benchmark.group = f"workload {chosen.name}"
    benchmark.extra_info.update({"metric": name, "workload": chosen.name, "layer": layer,
                                 "package": metric_info(name).package, "score": None, "error": None})
    last: dict[str, SimilarityResult] = {}

    def fresh_context() -> tuple[tuple, dict]:
        return (), {"context": Context(donors.data, seed=seed, options=metric_options)}

    def one_round(context: Context) -> None:
        report = compare(donors.front, donors.end, layer, donors.data, [name], seed=seed,
                         options=metric_options, context=context)
        result = report.results[0]
        last["result"] = result
        if result.error is not None:
            benchmark.extra_info["error"] = result.error
            where = result.details.get("traceback")
            raise MetricFailed(f"{name} on workload {chosen.name}: {result.error}" + (f" (at {where})" if where else ""))

    benchmark.pedantic(one_round, setup=fresh_context, rounds=int(rounds or chosen.rounds),
                       warmup_rounds=int(chosen.warmup_rounds if warmup_rounds is None else warmup_rounds),
                       iterations=1)
    result = last["result"]
    benchmark.extra_info["score"] = result.score
    return result
