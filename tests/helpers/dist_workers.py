"""Workers for tests/distributed/test_distributed.py: each runs on one rank of a gloo group on 127.0.0.1.

Kept in their own module so that ``torch.multiprocessing`` (spawn) can import them in the children.
A worker writes its outcome to ``{out}/rank{r}.pt``; errors are recorded there, not raised, so the test
can check that every rank reports the same one.
"""

from __future__ import annotations

import datetime
import os
import socket
import time
from typing import Any, Callable

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.utils.data import Subset

STITCH_OPTIONS = {"epochs": 2, "batch_size": 16, "ls_samples": 64, "iri_steps": 25, "iri_tol": 0.05,
                  "iri_batch_size": 8, "iri_max_seeds": 40, "svcca": {"dims": 5}}
METRICS = "cka-linear,cka-debiased,cka-rbf,procrustes,svcca,rsa,linear-regression,mutual-knn,stitch-hlm,stitch-dm,iri-slm"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def small_setup(n_train: int = 96, n_test: int = 64):
    """Two untrained width-8 SmallCNNs (different seeds) and a digits Data at 16x16."""
    from similarity_plugins import Data
    from similarity_plugins.apps.zoo import SmallCNN
    from similarity_plugins.datasets import digits_data

    torch.manual_seed(0)
    front = SmallCNN(in_channels=1, num_classes=10, width=8)
    torch.manual_seed(1)
    end = SmallCNN(in_channels=1, num_classes=10, width=8)
    data = digits_data(size=16)
    data = Data(train=Subset(data.train, range(n_train)), test=Subset(data.test, range(n_test)))
    return front, end, data


def seeds_tensor(n: int = 10) -> torch.Tensor:
    from similarity_plugins.networks.data import load_all

    _, _, data = small_setup()
    return load_all(Subset(data.train, range(n)))[0]


def rows(report) -> list[tuple]:
    """(metric, layer, score, error, details) of every row (details without run times)."""
    out = []
    for r in report:
        details = {k: v for k, v in r.details.items() if k not in ("fit_seconds",)}
        out.append((r.metric, r.layer, r.score, r.error, details))
    return out


def iri_state(iris) -> dict:
    return {"inputs": iris.inputs.cpu(), "rel_error": iris.rel_error, "steps": iris.steps}


# --------------------------------------------------------------------------- scenarios (run on every rank)
def scenario_compare(rank: int, cache_dir: str) -> Any:
    from similarity_plugins import compare

    front, end, data = small_setup()
    return rows(compare(front, end, "block2", data, METRICS, options=STITCH_OPTIONS))


def scenario_iris(rank: int, cache_dir: str) -> Any:
    from similarity_plugins.iri import generate_iris

    front, _, _ = small_setup()
    seeds = seeds_tensor(10)
    one = generate_iris(front, "block2", seeds, steps=15, batch_size=1, progress="never")
    shuffled = generate_iris(front, "block2", seeds, steps=15, batch_size=1, init="shuffle", progress="never")
    lbfgs = generate_iris(front, "block2", seeds, steps=15, batch_size=1, optimizer="lbfgs", progress="never")
    batched = generate_iris(front, "block2", seeds, steps=15, batch_size=4, progress="never")
    single_seed = generate_iris(front, "block2", seeds[:1], steps=5, progress="never")  # rank 1 has no share
    cached = generate_iris(front, "block2", seeds, steps=10, progress="never", cache_dir=cache_dir)
    again = generate_iris(front, "block2", seeds, steps=10, progress="never", cache_dir=cache_dir)
    resumed = _interrupted_then_resumed(front, seeds, os.path.join(cache_dir, "ckpt"))
    return {"one": iri_state(one), "resumed": resumed, "shuffle": iri_state(shuffled),
            "lbfgs": iri_state(lbfgs), "batched": iri_state(batched),
            "single_seed": iri_state(single_seed), "cached": iri_state(cached),
            "again_from_cache": bool(again.stats.get("from_cache")), "again": iri_state(again),
            "files": sorted(os.listdir(cache_dir))}


def _interrupted_then_resumed(front, seeds, folder: str) -> dict:
    """Stop both ranks at batch step 6 (checkpoints every 2), then run again: each rank resumes its share."""
    from similarity_plugins.iri import generate_iris

    def stop(info):
        if info["step"] == 6:
            raise RuntimeError("simulated interruption")

    kw = dict(steps=15, batch_size=2, progress="never", cache_dir=folder, checkpoint_every=2)
    try:
        generate_iris(front, "block2", seeds, callback=stop, **kw)
        interrupted = "not interrupted"
    except RuntimeError as exc:
        interrupted = str(exc)
    checkpoints = sorted(f for f in os.listdir(folder) if ".ckpt" in f)
    iris = generate_iris(front, "block2", seeds, **kw)
    return {"interrupted": interrupted, "checkpoints": checkpoints, "resumed": bool(iris.stats.get("resumed")),
            **iri_state(iris), "left": sorted(os.listdir(folder))}


