"""The pytest plugin of similarity-plugins (entry point group ``pytest11``): the ``similarity_benchmark`` fixture.

Active wherever similarity-plugins is installed (disable with ``-p no:similarity_plugins_pytest``). A
top-level package of its own, outside ``similarity_plugins``, so that loading the plugin does not import
the library (torch takes seconds): unrelated test runs pay nothing. In a third party's test file::

    def test_my_metric_speed(similarity_benchmark):
        result = similarity_benchmark("my-metric")                  # default workload "small"
        assert result.error is None

``similarity_benchmark("my-metric", workload="resnet18")`` picks another workload. It runs under
pytest-benchmark's ``benchmark`` fixture (``--benchmark-json``, ``--benchmark-autosave``,
``--benchmark-compare`` ... all apply); see docs/benchmarking.md.
"""

from __future__ import annotations

from typing import Any, Callable

import pytest


@pytest.fixture
def similarity_benchmark(request: pytest.FixtureRequest) -> Callable[..., Any]:
    """A function ``(metric, workload="small", *, rounds=None, warmup_rounds=None, options=None, seed=0)``
    that benchmarks one registered metric on a standard workload with pytest-benchmark and returns its
    :class:`~similarity_plugins.SimilarityResult` (see ``similarity_plugins.apps.bench.measure.benchmark_metric``).

    Use it once per test (pytest-benchmark's fixture times one thing per test). Needs pytest-benchmark.
    """
    try:
        benchmark = request.getfixturevalue("benchmark")
    except pytest.FixtureLookupError:
        pytest.fail("similarity_benchmark needs pytest-benchmark: pip install pytest-benchmark", pytrace=False)

    def run(metric: str, workload: Any = "small", **kwargs: Any) -> Any:
        from similarity_plugins.apps.bench.measure import benchmark_metric

        return benchmark_metric(benchmark, metric, workload, **kwargs)

    return run
