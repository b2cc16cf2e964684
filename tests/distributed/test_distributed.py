"""Scale out: the same calls sharded over 2 gloo ranks on this CPU equal one process (tests/helpers/dist_workers.py).

One spawn runs several scenarios on both ranks (module fixture); the single-process references run here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from similarity_plugins import compare
from similarity_plugins.cka.streaming import StreamingLinearCKA
from similarity_plugins.iri import generate_iris
from similarity_plugins.networks.parallel import World, shard_range
from tests.helpers import dist_workers as w
from tests.helpers.repo import ROOT, parsed

# the ranks run on one intra-op thread (dist_workers._worker); the single-process references must too, or
# bit-identity checks compare different float reduction orders
pytestmark = [pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed not available"),
              pytest.mark.usefixtures("one_torch_thread")]


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("ranks"))
    results = w.run_ranks(["compare", "iris", "tiny", "mismatch", "one_rank_fails", "slow_rank"], out)
    assert set(results) == {0, 1} and all(results[r] for r in results), f"a rank wrote nothing: {results}"
    return results


# --------------------------------------------------------------------------- pure helpers (no processes)
def test_shard_ranges_partition_and_allow_empty_shares():
    for n, size in [(10, 3), (2, 5), (0, 2), (7, 1)]:
        parts = [shard_range(n, r, size) for r in range(size)]
        assert [i for p in parts for i in p] == list(range(n))
        assert max(map(len, parts)) - min(map(len, parts)) <= 1
    assert len(shard_range(1, 1, 2)) == 0


def test_single_process_world_is_the_identity():
    world = World()
    assert not world.distributed and world.is_main and world.shard(5) == range(5)
    assert world.exchange(lambda: 3, "x") == [3]
    with pytest.raises(ZeroDivisionError):
        world.exchange(lambda: 1 / 0, "x")
    world.check_same("anything", 1)


@pytest.mark.parametrize("debiased", [False, True])
def test_streaming_cka_merge_of_shards_equals_whole(debiased):
    from similarity_plugins.cka import cka

    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 6)) * 3 + 5
    y = x[:, :4] @ rng.normal(size=(4, 3)) + rng.normal(size=(300, 3)) + 2
    ref = cka(x, y, "linear", debiased)
    for cuts in ([0, 100, 300], [0, 7, 150, 300], [0, 0, 300], [0, 290, 300]):  # moments and buffers mixed
        states = []
        for a, b in zip(cuts, cuts[1:]):
            acc = StreamingLinearCKA(debiased)
            for i in range(a, b, 37):
                acc.update(x[i:min(b, i + 37)], y[i:min(b, i + 37)])
            states.append(acc.state_dict())
        merged = StreamingLinearCKA.merged(states, debiased)
        assert merged.n == 300 and abs(merged.compute() - ref) < 1e-12
    constant = StreamingLinearCKA()
    constant.update(np.ones((3, 4)), rng.normal(size=(3, 2)))
    other = StreamingLinearCKA()
    other.update(np.ones((3, 4)) * 2, rng.normal(size=(3, 2)))
    assert not constant.merge(other)._const[0]  # constant in each shard, not overall
    with pytest.raises(ValueError, match="debiased"):
        StreamingLinearCKA(True).merge(other)


def _package_imports(folder: str) -> set[str]:
    """Top-level similarity_plugins subpackages imported by the modules of ``folder`` (relative imports)."""
    import ast

    root = ROOT / "similarity_plugins" / folder
    found = set()
    for path in root.glob("*.py"):
        for node in ast.walk(parsed(path)):
            if isinstance(node, ast.ImportFrom) and node.level >= 2 and node.module:
                found.add(node.module.split(".")[0])
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("similarity_plugins."):
                found.add(node.module.split(".")[1])
    return found


def test_layering_services_know_no_distributed_and_distributed_only_networks():
    for package in ("host", "runner", "networks"):
        assert "distributed" not in _package_imports(package)
    assert _package_imports("distributed") <= {"networks"}


# --------------------------------------------------------------------------- two gloo ranks vs one process
@pytest.mark.slow
def test_compare_on_two_ranks_equals_one_process(ranks):
    rank0, rank1 = w.ok_values(ranks, "compare")
    assert rank0 == rank1  # every rank returns the same, complete report
    front, end, data = w.small_setup()
    single = w.rows(compare(front, end, "block2", data, w.METRICS, options=w.STITCH_OPTIONS))
    for (metric, layer, score, error, details), ref in zip(rank0, single):
        assert (metric, layer, error) == ref[:2] + (None,), (metric, error)
        tol = 0.02 if metric.startswith(("stitch", "iri")) else 1e-10  # CKA and the measures: exact
        assert abs(score - ref[2]) <= tol, (metric, score, ref[2])
        if metric.startswith(("stitch", "iri")):
            assert details["test_size"] == ref[4]["test_size"] and details["train_size"] == ref[4]["train_size"]
            assert abs(details["final_loss"] - ref[4]["final_loss"]) < 1e-4, metric
            assert details["init"]["rows"] == ref[4]["init"]["rows"]
    iri = dict(zip([r[0] for r in rank0], rank0))["iri-slm"][4]
    ref_iri = dict(zip([r[0] for r in single], single))["iri-slm"][4]
    assert abs(iri["iri_median_error"] - ref_iri["iri_median_error"]) < 0.02


@pytest.mark.slow
def test_iris_on_two_ranks_are_the_single_process_iris(ranks, tmp_path):
    rank0, rank1 = w.ok_values(ranks, "iris")
    front, _, _ = w.small_setup()
    seeds = w.seeds_tensor(10)
    for name, kw in [("one", {"batch_size": 1}), ("shuffle", {"batch_size": 1, "init": "shuffle"}),
                     ("lbfgs", {"batch_size": 1, "optimizer": "lbfgs"})]:   # ring histories, folded front
        ref = generate_iris(front, "block2", seeds, steps=15, progress="never", **kw)
        for got in (rank0[name], rank1[name]):  # bit-identical: the same float operations per sample
            assert torch.equal(got["inputs"], ref.inputs) and torch.equal(got["steps"], ref.steps), name
            assert torch.equal(got["rel_error"], ref.rel_error)
    ref = generate_iris(front, "block2", seeds, steps=15, batch_size=4, progress="never")
    batched = rank0["batched"]  # other batch compositions: CPU kernels may round 1 ulp differently
    assert torch.equal(batched["inputs"], rank1["batched"]["inputs"])
    assert float((batched["rel_error"] - ref.rel_error).abs().max()) < 0.02
    assert rank0["single_seed"]["inputs"].shape == (1, *seeds.shape[1:])  # rank 1 had no share
    assert torch.equal(rank0["single_seed"]["inputs"], rank1["single_seed"]["inputs"])


@pytest.mark.slow
def test_a_slow_rank_takes_fewer_seeds_and_the_set_is_unchanged(ranks):
    """Rank 1 sleeps in every evaluation (dist_workers.scenario_slow_rank): the shared seed queue gives it fewer
    seeds than rank 0, and the gathered set is still the one-process set, bit for bit (batch size 1)."""
    rank0, rank1 = w.ok_values(ranks, "slow_rank")
    assert rank0["rank_seeds"] == rank1["rank_seeds"] and sum(rank0["rank_seeds"]) == 10
    fast, slow = rank0["rank_seeds"]
    assert slow < fast, rank0["rank_seeds"]
    front, _, _ = w.small_setup()
    ref = generate_iris(front, "block2", w.seeds_tensor(10), steps=15, batch_size=1, progress="never")
    for got in (rank0, rank1):
        assert torch.equal(got["inputs"], ref.inputs) and torch.equal(got["steps"], ref.steps)
        assert torch.equal(got["rel_error"], ref.rel_error)


def test_seed_queue_hands_out_every_seed_once_in_guided_blocks():
    from similarity_plugins.iri.sharded import SeedQueue

    add = World().counter("q")   # one counter shared by the two queues, as the store shares it between ranks
    a, b = SeedQueue(np.arange(10) * 2, add, 2), SeedQueue(np.arange(10) * 2, add, 2)
    assert a.claim(8).tolist() == [0, 2, 4, 6, 8]   # at most ceil(remaining / ranks)
    assert b.claim(8).tolist() == [10, 12, 14]
    assert a.claim(1).tolist() == [16] and b.claim(5).tolist() == [18]
    assert a.claim(3).tolist() == [] and b.claim(3).tolist() == [] and a.out and b.out
    add = World().counter("blocks")
    a, b = SeedQueue(np.arange(11), add, 2, block=3), SeedQueue(np.arange(11), add, 2, block=3)
    assert a.claim(1).tolist() == [0, 1, 2] and b.claim(4).tolist() == [3, 4, 5, 6, 7, 8]   # whole blocks
    assert a.claim(9).tolist() == [9, 10] and b.claim(1).tolist() == [] and a.out and b.out


@pytest.mark.slow
def test_iri_cache_written_once_and_reused(ranks):
    rank0, rank1 = w.ok_values(ranks, "iris")
    files = [f for f in rank0["files"] if f != "ckpt"]  # (ckpt/: the resume scenario's folder)
    assert len(files) == 1 and files[0].startswith("iris-") and files[0].endswith(".pt"), files  # no temp, no ckpt
    assert rank0["again_from_cache"] and rank1["again_from_cache"]
    assert torch.equal(rank0["again"]["inputs"], rank0["cached"]["inputs"])


@pytest.mark.slow
def test_interrupted_ranks_resume_their_own_shares(ranks):
    rank0, rank1 = w.ok_values(ranks, "iris")
    got = rank0["resumed"]
    assert "simulated interruption" in got["interrupted"]
    assert [c.rsplit(".", 1)[-1] for c in got["checkpoints"]] == ["rank0of2", "rank1of2"]  # one per rank
    assert got["resumed"] and rank1["resumed"]["resumed"]
    assert [f for f in got["left"] if ".ckpt" in f or f.startswith(".tmp")] == []  # finished: removed
    front, _, _ = w.small_setup()
    ref = generate_iris(front, "block2", w.seeds_tensor(10), steps=15, batch_size=2, progress="never")
    assert float((got["rel_error"] - ref.rel_error).abs().max()) < 0.02
    assert torch.equal(got["inputs"], rank1["resumed"]["inputs"])


@pytest.mark.slow
def test_ranks_without_a_share_still_work(ranks):
    rank0, rank1 = w.ok_values(ranks, "tiny")
    ref = w.tiny_results()
    for got in (rank0, rank1):
        assert torch.equal(got["acts"], ref["acts"]) and torch.equal(got["logits"], ref["logits"])
        assert got["losses"] == pytest.approx(ref["losses"], rel=1e-5)
        for name, value in ref["stitch"].items():
            assert torch.allclose(got["stitch"][name], value, atol=1e-6), name


@pytest.mark.slow
def test_a_rank_with_other_weights_stops_every_rank(ranks):
    for r in (0, 1):
        status, message = ranks[r]["mismatch"]
        assert status == "error" and "front/end weights differ between ranks: rank(s) [1]" in message
    assert ranks[0]["mismatch"] == ranks[1]["mismatch"]


@pytest.mark.slow
def test_a_failure_on_one_rank_is_the_same_error_row_everywhere(ranks):
    rank0, rank1 = w.ok_values(ranks, "one_rank_fails")
    assert rank0 == rank1
    failed, cka = rank0
    assert failed[2] is None and "rank 1 of 2 failed: ValueError: deliberate failure on rank 1" in failed[3]
    assert cka[3] is None and cka[2] is not None  # the ranks stayed in step for the next metric


@pytest.mark.slow
def test_a_dead_rank_raises_instead_of_hanging(tmp_path):
    results = w.run_ranks(["rank_dies"], str(tmp_path), timeout_s=30, join_timeout_s=150)
    status, message = results[0]["rank_dies"]
    assert status == "error" and "CollectiveError" in message and "another rank probably died" in message


@pytest.mark.slow
def test_cli_under_torchrun_writes_one_report_equal_to_one_process(tmp_path):
    from similarity_plugins.apps.zoo import build_model
    from similarity_plugins.cli.main import main

    weights = tmp_path / "w.pt"
    torch.manual_seed(0)
    torch.save(build_model("small-cnn", num_classes=10, in_channels=1).state_dict(), weights)
    args = ["compare", "--front", f"small-cnn@{weights}", "--end", f"small-cnn@{weights}", "--in-channels", "1",
            "--layer", "block2", "--metrics", "cka-linear,stitch-hlm", "--data", "digits", "--max-train", "64",
            "--max-test", "48", "--epochs", "1", "--option", "batch_size=16", "--option", "ls_samples=32", "--no-progress"]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(sys.path))
    out = tmp_path / "dist.json"
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port",
                           str(w.free_port()), "-m", "similarity_plugins", *args, "--out", str(out)],
                          capture_output=True, text=True, timeout=240, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count(f"wrote {out}") == 1  # rank 0 only
    assert main([*args, "--out", str(tmp_path / "one.json")]) == 0
    dist_report = json.loads(out.read_text())
    one_report = json.loads((tmp_path / "one.json").read_text())
    assert dist_report["meta"]["world_size"] == 2
    for got, ref in zip(dist_report["results"], one_report["results"]):
        assert got["metric"] == ref["metric"] and got["error"] is None
        assert abs(got["score"] - ref["score"]) <= (1e-10 if got["metric"] == "cka-linear" else 0.02)


_EXIT_SCRIPT = """
import atexit, sys
from similarity_plugins.cli import console_main

class Finaliser:
    def __del__(self):
        print("finalised", flush=True)

keep = Finaliser()
atexit.register(lambda: print("atexit ran", flush=True))
console_main(sys.argv[1:])
"""


@pytest.mark.slow  # starts the console entry in fresh interpreters
@pytest.mark.parametrize("under_torchrun", [True, False])
def test_the_console_entry_skips_finalisation_only_under_torchrun(under_torchrun):
    """Under torchrun a rank ends with os._exit after atexit (no racing native threads at teardown)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    if under_torchrun:
        env.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(w.free_port()))
    else:
        for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
            env.pop(key, None)
    for argv, code, shows in ((["list"], 0, "cka-linear"), (["no-such-command"], 2, "invalid choice")):
        proc = subprocess.run([sys.executable, "-c", _EXIT_SCRIPT, *argv], capture_output=True, text=True,
                              timeout=120, env=env)
        assert proc.returncode == code, proc.stderr[-2000:]
        assert shows in proc.stdout + proc.stderr and "atexit ran" in proc.stdout
        assert ("finalised" in proc.stdout) is not under_torchrun
