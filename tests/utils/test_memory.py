"""utils.memory.kept_heap: a loop that frees and reallocates large tensors stops faulting its pages back in."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="kept_heap acts on glibc's malloc only")

_SCRIPT = """
import resource, torch
from similarity_plugins.utils.memory import kept_heap

def step():   # 64 MiB allocated, touched and freed, as a training step does with its activations
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    t = torch.empty(64 << 18)
    t.fill_(1.0)
    del t
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

outside = [step() for _ in range(6)]
with kept_heap():
    with kept_heap():   # nested: acts once
        inside = [step() for _ in range(24)]   # the heap grows for the first steps, then serves them all
    nested_left = [step() for _ in range(3)]
print(sum(outside[3:]), sum(inside[-8:]), sum(nested_left), outside, inside, nested_left)
"""


@pytest.mark.slow  # a fresh interpreter, so that glibc's heap starts from its defaults
def test_kept_heap_keeps_freed_blocks_and_nests():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    outside, inside, nested_left = map(int, proc.stdout.split()[:3])
    steps = proc.stdout.split(None, 3)[3]
    assert outside > 3 * 16384 * 0.9, steps   # glibc's default: each step maps 64 MiB afresh, 16384 pages faulted
    # kept: the last 8 of 24 steps reuse the pages (and after the inner exit). The heap grows while small
    # allocations land in the freed block (for up to several steps, as the heap's layout at start decides) and may
    # grow once more late, so one step's faults are allowed; without kept_heap all 8 would fault
    assert inside < 16384 + 1000 and nested_left < 16384 + 1000, steps
