"""The cost of calling every metric through pluggy: ``score(x, y, "cka-linear")`` on small arrays, and one bare call.

Run from the repository root: ``python -m pytest benchmarks/bench_dispatch.py --benchmark-only`` (autosaved to
``.benchmarks/``). The target: at most 5% per call on a cheap metric.

Group ``dispatch-score-cka-linear-64x16``: ``score`` of two float64 (64, 16) arrays with ``cka-linear``.
  * pluggy          as the library runs it: the metric's hookimpl inside every wrapper, through pluggy's executor
  * direct          the hookimpl's function called directly (the runner before every call went through pluggy:
                    ``pm.hookimpl_for(name)``, then ``impl.function(**its arguments)``), patched in for the test
  * pluggy-wrapper  pluggy with one do-nothing ``similarity`` wrapper registered
  * paired          direct, pluggy and pluggy with the wrapper in turn within each round (the steadier figures on
                    a shared machine: the separate groups' rounds run minutes apart, under whatever load then)
Group ``dispatch-call``: one call of a metric that returns ``1.0`` at once, the bare dispatch cost:
  * call-pluggy, call-direct (as above, without ``score`` around them)

``extra_info`` (of both benchmarks of each pair): ``pluggy_over_direct``, ``wrapper_over_direct`` (ratios of
medians), ``paired_pluggy_over_direct`` and ``paired_wrapper_over_direct`` (of the interleaved medians),
``call_pluggy_over_direct``; printed at the end.
"""

from __future__ import annotations

import time
from contextlib import contextmanager

import numpy as np
import pytest
import ratios

import similarity_plugins as sp
from similarity_plugins.host.manager import get_plugin_manager

GROUP = "dispatch-score-cka-linear-64x16"
CALL_GROUP = "dispatch-call"
ROUNDS = {"rounds": 200, "iterations": 5, "warmup_rounds": 20}
RATIOS = {"pluggy_over_direct": ("pluggy", "direct"), "wrapper_over_direct": ("pluggy-wrapper", "direct"),
          "call_pluggy_over_direct": ("call-pluggy", "call-direct")}
_PAIRED: dict[str, float] = {}


class _Direct:
    """The metric call as the runner made it before it went through pluggy."""

    def __init__(self, impl) -> None:
        self.impl = impl

    def __call__(self, **arguments):
        return self.impl.function(**{a: arguments[a] for a in self.impl.argnames})


class _Nothing:
    @sp.hookimpl(wrapper=True)
    def similarity(self):
        return (yield)


class _One:
    @sp.hookimpl
    def similarity(self):
        return 1.0


@contextmanager
def _direct_calls():
    pm = get_plugin_manager()
    pm.metric_call = lambda name: _Direct(pm.hookimpl_for(name))
    try:
        yield
    finally:
        del pm.metric_call


@pytest.fixture(scope="module")
def arrays() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 16))
    return x, np.tanh(x @ rng.standard_normal((16, 16))) + 0.1 * rng.standard_normal((64, 16))


@pytest.fixture(scope="module", autouse=True)
def _report_ratios(request):
    yield
    lines = [f"{key:26s} = {ratios.RUNS[a].extra_info[key]:.3f}" for key, (a, _) in RATIOS.items()
             if a in ratios.RUNS and key in ratios.RUNS[a].extra_info]
    ratios.print_lines(request, "bench_dispatch", lines + [f"{key:26s} = {value:.3f}" for key, value in _PAIRED.items()])


def _record(name: str, benchmark) -> None:
    ratios.record_pairs(name, benchmark, RATIOS)


def _score(x, y) -> float:
    return sp.score(x, y, "cka-linear")["cka-linear"].score


@pytest.mark.benchmark(group=GROUP)
def test_pluggy(benchmark, arrays):
    value = benchmark.pedantic(_score, args=arrays, **ROUNDS)
    _record("pluggy", benchmark)
    assert value == pytest.approx(float(sp.functional.cka(*arrays)), rel=1e-12)


@pytest.mark.benchmark(group=GROUP)
def test_direct(benchmark, arrays):
    with _direct_calls():
        value = benchmark.pedantic(_score, args=arrays, **ROUNDS)
    _record("direct", benchmark)
    assert value == pytest.approx(float(sp.functional.cka(*arrays)), rel=1e-12)


@pytest.mark.benchmark(group=GROUP)
def test_pluggy_with_a_wrapper(benchmark, arrays):
    pm, wrapper = get_plugin_manager(), _Nothing()
    pm.register(wrapper, name="bench-nothing")
    try:
        benchmark.pedantic(_score, args=arrays, **ROUNDS)
    finally:
        pm.unregister(wrapper)
    _record("pluggy-wrapper", benchmark)


@pytest.mark.benchmark(group=GROUP)
def test_paired(benchmark, arrays):
    times: dict[str, list[float]] = {"direct": [], "pluggy": [], "wrapper": []}
    pm, wrapper = get_plugin_manager(), _Nothing()

    def timed(name: str) -> None:
        start = time.perf_counter()
        _score(*arrays)
        times[name].append(time.perf_counter() - start)

    def one_round():
        with _direct_calls():
            timed("direct")
        timed("pluggy")
        pm.register(wrapper, name="bench-nothing")
        try:
            timed("wrapper")
        finally:
            pm.unregister(wrapper)

    benchmark.pedantic(one_round, rounds=400, iterations=1, warmup_rounds=20)
    for name in ("pluggy", "wrapper"):
        key = f"paired_{name}_over_direct"
        _PAIRED[key] = float(np.median(times[name]) / np.median(times["direct"]))
        benchmark.extra_info[key] = round(_PAIRED[key], 4)
    benchmark.extra_info["paired_median_us"] = {k: round(float(np.median(v)) * 1e6, 1) for k, v in times.items()}


@pytest.fixture(scope="module")
def one_metric():
    pm = get_plugin_manager()
    if "bench-one" not in pm.info:
        sp.register_metric(_One, "bench-one")
    arguments = dict(front=None, end=None, layer=None, data=None, options={}, context=None, seed=0, device=None,
                     metric="bench-one")
    return pm, arguments


@pytest.mark.benchmark(group=CALL_GROUP)
def test_call_pluggy(benchmark, one_metric):
    pm, arguments = one_metric
    assert benchmark.pedantic(lambda: pm.metric_call("bench-one")(**arguments), rounds=2000, iterations=20) == 1.0
    _record("call-pluggy", benchmark)


@pytest.mark.benchmark(group=CALL_GROUP)
def test_call_direct(benchmark, one_metric):
    pm, arguments = one_metric
    with _direct_calls():
        assert benchmark.pedantic(lambda: pm.metric_call("bench-one")(**arguments), rounds=2000, iterations=20) == 1.0
    _record("call-direct", benchmark)
