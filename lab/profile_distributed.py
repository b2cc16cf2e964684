"""Where the time of a sharded ``generate_iris`` goes: one rank of 2 gloo ranks against one process on the same share.

Run: ``OMP_NUM_THREADS=1 python lab/profile_distributed.py`` (env ``DIST_BENCH_SEEDS`` (64),
``DIST_BENCH_STEPS`` (150)). The one process optimises ``seeds[:N/2]`` (the first rank's share of the
contiguous split, the same work) and the ranks the whole set; every process runs one thread. Phases are
``time.perf_counter`` spans around the library's own functions (wrapped here, not edited):

- start-up: process spawn, imports, group set-up, model and data (not part of the timed call);
- checks+hashing: the cache key and the cross-rank weights/seeds check (``sharded._digest`` and its exchange);
- trace+front copy: ``trace_front`` and ``private_front`` (the traced, folded copy the optimiser runs);
- optimizer loop: ``optimize_iris`` (the rank's share);
- waiting: in the gather, until the last rank arrives (each rank stamps ``time.time()`` on entering);
- gather: the rest of the gather (pickling, transfer, concatenation);
- teardown: the barrier after the call and ``destroy_process_group``.

``user_s`` / ``sys_s`` are the process's CPU times over the timed call (``os.times``), ``page_faults`` its
minor page faults (``getrusage``).
"""

from __future__ import annotations

import datetime
import json
import os
import resource
import sys
import tempfile
import time
from collections import defaultdict

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
from bench_distributed import STEPS, _free_port, _setup  # noqa: E402

SPANS: dict[str, float] = defaultdict(float)


def _wrap(module, name: str, phase: str) -> None:
    inner = getattr(module, name)

    def timed(*args, **kwargs):
        start = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            SPANS[phase] += time.perf_counter() - start

    setattr(module, name, timed)


def _instrument() -> dict:
    """Wrap the phases' functions; returns the gather stamps (enter time per call) for the waiting split."""
    from similarity_plugins.distributed import world as dworld
    from similarity_plugins.iri import generate, sharded, store
    from similarity_plugins.networks import parallel

    _wrap(generate, "trace_front", "trace+front copy")
    _wrap(generate, "private_front", "trace+front copy")
    _wrap(generate, "optimize_iris", "optimizer loop")
    _wrap(store, "fingerprint", "checks+hashing")
    _wrap(sharded, "_digest", "checks+hashing")
    _wrap(parallel, "module_digest", "checks+hashing")
    stamps: dict = {"gathers": []}
    inner = dworld.TorchWorld._all_gather_objects

    def gather(self, obj):
        enter = time.time()
        start = time.perf_counter()
        out = inner(self, [enter, obj])
        SPANS["gather (incl. waiting)"] += time.perf_counter() - start
        last = max(o[0] for o in out)
        SPANS["waiting"] += max(0.0, last - enter)
        return [o[1] for o in out]

    dworld.TorchWorld._all_gather_objects = gather
    return stamps


def _call(front, seeds) -> dict:
    from similarity_plugins.iri import generate_iris

    t0, c0, f0 = time.perf_counter(), os.times(), resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    iris = generate_iris(front, "block3", seeds, steps=STEPS, tol=1e-9, batch_size=32, progress="never")
    c1, f1 = os.times(), resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    return {"call_s": time.perf_counter() - t0, "user_s": c1.user - c0.user, "sys_s": c1.system - c0.system,
            "page_faults": f1 - f0, "seeds_run": len(iris.stats.get("rows", [])) or None,
            "share": int(iris.stats.get("sample_steps", 0)), "rank_wall_s": iris.stats.get("rank_wall_s")}


def _worker(rank: int, port: int, out: str, spawned: float) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=600))
    import similarity_plugins  # noqa: F401

    front, _, _, seeds = _setup()
    _instrument()
    startup = time.time() - spawned
    dist.barrier()
    figures = _call(front, seeds)
    t0 = time.perf_counter()
    dist.barrier()
    SPANS["teardown"] += time.perf_counter() - t0
    t0 = time.perf_counter()
    dist.destroy_process_group()
    SPANS["teardown"] += time.perf_counter() - t0
    with open(os.path.join(out, f"rank{rank}.json"), "w") as fh:
        json.dump({"start-up": startup, **figures, **SPANS}, fh)
    os._exit(0)


def measure() -> dict:
    """Per-phase seconds of one process (half the seeds) and of each of 2 ranks (all the seeds)."""
    torch.set_num_threads(1)
    spawned = time.time()
    import similarity_plugins  # noqa: F401

    front, _, _, seeds = _setup()
    startup = time.time() - spawned
    _instrument()
    one = {"start-up": startup, **_call(front, seeds[: -(-len(seeds) // 2)]), **SPANS}
    SPANS.clear()
    out = tempfile.mkdtemp(prefix="profile-dist-")
    mp.start_processes(_worker, args=(_free_port(), out, time.time()), nprocs=2, join=True, start_method="spawn")
    ranks = [json.load(open(os.path.join(out, f"rank{r}.json"))) for r in range(2)]
    return {"one process (share)": one, "rank 0": ranks[0], "rank 1": ranks[1]}


def _print(result: dict) -> None:
    phases = ["start-up", "checks+hashing", "trace+front copy", "optimizer loop", "waiting", "gather (incl. waiting)",
              "teardown", "call_s", "user_s", "sys_s", "page_faults"]
    names = list(result)
    print(f"{'phase':>24} " + " ".join(f"{n:>20}" for n in names))
    for p in phases:
        print(f"{p:>24} " + " ".join(f"{float(result[n].get(p, 0.0)):20.3f}" for n in names))


if __name__ == "__main__":
    _print(measure())
