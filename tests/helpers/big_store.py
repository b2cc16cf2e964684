"""The out-of-core store of the bounded-memory tests (tests/measures/test_streamed.py,
tests/runner/grid/test_from_store_stream.py): two 200,000 x 512 float32 entries (800 MB on disk), written once a
session by the ``big_store`` fixture (tests/conftest.py), and their linear CKA computed independently of the
library's streaming code. The tests run the code under test in a fresh interpreter and measure its own peak
memory (:data:`PEAK_GROWTH`)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np

ROWS, DIMS, BLOCK = 200_000, 512, 10_000

#: Python code for a child process: ``peak_growth()`` starts this process's peak (VmHWM) afresh from its resident
#: set and returns a function giving how much the peak grew since, in bytes. ru_maxrss would also count the
#: parent's resident set, copied into the child at fork before exec.
PEAK_GROWTH = '''
def peak_growth():
    def status(field):
        with open("/proc/self/status") as fh:
            return next(int(line.split()[1]) * 1024 for line in fh if line.startswith(field))
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")
    start = status("VmRSS:")
    return lambda: status("VmHWM:") - start
'''


def _chunks(seed: int) -> Iterator[np.ndarray]:
    """(BLOCK, DIMS) float32 blocks: a part shared by both entries plus noise of their own (``seed``)."""
    rng, shared = np.random.default_rng(seed), np.random.default_rng(99)
    for _ in range(0, ROWS, BLOCK):
        yield shared.standard_normal((BLOCK, DIMS), dtype=np.float32) + rng.standard_normal((BLOCK, DIMS), dtype=np.float32)


def write_big_store(folder: Path) -> float:
    """Write entries ``("a", "l")`` and ``("b", "l")`` into a new store in ``folder``, chunk by chunk; returns
    their linear CKA from exact float64 moments summed chunk by chunk (the reference)."""
    from similarity_plugins.store.store import Store

    store = Store.create(folder)
    store.put("a", "l", _chunks(1))
    store.put("b", "l", _chunks(2))
    x, y = store.load("a", "l"), store.load("b", "l")
    n, d = x.shape
    sxx, syy, sxy, sx, sy = np.zeros((d, d)), np.zeros((d, d)), np.zeros((d, d)), np.zeros(d), np.zeros(d)
    for (_, xb), (_, yb) in zip(x.chunks(), y.chunks()):
        xb, yb = np.asarray(xb, np.float64), np.asarray(yb, np.float64)
        sx += xb.sum(0)
        sy += yb.sum(0)
        sxx += xb.T @ xb
        syy += yb.T @ yb
        sxy += xb.T @ yb
    cxx, cyy, cxy = sxx - np.outer(sx, sx) / n, syy - np.outer(sy, sy) / n, sxy - np.outer(sx, sy) / n
    return float((cxy**2).sum() / np.sqrt((cxx**2).sum() * (cyy**2).sum()))
