"""pytest-benchmark benchmarks: run with ``python -m pytest benchmarks --benchmark-only``."""
