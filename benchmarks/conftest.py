"""pytest-benchmark benchmarks: run with ``python -m pytest benchmarks --benchmark-only``."""

from typing import Iterator

import pytest
import torch


def _threads(n: int) -> Iterator[None]:
    """``n`` intra-op threads until the generator is closed, then the count before."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def one_thread():
    """One intra-op thread for the module that asks (restored after): steadier timings on a shared 2-core machine."""
    yield from _threads(1)


@pytest.fixture(scope="module")
def two_threads():
    """Two intra-op threads for the module that asks (restored after): the paired timings share one setting."""
    yield from _threads(2)
