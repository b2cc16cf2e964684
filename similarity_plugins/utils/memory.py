"""Keep freed memory in the process while a loop allocates and frees the same large tensors every step.

glibc's ``malloc`` serves PyTorch's CPU tensors; by default it gives freed memory at the top of the heap
back to the kernel as soon as 128 KiB are free (``M_TRIM_THRESHOLD``) and serves large blocks with fresh
``mmap`` calls, so a loop whose steps allocate and free megabytes of activations and gradients takes the
same pages back every step, each a page fault that the kernel zeroes: on small models a large share of the
loop's time, more when two ranks fault at once. `kept_heap` serves blocks
up to 1 GiB from the heap (``M_MMAP_THRESHOLD``) and keeps up to 256 MiB free at its top
(``M_TRIM_THRESHOLD``) while the loop runs; on leaving it returns the free memory with ``malloc_trim`` and
lowers the thresholds to the values that glibc's own adaptive rule reaches for large blocks (mmap threshold
32 MiB, trim threshold twice that). Process-wide settings of the C library (no tensor, model or RNG is
touched); elsewhere (not glibc) it does nothing.
"""

from __future__ import annotations

import ctypes
import platform
from contextlib import contextmanager
from typing import Iterator

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
MMAP_INSIDE, KEEP = 1 << 30, 256 << 20
MMAP_THRESHOLD = 32 << 20   # glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit systems
_STATE = {"depth": 0, "libc": None}


def _libc() -> ctypes.CDLL | None:
    if _STATE["libc"] is None:
        try:
            _STATE["libc"] = ctypes.CDLL("libc.so.6") if platform.libc_ver()[0] == "glibc" else False
        except OSError:
            _STATE["libc"] = False
    return _STATE["libc"] or None


@contextmanager
def kept_heap() -> Iterator[None]:
    """Inside: blocks below 1 GiB come from the heap and freed heap memory stays in the process (up to 256 MiB
    at its top); on leaving, free memory goes back to the kernel. Nested uses act once."""
    libc = _libc()
    _STATE["depth"] += 1
    try:
        if libc is not None and _STATE["depth"] == 1:
            libc.mallopt(M_MMAP_THRESHOLD, MMAP_INSIDE)
            libc.mallopt(M_TRIM_THRESHOLD, KEEP)
        yield
    finally:
        _STATE["depth"] -= 1
        if libc is not None and _STATE["depth"] == 0:
            libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
            libc.mallopt(M_TRIM_THRESHOLD, 2 * MMAP_THRESHOLD)
            libc.malloc_trim(0)
