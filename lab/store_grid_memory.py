"""The peak memory and time of a grid from an activation store whose entries are larger than it should hold.

Writes two 200,000 x 512 float32 entries into ``STORE`` (``Store.put``, chunk by chunk) unless they are there,
then runs ``compare_grid`` on the pair from the store alone in a fresh interpreter that reads its own peak
resident set (VmHWM after ``clear_refs``), and prints each metric's score, whether it streamed, the wall and CPU
time and the peak growth.

Run from the repository root: ``PYTHONPATH=. python lab/store_grid_memory.py STORE cka-linear,procrustes``.
Results: ``docs/lab/store_extraction.md``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import textwrap

import numpy as np

import similarity_plugins as sp

CHILD = textwrap.dedent("""
    import sys, time
    import similarity_plugins as sp

    def status(field):
        with open("/proc/self/status") as fh:
            return next(int(line.split()[1]) * 1024 for line in fh if line.startswith(field))

    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")
    start, wall, cpu = status("VmRSS:"), time.perf_counter(), time.process_time()
    grid = sp.compare_grid(metrics=sys.argv[2].split(","), pairs=[(("a", "l"), ("b", "l"))], store=sys.argv[1])
    print({r.metric: (round(r.score, 6), r.details.get("streamed")) for r in grid.report.results})
    print(f"wall {time.perf_counter() - wall:.1f} s, cpu {time.process_time() - cpu:.1f} s, "
          f"peak RSS growth {(status('VmHWM:') - start) / 2**20:.0f} MiB")
""")


def chunks(seed: int, n: int = 200_000, d: int = 512, block: int = 10_000):
    """Rows of one entry: a part shared by both entries plus one of its own (linear CKA about 0.25)."""
    rng, shared = np.random.default_rng(seed), np.random.default_rng(99)
    for _ in range(0, n, block):
        yield shared.standard_normal((block, d), dtype=np.float32) + rng.standard_normal((block, d), dtype=np.float32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store")
    parser.add_argument("metrics", nargs="?", default="cka-linear")
    args = parser.parse_args()
    store = sp.Store.create(args.store)
    for name, seed in (("a", 1), ("b", 2)):
        if name not in store.models:
            store.put(name, "l", chunks(seed))
    subprocess.run([sys.executable, "-c", CHILD, os.fspath(args.store), args.metrics], check=True)


if __name__ == "__main__":
    main()