def scenario_slow_rank(rank: int, cache_dir: str) -> Any:
    """Rank 1 sleeps 40 ms in every evaluation of its working batch: it must take fewer seeds, the set is the same."""
    from similarity_plugins.iri import generate_iris, run

    front, _, _ = small_setup()
    if rank == 1:
        inner = run.evaluate

        def slow(*args, **kwargs):
            time.sleep(0.04)
            return inner(*args, **kwargs)

        run.evaluate = slow
    iris = generate_iris(front, "block2", seeds_tensor(10), steps=15, batch_size=1, progress="never")
    return {**iri_state(iris), "rank_seeds": iris.stats["rank_seeds"]}


def scenario_tiny(rank: int, cache_dir: str) -> Any:
    """More ranks than samples: 1 test sample, 1 training sample (rank 1 has empty shares everywhere)."""
    return tiny_results()


def tiny_results() -> dict:
    from similarity_plugins import Data
    from similarity_plugins.host.results import LayerPair
    from similarity_plugins.networks.context import Context
    from similarity_plugins.stitch.service import fitted_stitch

    front, end, data = small_setup()
    tiny = Data(train=Subset(data.train, range(1)), test=Subset(data.test, range(1)))
    context = Context(tiny)
    fitted = fitted_stitch(context, front, end, LayerPair("block2", "block2"), "dm",
                           {"epochs": 2, "batch_size": 1, "ls_samples": 1})
    return {"acts": context.activations(front, "block2"), "logits": context.outputs(end)[0],
            "stitch": {k: v.detach().clone() for k, v in fitted.stitch.state_dict().items()},
            "losses": list(fitted.losses)}


def scenario_mismatch(rank: int, cache_dir: str) -> Any:
    from similarity_plugins import compare

    front, end, data = small_setup()
    if rank == 1:
        with torch.no_grad():
            front.fc.bias.add_(1.0)
    compare(front, end, "block2", data, "cka-linear")
    return "no error"


def scenario_one_rank_fails(rank: int, cache_dir: str) -> Any:
    """A plugin that fails on rank 1 only, after which rank 0 enters a collective; then a normal metric."""
    from similarity_plugins import compare, hookimpl, register_metric

    class FailsOnRankOne:
        @hookimpl
        def similarity(self, front, end, layer, context):
            if context.world.rank == 1:
                raise ValueError("deliberate failure on rank 1")
            return float(context.activations(front, layer.front).mean())  # a collective on rank 0

    register_metric(FailsOnRankOne(), "fails-on-one")
    front, end, data = small_setup()
    return rows(compare(front, end, "block2", data, "fails-on-one,cka-linear"))


def scenario_rank_dies(rank: int, cache_dir: str) -> Any:
    from similarity_plugins.iri import generate_iris

    front, _, _ = small_setup()
    if rank == 1:
        os._exit(3)  # dies before the collective
    generate_iris(front, "block2", seeds_tensor(4), steps=5, progress="never")
    return "no error"


def scenario_rank_timeout(rank: int, cache_dir: str) -> Any:
    """A metric that hangs on rank 1 only, under compare(timeout=1): both ranks get the timeout row at once and
    skip the later metric (its collectives could pair up with the abandoned call); returns (rows, seconds)."""
    import time

    from similarity_plugins import compare, hookimpl, register_metric

    class HangsOnRankOne:
        @hookimpl
        def similarity(self, context):
            if context.world.rank == 1:
                time.sleep(20)
            return 1.0

    register_metric(HangsOnRankOne(), "hangs-on-one")
    front, end, data = small_setup()
    start = time.perf_counter()
    report = compare(front, end, "block2", data, "hangs-on-one,cka-linear", timeout=1.0)
    return rows(report), time.perf_counter() - start


GRID_METRICS = "cka-linear,cka-debiased,procrustes,rsa,stitch-hlm"
GRID_OPTIONS = {"epochs": 1, "batch_size": 16}


