"""Benchmark registered metrics (built-in and third-party alike) on standard workloads with pytest-benchmark:
the ``similarity-plugins bench`` command and the ``similarity_benchmark`` pytest fixture (see docs/benchmarking.md)."""

from .workloads import DEFAULT_WORKLOAD, WORKLOADS, Donors, Workload, get_workload

__all__ = ["DEFAULT_WORKLOAD", "WORKLOADS", "Donors", "Workload", "get_workload"]
