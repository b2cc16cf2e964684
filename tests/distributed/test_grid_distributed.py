"""compare_grid under torchrun (2 gloo ranks on this CPU, tests/helpers/dist_workers.py): the cells are shared out and
every rank returns the matrices of one process.

One spawn runs every scenario of the module on both ranks (module fixture: each spawn costs seconds of interpreter
start); the single-process references run here."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from similarity_plugins import compare_grid
from tests.helpers import dist_workers as w

pytestmark = [pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed not available"),
              pytest.mark.usefixtures("one_torch_thread")]


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("grid-ranks"))
    return w.run_ranks(["grid", "calibrated_grid", "grid_resume", "extract", "text_grid"], out, timeout_s=180.0)


@pytest.mark.slow
def test_a_grid_on_two_ranks_equals_one_process_and_shares_the_cells(ranks):
    rank0, rank1 = w.ok_values(ranks, "grid")
    assert rank0["ranks"] == [0, 1]  # both ranks computed cells
    assert not rank0["errors"] and not rank1["errors"]
    front, end, data = w.small_setup()
    single = compare_grid({"a": front, "b": end}, ["block2", "block3"], data, w.GRID_METRICS, options=w.GRID_OPTIONS)
    for metric in single.metrics:
        assert np.array_equal(rank0["matrices"][metric], rank1["matrices"][metric]), metric  # every rank the same
        tol = 0.02 if metric.startswith(("stitch", "iri")) else 1e-10  # the distributed tests' standard
        assert np.allclose(rank0["matrices"][metric], single.matrix(metric), rtol=0, atol=tol), metric


@pytest.mark.slow
def test_calibrated_cells_and_aggregates_on_two_ranks_equal_one_process(ranks):
    rank0, rank1 = w.ok_values(ranks, "calibrated_grid")
    assert rank0["ranks"] == [0, 1] and not rank0["errors"] and not rank1["errors"]
    front, end, data = w.small_setup()
    single = compare_grid({"a": front, "b": end}, ["block2", "block3"], data, w.CALIBRATED_METRICS,
                          options=w.CALIBRATED_OPTIONS)
    for metric in single.metrics:
        for rank in (rank0, rank1):
            assert np.allclose(rank["calibrated"][metric], single.calibrated(metric), rtol=0, atol=1e-10), metric
            for agg in ("max", "mean"):
                theirs, ours = rank["aggregates"][(metric, agg)], single.aggregate(metric, "a", "b", agg)
                assert theirs["p_value"] == ours["p_value"], (metric, agg)
                assert theirs["calibrated"] == pytest.approx(ours["calibrated"], abs=1e-10), (metric, agg)


@pytest.mark.slow
def test_a_grid_resumes_under_torchrun_from_rank_zeros_file(ranks):
    first, second = w.ok_values(ranks, "grid_resume")
    cells = 4 * 4  # 2 models x 2 layers, every ordered pair; no symmetry declared, so none mirrored
    assert first["counts"][0] + second["counts"][0] == cells  # fresh: the cells shared out
    assert first["counts"][0] and second["counts"][0]
    assert first["counts"][1] == second["counts"][1] == 0  # resumed whole: nothing computed again
    assert first["counts"][2] + second["counts"][2] == cells - 3  # the file kept three cells
    for outcome in (first, second):
        for matrix in outcome["matrices"]:
            assert np.array_equal(matrix, first["matrices"][0])
    assert np.isfinite(first["matrices"][0]).all()


@pytest.mark.slow
def test_extract_on_two_ranks_writes_one_store_equal_to_one_process(ranks, tmp_path):
    from similarity_plugins import Store, extract

    first, second = w.ok_values(ranks, "extract")
    # 64 test samples in batches of 16: each model's 4 batches, 2 per rank; the counts are every rank's together
    assert first["counts"] == second["counts"] == [64, 64, 0, 0]  # the second extract runs no forward anywhere
    assert first["ranks"] == [0, 1]  # the grid from the store shared its cells out
    front, end, data = w.small_setup()
    alone = extract({"a": front, "b": end}, ["block2", "block3"], data, tmp_path / "alone", batch_size=16)
    shared = Store(first["folder"])
    for model in ("a", "b"):
        for layer in ("block2", "block3"):
            assert np.array_equal(np.asarray(shared.load(model, layer)), np.asarray(alone.load(model, layer)))
    single = compare_grid(None, None, None, "cka-linear,procrustes", store=tmp_path / "alone")
    for metric in single.metrics:
        assert np.array_equal(first["matrices"][metric], second["matrices"][metric])
        assert np.allclose(first["matrices"][metric], single.matrix(metric), rtol=0, atol=1e-10), metric


@pytest.mark.slow
def test_text_and_paired_grids_on_two_ranks_equal_one_process(ranks):
    """Text (each model its own tokenizer) and image-caption pairs are sharded like images: every rank returns
    the matrices and permutation p-values of one process."""
    pytest.importorskip("transformers")
    rank0, rank1 = w.ok_values(ranks, "text_grid")
    assert not rank0["errors"] and not rank1["errors"], rank0["errors"][:2]
    assert rank0["ranks"] == [0, 1]
    models, layers, text, paired = w.text_setup()
    language = {k: models[k] for k in ("gpt", "bert")}
    on_text = compare_grid(language, {k: layers[k] for k in language}, text, w.TEXT_METRICS,
                           options={"permutations": 9})
    on_pairs = compare_grid(models, layers, paired, w.TEXT_METRICS, pairs="across")
    for key, single in (("text", on_text), ("pairs", on_pairs)):
        for metric in single.metrics:
            assert np.array_equal(rank0[key][metric], rank1[key][metric], equal_nan=True), (key, metric)
            # a rank pads its share of a batch to its own longest text: the same pooled vectors up to float32
            # rounding, not to the bit as for images
            assert np.allclose(rank0[key][metric], single.matrix(metric), rtol=0, atol=1e-6, equal_nan=True), (
                key, metric)
    assert np.array_equal(rank0["text_p"], on_text.p_values("cka-linear"), equal_nan=True)