def scenario_grid(rank: int, cache_dir: str) -> Any:
    """A 2-model x 2-layer grid (cells shared out between the ranks): each metric's matrix, and who computed what."""
    from similarity_plugins import compare_grid

    front, end, data = small_setup()
    grid = compare_grid({"a": front, "b": end}, ["block2", "block3"], data, GRID_METRICS, options=GRID_OPTIONS)
    return {"matrices": {m: grid.matrix(m) for m in grid.metrics},
            "errors": [c.error for c in grid.cells.values() if c.error],
            "ranks": sorted({c.details.get("rank") for c in grid.cells.values() if not c.details.get("mirrored")})}


def scenario_grid_resume(rank: int, cache_dir: str) -> Any:
    """A grid with a finished-cells file, run three times on both ranks: fresh, resumed whole, and resumed after
    rank 0 cut the file to its first three cells; the cells each rank computed each time, and the matrices."""
    from similarity_plugins import compare_grid, register_metric
    from tests.helpers.metrics import observed_cka

    calls: list[int] = []
    register_metric(observed_cka(lambda context: calls.append(1)), "counted-cka", replace=True)
    front, end, data = small_setup()
    path = os.path.join(cache_dir, "cells.jsonl")
    counts, matrices = [], []
    for step in range(3):
        if step == 2 and rank == 0:
            with open(path, encoding="utf-8") as fh:
                lines = fh.read().splitlines()
            with open(path, "w", encoding="utf-8") as fh:
                fh.write("\n".join(lines[:4]) + "\n")  # the header and three cells
        dist.barrier()
        calls.clear()
        grid = compare_grid({"a": front, "b": end}, ["block2", "block3"], data, "counted-cka", resume=path)
        counts.append(len(calls))
        matrices.append(grid.matrix("counted-cka"))
        dist.barrier()
    return {"counts": counts, "matrices": matrices}


def scenario_extract(rank: int, cache_dir: str) -> Any:
    """Both ranks extract two models into one store (batches shared out), extract again (no forward), then a grid
    from the store alone (cells shared out); samples forwarded per call, and the grid's matrices."""
    import importlib

    from similarity_plugins import compare_grid, extract

    extract_module = importlib.import_module("similarity_plugins.store.extract")

    front, end, data = small_setup()
    counts, inner = [], extract_module.fill_model

    def counted(*args, **kwargs):
        made = inner(*args, **kwargs)
        counts.append(made["forwarded"])
        return made

    extract_module.fill_model = counted
    try:
        folder = os.path.join(cache_dir, "store")
        extract({"a": front, "b": end}, ["block2", "block3"], data, folder, batch_size=16)
        extract({"a": front, "b": end}, ["block2", "block3"], data, folder, batch_size=16)
    finally:
        extract_module.fill_model = inner
    grid = compare_grid(None, None, None, "cka-linear,procrustes", store=folder)
    return {"counts": counts, "folder": folder, "matrices": {m: grid.matrix(m) for m in grid.metrics},
            "ranks": sorted({c.details.get("rank") for c in grid.cells.values() if not c.details.get("mirrored")})}


def text_setup() -> tuple[dict, dict, Any, Any]:
    """Two tiny language models with different tokenizers, a ViT, the Zen of Python as captions of 19 images."""
    import similarity_plugins as sp
    from tests.helpers.hf_models import byt5, small_bpe, tiny_bert, tiny_gpt2, tiny_vit, zen_lines

    lines = zen_lines()
    byte_tok, bpe = byt5(), small_bpe(lines)
    gpt = sp.hf(tiny_gpt2(len(byte_tok)), tokenizer=byte_tok)
    bert = sp.hf(tiny_bert(len(bpe)), tokenizer=bpe, pooling="first")
    vit = sp.hf(tiny_vit(), pooling="mean")
    images = torch.rand(len(lines), 3, 16, 16, generator=torch.Generator().manual_seed(4))
    models, layers = {"gpt": gpt, "bert": bert, "vit": vit}, {"gpt": ["h.0", "h.1"], "bert": ["encoder.layer.1"],
                                                             "vit": ["layers.1"]}
    text = sp.text_data(lines)
    paired = sp.paired_data({"image": images, "text": lines})
    return models, layers, text, paired


TEXT_METRICS = "cka-linear,procrustes,rsa"


