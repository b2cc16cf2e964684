"""Every registered metric on the standard ``small`` workload (the ``similarity_benchmark`` fixture), so its
cost is tracked with the other benchmarks: ``python -m pytest benchmarks/bench_metrics.py`` saves the run
(``--benchmark-autosave`` in benchmarks/pytest.ini); add ``--benchmark-compare --benchmark-compare-fail=mean:20%``
to compare a change with the last saved run. About a minute on 2 cores (docs/results/speed.md has the figures);
``similarity-plugins bench`` runs the same benchmarks from the command line.
"""

from __future__ import annotations

import pytest

from similarity_plugins import list_metrics


@pytest.mark.parametrize("metric", list_metrics())
def test_metric_small(similarity_benchmark, metric):
    result = similarity_benchmark(metric)
    assert result.error is None
