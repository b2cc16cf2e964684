"""Scale out on one machine: 2 gloo ranks of one thread each against one process of one thread, same run.

Run: ``python -m pytest benchmarks/bench_distributed.py --benchmark-only -s`` or
``python benchmarks/bench_distributed.py`` (a few minutes on 2 cores).

Cases (the SmallCNN of the zoo, width 32, untrained, on scikit-learn digits at 1x32x32, cut at ``block3``):
- IRIs: ``generate_iris`` of ``DIST_BENCH_SEEDS`` (64) seeds for ``DIST_BENCH_STEPS`` (150) steps with
  ``tol=1e-9`` so every sample uses its whole budget (the same work whatever the convergence);
  target: speedup >= 1.8 (one process time / 2-rank time);
- stitching: one epoch of ``stitch-hlm`` (``compare`` with ``epochs=1``) on ``DIST_BENCH_TRAIN`` (1024)
  training images: the fit time (``fit_seconds``: caching the front/end activations, least-squares
  init and the epoch) and the whole call. Data-parallel stitching exchanges the stitch's gradient every
  step (one all-reduce of ~4 KiB here), so its speedup is lower: it is reported as measured.

Times are measured inside the ranks between two barriers (process start-up and group set-up excluded;
the ``*_with_startup`` figures include them). The machine is shared with other jobs: compare the ratios
of one run, not absolute times. ``*_work_speedup`` divides the one process's CPU time by the busiest
rank's CPU time (``time.process_time``): what the speedup would be with a free core per rank, which a
busy shared machine does not distort as much as wall time (it ignores time spent waiting for a core).
"""

from __future__ import annotations

import datetime
import os
import socket
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

SEEDS = int(os.environ.get("DIST_BENCH_SEEDS", "64"))
STEPS = int(os.environ.get("DIST_BENCH_STEPS", "150"))
TRAIN = int(os.environ.get("DIST_BENCH_TRAIN", "1024"))


def _setup():
    from torch.utils.data import Subset

    from similarity_plugins import Data
    from similarity_plugins.apps.zoo import SmallCNN
    from similarity_plugins.core.data import load_all
    from similarity_plugins.datasets import digits_data

    torch.manual_seed(0)
    front = SmallCNN(in_channels=1, num_classes=10, width=32)
    torch.manual_seed(1)
    end = SmallCNN(in_channels=1, num_classes=10, width=32)
    data = digits_data(size=32)
    data = Data(train=Subset(data.train, range(min(TRAIN, len(data.train)))), test=data.test)
    seeds = load_all(Subset(data.train, range(SEEDS)))[0]
    torch.optim.Adam([torch.zeros(1, requires_grad=True)])  # warm-up: the first Adam imports torch._dynamo (s)
    return front, end, data, seeds


def _iris(front, seeds):
    from similarity_plugins.iri import generate_iris

    start, cpu = time.perf_counter(), time.process_time()
    iris = generate_iris(front, "block3", seeds, steps=STEPS, tol=1e-9, batch_size=32, progress=False)
    return time.perf_counter() - start, time.process_time() - cpu, iris


def _stitch(front, end, data):
    from similarity_plugins import compare

    start, cpu = time.perf_counter(), time.process_time()
    report = compare(front, end, "block3", data, "stitch-hlm", options={"epochs": 1})
    result = report.results[0]
    assert result.error is None, result.error
    return time.perf_counter() - start, time.process_time() - cpu, float(result.details["fit_seconds"]), float(result.score)


def _worker(rank: int, port: int, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=600))
    import similarity_plugins  # noqa: F401 - registers the torch.distributed world

    front, end, data, seeds = _setup()
    dist.barrier()
    iri_s, iri_cpu, iris = _iris(front, seeds)
    dist.barrier()
    stitch_s, stitch_cpu, fit_s, score = _stitch(front, end, data)
    cpu: list = [None, None]
    dist.all_gather_object(cpu, (iri_cpu, stitch_cpu))
    if rank == 0:
        torch.save({"iri_s": iri_s, "stitch_s": stitch_s, "fit_s": fit_s, "score": score, "cpu": cpu,
                    "inputs": iris.inputs, "rank_wall_s": iris.stats.get("rank_wall_s")}, os.path.join(out, "r0.pt"))
    from similarity_plugins.distributed.world import end_rank_process

    end_rank_process(0)  # destroys the group; no interpreter teardown that could abort a finished rank


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def measure() -> dict:
    """Run both configurations; returns the times (s) and speedups (one process / two ranks)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        front, end, data, seeds = _setup()
        one_iri_s, one_iri_cpu, one_iris = _iris(front, seeds)
        one_stitch_s, one_stitch_cpu, one_fit_s, one_score = _stitch(front, end, data)
    finally:
        torch.set_num_threads(threads)
    out = tempfile.mkdtemp(prefix="bench-dist-")
    start = time.perf_counter()
    mp.start_processes(_worker, args=(_free_port(), out), nprocs=2, join=True, start_method="spawn")
    with_startup = time.perf_counter() - start
    two = torch.load(os.path.join(out, "r0.pt"), weights_only=False)
    return {
        "seeds": SEEDS, "steps": STEPS, "train": TRAIN,
        "iri_one_s": one_iri_s, "iri_two_s": two["iri_s"], "iri_speedup": one_iri_s / two["iri_s"],
        "iri_rank_wall_s": two["rank_wall_s"],
        "iri_max_abs_diff": float((two["inputs"] - one_iris.inputs).abs().max()),
        "stitch_one_s": one_stitch_s, "stitch_two_s": two["stitch_s"], "stitch_speedup": one_stitch_s / two["stitch_s"],
        "fit_one_s": one_fit_s, "fit_two_s": two["fit_s"], "fit_speedup": one_fit_s / two["fit_s"],
        "iri_cpu_one_s": one_iri_cpu, "iri_cpu_per_rank_s": [c[0] for c in two["cpu"]],
        "iri_work_speedup": one_iri_cpu / max(c[0] for c in two["cpu"]),
        "stitch_cpu_one_s": one_stitch_cpu, "stitch_cpu_per_rank_s": [c[1] for c in two["cpu"]],
        "stitch_work_speedup": one_stitch_cpu / max(c[1] for c in two["cpu"]),
        "stitch_score_one": one_score, "stitch_score_two": two["score"],
        "two_ranks_with_startup_s": with_startup,
    }


def _print(figures: dict) -> None:
    print("\nscale out, 2 gloo ranks x 1 thread vs 1 process x 1 thread (shared machine: ratios only)")
    for key, value in figures.items():
        print(f"  {key:>26}: {value:.4g}" if isinstance(value, float) else f"  {key:>26}: {value}")


def test_distributed_speedup(benchmark):
    figures = benchmark.pedantic(measure, rounds=1, iterations=1)
    benchmark.extra_info.update(figures)
    _print(figures)
    assert figures["iri_max_abs_diff"] < 0.05  # same IRIs up to batch-composition rounding


if __name__ == "__main__":
    _print(measure())