def scenario_text_grid(rank: int, cache_dir: str) -> Any:
    """Grids on text (two tokenizers) and on image-caption pairs (a ViT against the language models), with a
    permutation test: each rank's matrices and p-values, and which ranks computed cells."""
    from similarity_plugins import compare_grid

    models, layers, text, paired = text_setup()
    language = {k: models[k] for k in ("gpt", "bert")}
    on_text = compare_grid(language, {k: layers[k] for k in language}, text, TEXT_METRICS,
                           options={"permutations": 9})
    on_pairs = compare_grid(models, layers, paired, TEXT_METRICS, pairs="across")
    return {"text": {m: on_text.matrix(m) for m in on_text.metrics},
            "text_p": on_text.p_values("cka-linear"),
            "pairs": {m: on_pairs.matrix(m) for m in on_pairs.metrics},
            "errors": [c.error for g in (on_text, on_pairs) for c in g.cells.values() if c.error],
            "ranks": sorted({c.details.get("rank") for c in on_text.cells.values() if not c.details.get("mirrored")})}


CALIBRATED_METRICS = "cka-linear,cka-debiased,mutual-knn,cknna"
CALIBRATED_OPTIONS = {"permutations": 19, "topk": 5}


def scenario_calibrated_grid(rank: int, cache_dir: str) -> Any:
    """A permutation-tested grid: each metric's calibrated matrix and its block's calibrated max and mean."""
    from similarity_plugins import compare_grid

    front, end, data = small_setup()
    grid = compare_grid({"a": front, "b": end}, ["block2", "block3"], data, CALIBRATED_METRICS,
                        options=CALIBRATED_OPTIONS)
    return {"calibrated": {m: grid.calibrated(m) for m in grid.metrics},
            "aggregates": {(m, agg): grid.aggregate(m, "a", "b", agg) for m in grid.metrics for agg in ("max", "mean")},
            "errors": [c.error for c in grid.cells.values() if c.error],
            "ranks": sorted({c.details.get("rank") for c in grid.cells.values() if not c.details.get("mirrored")})}


SCENARIOS: dict[str, Callable[[int, str], Any]] = {
    "grid": scenario_grid, "extract": scenario_extract, "text_grid": scenario_text_grid,
    "calibrated_grid": scenario_calibrated_grid,
    "grid_resume": scenario_grid_resume,
    "rank_timeout": scenario_rank_timeout,
    "compare": scenario_compare, "iris": scenario_iris, "tiny": scenario_tiny, "mismatch": scenario_mismatch,
    "one_rank_fails": scenario_one_rank_fails, "rank_dies": scenario_rank_dies, "slow_rank": scenario_slow_rank,
}


def ok_values(results: dict[int, dict[str, Any]], name: str, world: int = 2) -> tuple:
    """Each rank's value of scenario ``name`` from `run_ranks`'s ``results``; fails naming the rank that did not
    return one or that raised."""
    values = []
    for r in range(world):
        outcome = results.get(r, {}).get(name)
        assert outcome is not None and outcome[0] == "ok", f"rank {r} failed {name}: {outcome}"
        values.append(outcome[1])
    return tuple(values)


# --------------------------------------------------------------------------- process plumbing
def _worker(rank: int, world: int, port: int, out: str, names: list[str], timeout_s: float) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=timeout_s))
    import similarity_plugins  # noqa: F401 - registers the torch.distributed world

    results: dict[str, Any] = {}
    cache_dir = os.path.join(out, "cache")
    for name in names:
        try:
            results[name] = ("ok", SCENARIOS[name](rank, cache_dir))
        except Exception as exc:  # noqa: BLE001 - recorded for the test
            results[name] = ("error", f"{type(exc).__name__}: {exc}")
        torch.save(results, os.path.join(out, f"rank{rank}.pt"))
    dist.destroy_process_group()


def run_ranks(names: list[str], out: str, world: int = 2, timeout_s: float = 60.0,
              join_timeout_s: float = 240.0) -> dict[int, dict[str, Any]]:
    """Run the scenarios ``names`` on ``world`` gloo ranks; returns each rank's results (killing stragglers)."""
    os.makedirs(os.path.join(out, "cache"), exist_ok=True)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    context = mp.start_processes(_worker, args=(world, free_port(), out, names, timeout_s), nprocs=world,
                                 join=False, start_method="spawn")
    deadline = time.monotonic() + join_timeout_s
    try:
        while not all(not p.is_alive() for p in context.processes):
            if time.monotonic() > deadline:
                raise TimeoutError(f"distributed workers still running after {join_timeout_s} s")
            time.sleep(0.2)
    finally:
        for p in context.processes:
            if p.is_alive():
                p.kill()
                p.join(5)
    results = {}
    for rank in range(world):
        path = os.path.join(out, f"rank{rank}.pt")
        results[rank] = torch.load(path, weights_only=False) if os.path.exists(path) else {}
    return results
