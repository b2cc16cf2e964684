"""The pytest module that ``similarity-plugins bench`` runs: one benchmark per (workload, metric).

Not collected by the project's own test runs (its name does not match ``test_*.py``); the runner passes
it to pytest explicitly and parametrises ``bench_case`` through its plugin object
(`similarity_plugins.apps.bench.runner.BenchPlugin`).
"""


def test_metric(bench_case, benchmark):
    """Time ``bench_case.metric`` on ``bench_case.workload`` (see ``measure.benchmark_metric``)."""
    bench_case.run(benchmark)
