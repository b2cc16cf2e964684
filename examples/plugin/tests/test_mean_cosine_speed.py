"""The example plugin benchmarked by similarity-plugins' pytest plugin (the README's "benchmark your metric
in 3 lines"). Run ``python -m pytest tests`` with the package installed; add ``--benchmark-autosave`` to
keep the run and ``--benchmark-compare`` to compare a later one with it."""


def test_mean_cosine_speed(similarity_benchmark):
    result = similarity_benchmark("mean-cosine")  # the default workload: two small CNNs on digits
    assert result.error is None and -1.0 <= result.score <= 1.0
