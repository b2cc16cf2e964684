"""compare_grid and Grid: cells equal compare, pairs, mirroring, counts of forward passes, IRIs and Grams,
failures kept to their cells, p-values, JSON, heatmaps, resume, the memory bound."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

import similarity_plugins as sp
from similarity_plugins.stats.pvalues import benjamini_hochberg, holm
from tests.helpers.models import tiny_cnn

pytestmark = pytest.mark.usefixtures("one_torch_thread")
LAYERS = ["block1", "block2", "block3"]
SMALL = ["block3", "pool"]  # 32 and 8 features at width 4: every CCA cell is well posed on 96 samples
DETERMINISTIC = ["cka-linear", "cka-debiased", "cka-rbf", "procrustes", "rsa", "mutual-knn", "pwcca"]


def _data(n_test: int = 96) -> sp.Data:
    g = torch.Generator().manual_seed(0)
    x = torch.rand(128, 1, 16, 16, generator=g)
    y = torch.randint(0, 10, (128,), generator=g)
    return sp.Data(train=TensorDataset(x, y), test=TensorDataset(x[:n_test], y[:n_test]))


def _models(k: int = 2) -> dict:
    return {f"net{i}": tiny_cnn(seed=i, width=4) for i in range(k)}


@pytest.fixture(scope="module")
def grid_and_inputs():
    models, data = _models(), _data()
    grid = sp.compare_grid(models, SMALL, data, metrics=DETERMINISTIC, options={"mutual-knn": {"topk": 5}})
    return grid, models, data


def test_every_cell_equals_compare_on_that_pair(grid_and_inputs):
    grid, models, data = grid_and_inputs
    assert grid.nodes == [(m, layer) for m in models for layer in SMALL]
    assert len(grid.cells) == len(DETERMINISTIC) * len(grid.nodes) ** 2
    index = {node: k for k, node in enumerate(grid.nodes)}
    refs = {}
    for fm in models:
        for em in models:  # one compare call per model pair: a sweep over every layer pair
            cuts = [(fl, el) for fl in SMALL for el in SMALL]
            for row in sp.compare(models[fm], models[em], cuts, data, DETERMINISTIC, options={"mutual-knn": {"topk": 5}}):
                fl, _, el = row.layer.partition("->")
                refs[(row.metric, index[(fm, fl)], index[(em, el or fl)])] = row
    assert set(refs) == set(grid.cells)
    for (metric, i, j), cell in grid.cells.items():
        (fm, fl), (em, el) = grid.nodes[i], grid.nodes[j]
        ref = refs[(metric, i, j)]
        assert cell.layer == ref.layer and cell.details["front_model"] == fm and cell.details["end_model"] == em
        assert ref.ok and cell.ok, (metric, cell.error, ref.error)
        assert abs(cell.score - ref.score) <= 1e-10, (metric, fl, el, cell.score, ref.score)


def test_symmetric_metrics_are_mirrored_exactly_and_the_others_computed_both_ways(grid_and_inputs):
    grid = grid_and_inputs[0]
    for metric in DETERMINISTIC:
        m = grid.matrix(metric)
        mirrored = [k for k, c in grid.cells.items() if k[0] == metric and c.details.get("mirrored")]
        if sp.metric_info(metric).symmetric:
            assert np.array_equal(m, m.T) and len(mirrored) == len(grid.nodes) * (len(grid.nodes) - 1) // 2
            assert all(i > j for _, i, j in mirrored)
        else:
            assert not mirrored and not np.allclose(m, m.T)


def test_matrix_blocks_best_and_report(grid_and_inputs):
    grid = grid_and_inputs[0]
    full = grid.matrix("cka-linear")
    block = grid.matrix("cka-linear", front="net0", end="net1")
    assert block.shape == (2, 2) and np.array_equal(block, full[:2, 2:])
    best = grid.best("cka-linear", "net0", "net1")
    assert [b[0] for b in best] == SMALL
    for (fl, el, score), row in zip(best, block):
        assert score == row.max() and el == SMALL[int(row.argmax())]
    rows = [r for r in grid.report if r.metric == "cka-linear"]
    assert len(rows) == 16 and {r.details["end_model"] for r in rows} == {"net0", "net1"}
    assert "front_model" in grid.report.to_csv().splitlines()[0]
    with pytest.raises(ValueError, match="cka-linear"):
        grid.matrix("cka-linaer")
    with pytest.raises(ValueError, match="net0"):
        grid.best("cka-linear", "net9", "net1")


def test_best_takes_the_lowest_score_of_a_distance():
    grid = sp.Grid([("a", "l1"), ("b", "l1"), ("b", "l2")], ["d"],
                   {("d", 0, 1): sp.SimilarityResult("d", 0.5), ("d", 0, 2): sp.SimilarityResult("d", 0.2)},
                   {"d": {"kind": "distance", "range": (0.0, math.inf), "symmetric": False}})
    assert grid.best("d", "a", "b") == [("l1", "l2", 0.2)]
    assert grid.best("d", "b", "a")[0][1] is None


def test_json_round_trip_keeps_every_cell(grid_and_inputs, tmp_path):
    grid = grid_and_inputs[0]
    path = tmp_path / "grid.json"
    grid.to_json(path)
    back = sp.Grid.from_json(path)
    assert back.nodes == grid.nodes and back.metrics == grid.metrics and back.info["rsa"]["range"] == (-1.0, 1.0)
    for metric in grid.metrics:
        assert np.array_equal(back.matrix(metric), grid.matrix(metric), equal_nan=True)
    assert back.report.to_csv() == grid.report.to_csv()
    with pytest.raises(ValueError, match="not a similarity-plugins grid"):
        sp.Grid.from_dict({"format": "x"})


@pytest.mark.parametrize("ext", ["png", "svg"])
def test_heatmap_writes_the_format_of_the_extension(grid_and_inputs, tmp_path, ext):
    grid = grid_and_inputs[0]
    path = tmp_path / f"grid.{ext}"
    assert grid.heatmap(path, metric="cka-linear") == str(path)
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG") if ext == "png" else b"<svg" in data[:1000]
    if ext == "svg":
        assert b"net0:block3" in data and b"front" in data and b"end" in data


def test_pairs_select_exactly_what_they_say():
    models, data = _models(), _data()
    n = 4
    for pairs, expect in [("across", {(i, j) for i in range(n) for j in range(n) if (i < 2) != (j < 2)}),
                          ("within", {(i, j) for i in range(n) for j in range(n) if (i < 2) == (j < 2)})]:
        grid = sp.compare_grid(models, LAYERS[:2], data, "cka-linear,pwcca", pairs=pairs)
        for metric in ("cka-linear", "pwcca"):
            assert {(i, j) for m, i, j in grid.cells if m == metric} == expect
            assert np.isnan(grid.matrix(metric)[tuple(zip(*({(i, j) for i in range(n) for j in range(n)} - expect)))]).all()
    explicit = [(("net0", "block2"), ("net1", "block1")), (("net1", "block1"), ("net0", "block2"))]
    grid = sp.compare_grid(models, LAYERS[:2], data, "cka-linear", pairs=explicit)
    assert set(grid.cells) == {("cka-linear", 1, 2), ("cka-linear", 2, 1)}
    assert grid.cells[("cka-linear", 2, 1)].details.get("mirrored") and grid.cells[("cka-linear", 2, 1)].layer == "block1->block2"


def test_bad_arguments_are_refused_before_any_work(monkeypatch):
    from similarity_plugins.networks import context

    monkeypatch.setattr(context.Context, "capture", lambda *a, **k: pytest.fail("work started"))
    models, data = _models(), _data()
    with pytest.raises(ValueError, match="block1"):
        sp.compare_grid(models, ["blok1"], data, "cka-linear")
    with pytest.raises(ValueError, match="net0"):
        sp.compare_grid(models, {"net0": ["block1"], "nett1": ["block1"]}, data, "cka-linear")
    with pytest.raises(sp.UnknownMetric):
        sp.compare_grid(models, ["block1"], data, "cka-linaer")
    with pytest.raises(sp.UnknownOption):
        sp.compare_grid(models, ["block1"], data, "cka-linear", options={"max_sample": 3})
    with pytest.raises(ValueError, match="across"):
        sp.compare_grid(models, ["block1"], data, "cka-linear", pairs="acros")
    with pytest.raises(ValueError, match="net0:block1"):
        sp.compare_grid(models, ["block1"], data, "cka-linear", pairs=[(("net0", "block9"), ("net1", "block1"))])


def test_seeds_and_option_values_follow_compares_rules():
    models, data = _models(), _data()
    for seed in (1.5, "3", True):
        with pytest.raises((TypeError, ValueError), match="seed"):
            sp.compare_grid(models, ["block3"], data, "cka-linear", seed=seed)
    grid = sp.compare_grid(models, ["block3"], data, "cka-linear", options={"permutations": -1})
    assert all("permutations" in cell.error for cell in grid.cells.values())


def test_a_list_of_models_one_model_and_per_model_layers():
    a, b = tiny_cnn(seed=0, width=4), tiny_cnn(seed=1, width=8)
    grid = sp.compare_grid([a, b], {"m0": ["block1"], "m1": ["block2", "block3"]}, _data(), "cka-linear")
    assert grid.nodes == [("m0", "block1"), ("m1", "block2"), ("m1", "block3")]
    one = sp.compare_grid({"solo": a}, LAYERS, _data(), "cka-linear")
    assert one.matrix("cka-linear").shape == (3, 3) and np.allclose(np.diag(one.matrix("cka-linear")), 1.0)


class _Counting(nn.Module):
    """Wraps a model, counting its forward passes in a list outside the module (the donor guard would see an
    attribute change)."""

    def __init__(self, model: nn.Module, log: list) -> None:
        super().__init__()
        self.net = model
        self.log = log

    def forward(self, x):
        self.log.append(len(x))
        return self.net(x)


def test_each_model_runs_forward_once_and_each_node_builds_its_parts_once(monkeypatch):
    import dataclasses

    from similarity_plugins.cka import nodes
    from similarity_plugins.measures import nodes as measure_nodes

    made, built = [], {}
    original = nodes.node_gram
    monkeypatch.setattr(nodes, "node_gram", lambda x, *a, **k: made.append(tuple(x.shape)) or original(x, *a, **k))
    from similarity_plugins.measures import regression

    fits, ridge = [], regression.ridge_front
    monkeypatch.setattr(regression, "ridge_front", lambda x, *a: fits.append(len(x)) or ridge(x, *a))
    for measure, form in list(measure_nodes.NODE_FORMS.items()):
        def counted(x, role, kw, form=form, measure=measure):
            built[measure] = built.get(measure, 0) + 1
            return form.build(x, role, kw)
        monkeypatch.setitem(measure_nodes.NODE_FORMS, measure, dataclasses.replace(form, build=counted))
    logs = [[], [], []]
    models = {f"m{i}": _Counting(tiny_cnn(seed=i, width=4), logs[i]) for i in range(3)}
    layers = ["net.block1", "net.block3", "net.pool"]  # 9 nodes: 81 cells per metric
    metrics = "cka-linear,cka-debiased,procrustes,rsa,cca,svcca,pwcca,mutual-knn,linear-regression"
    grid = sp.compare_grid(models, layers, _data(), metrics, options={"svcca": {"dims": 3}})
    failed = {c.metric for c in grid.cells.values() if not c.ok}
    assert failed <= {"cca", "pwcca"}, failed  # wide layers: CCA is degenerate at n = 96 (as in compare, below)
    assert logs == [[96, 128]] * 3  # one pass per model and split: 96 test samples, 128 train (linear-regression)
    assert len(made) == 9  # one Gram per node, shared by both CKA estimators and all 9 cells of its row/column
    # one part per node (9), shared by every cell it is in; cca and svcca share one whitened basis per node;
    # pwcca's front keeps its neurons (a second basis per node), its end shares the compressed one
    assert built == {"procrustes": 9, "rsa": 9, "cca": 9, "pwcca": 9, "mutual_knn": 9}
    assert len(fits) == 9  # linear-regression: one ridge factorisation per front node, for its 9 ends
    for metric in ("procrustes", "rsa", "cca", "svcca", "pwcca", "mutual-knn", "linear-regression"):
        for (f, e) in [(0, 5), (7, 2), (8, 8)]:
            front, end = grid.nodes[f], grid.nodes[e]
            options = {"dims": 3} if metric == "svcca" else None
            plain = (models[front[0]].net, models[end[0]].net)  # the counting wrapper's log would count as a change
            layer = (front[1].removeprefix("net."), end[1].removeprefix("net."))
            ref = sp.compare(*plain, layer, _data(), metric, options=options)[0]
            cell = grid.cells[(metric, f, e)]
            assert cell.error == ref.error, (metric, f, e)
            if ref.ok:
                assert cell.score == pytest.approx(ref.score, abs=1e-10), (metric, f, e)
    assert any(grid.cells[("cca", f, e)].ok for f in range(9) for e in range(9))


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:IRIs at")
def test_iris_are_generated_once_per_front_node_and_cells_equal_compare(monkeypatch):
    from similarity_plugins.iri import service

    calls = []
    original = service.generate_iris
    monkeypatch.setattr(service, "generate_iris", lambda front, layer, *a, **k: calls.append(layer) or
                        original(front, layer, *a, **k))
    models = {f"m{i}": tiny_cnn(seed=i, width=4) for i in range(3)}
    layers = ["block1", "block2", "block3", "pool"]
    options = {"epochs": 1, "batch_size": 8, "iri_steps": 3, "iri_max_seeds": 8, "iri_batch_size": 8}
    grid = sp.compare_grid(models, layers, _data(), "cka-linear,iri-slm", pairs="across", options=options)
    assert len(calls) == 12  # one IRI set per front node, whatever the 8 end nodes
    assert all(c.ok for c in grid.cells.values()), [c.error for c in grid.cells.values() if not c.ok][:2]
    ref = sp.compare(models["m0"], models["m2"], ("block2", "block1"), _data(), "iri-slm", options=options)
    assert grid.cells[("iri-slm", 1, 8)].score == ref["iri-slm"].score


class _Explodes(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block1 = nn.Conv2d(1, 4, 3, padding=1)

    def forward(self, x):
        raise RuntimeError("kaboom")


def test_a_failing_cell_or_model_leaves_every_other_cell(fresh_manager):
    class FailsAtBlock2:
        needs = ("test",)
        activations_only = True

        @sp.hookimpl
        def similarity(self, layer):
            if layer.front == "block2":
                raise RuntimeError("no block2")
            return 0.5

    sp.register_metric(FailsAtBlock2(), "fails-at-block2")
    models, data = _models(), _data()
    models["broken"] = _Explodes()
    layers = {"net0": ["block1", "block2"], "net1": ["block1", "block2"], "broken": ["block1"]}
    grid = sp.compare_grid(models, layers, data, "fails-at-block2,cka-linear")
    clean = sp.compare_grid(_models(), LAYERS[:2], data, "cka-linear")
    for (metric, i, j), cell in grid.cells.items():
        front, end = grid.nodes[i], grid.nodes[j]
        if "broken" in (front[0], end[0]):
            assert not cell.ok and "kaboom" in cell.error and "'broken'" in cell.error
        elif metric == "fails-at-block2":
            assert (cell.score == 0.5) == (front[1] != "block2")
        else:
            assert cell.score == clean.cells[(metric, i, j)].score


def test_p_values_come_from_the_cells_and_are_corrected_over_unique_cells(fresh_manager):
    class WithP:
        needs = ("test",)
        activations_only = True
        symmetric = True

        @sp.hookimpl
        def similarity(self, layer):
            p = {("block1", "block1"): 0.01, ("block1", "block2"): 0.04, ("block2", "block2"): 0.03}
            key = tuple(sorted((layer.front, layer.end)))
            return {"score": 1.0, "details": {"p_value": p[key]} if layer != ("block2", "block2") else {}}

    sp.register_metric(WithP(), "with-p")
    grid = sp.compare_grid({"a": tiny_cnn(width=4)}, LAYERS[:2], _data(), "with-p")
    raw = grid.p_values("with-p")
    assert np.array_equal(raw, [[0.01, 0.04], [0.04, np.nan]], equal_nan=True)
    assert np.allclose(grid.p_values("with-p", "holm"), [[0.02, 0.04], [0.04, np.nan]], equal_nan=True)
    assert np.allclose(grid.p_values("with-p", "bh"), [[0.02, 0.04], [0.04, np.nan]], equal_nan=True)
    with pytest.raises(ValueError, match="holm"):
        grid.p_values("with-p", "bonferroni")


@pytest.mark.parametrize("metric", ["cka-linear", "rsa", "procrustes"])
def test_permutation_p_values_in_a_grid_equal_compare_and_fill_p_values(metric):
    models, data = _models(), _data()
    options = {"permutations": 19}
    grid = sp.compare_grid(models, ["block3"], data, metric, pairs="across", options=options, seed=3)
    ref = sp.compare(models["net0"], models["net1"], "block3", data, metric, options=options, seed=3)[metric]
    cell = grid.cells[(metric, grid.nodes.index(("net0", "block3")), grid.nodes.index(("net1", "block3")))]
    for key in ("p_value", "null_mean", "null_std", "permutations"):
        assert cell.details[key] == pytest.approx(ref.details[key], rel=1e-10, abs=1e-12), key
    p = grid.p_values(metric)
    assert p[0, 1] == pytest.approx(ref.details["p_value"]) and np.isnan(p[0, 0]) and np.isnan(p[1, 1])
    assert np.all(grid.p_values(metric, "holm")[0, 1] >= p[0, 1])


def test_holm_and_bh_match_hand_values_and_scipy():
    from scipy.stats import false_discovery_control

    p = [0.01, 0.04, 0.03, 0.005]
    assert np.allclose(holm(p), [0.03, 0.06, 0.06, 0.02])  # 4p, 3p, 2p, p of the sorted values, then running max
    assert np.allclose(benjamini_hochberg(p), [0.02, 0.04, 0.04, 0.02])  # 4p/k sorted, then running min from the top
    q = np.random.default_rng(0).uniform(size=30) ** 2
    assert np.allclose(benjamini_hochberg(q), false_discovery_control(q), rtol=0, atol=1e-15)
    assert np.isnan(holm([np.nan, 0.2])[0]) and holm([np.nan, 0.2])[1] == 0.2
    with pytest.raises(ValueError):
        holm([1.5])


def test_resume_reads_finished_cells_back_and_computes_only_the_rest(counted, tmp_path):
    calls = counted
    models, data, path = _models(), _data(), tmp_path / "cells.jsonl"
    first = sp.compare_grid(models, LAYERS[:2], data, "counted", pairs=[(("net0", "block1"), ("net1", "block2"))],
                            resume=path)
    assert len(calls) == 1
    whole = sp.compare_grid(models, LAYERS[:2], data, "counted", resume=path)
    assert len(calls) == 16 and whole.cells[("counted", 0, 3)].score == first.cells[("counted", 0, 3)].score
    with open(path, "a") as fh:
        fh.write('{"metric": "counted", "fro')  # a line torn by an interruption is ignored
    again = sp.compare_grid(models, LAYERS[:2], data, "counted", resume=path)
    assert len(calls) == 16 and np.array_equal(again.matrix("counted"), whole.matrix("counted"))
    with pytest.raises(ValueError, match="seed"):
        sp.compare_grid(models, LAYERS[:2], data, "counted", resume=path, seed=1)
    assert json.loads(path.read_text().splitlines()[0])["format"] == "similarity-plugins grid cells"


def test_few_features_of_many_samples_are_scored_without_n_by_n_matrices(monkeypatch):
    from similarity_plugins.cka import nodes

    made = []
    original = nodes.node_gram
    monkeypatch.setattr(nodes, "node_gram", lambda x, *a, **k: made.append(tuple(x.shape)) or original(x, *a, **k))
    g = torch.Generator().manual_seed(1)
    many = sp.Data(test=TensorDataset(torch.rand(400, 1, 16, 16, generator=g), torch.zeros(400, dtype=torch.long)))
    grid = sp.compare_grid(_models(), SMALL, many, "cka-linear,cka-rbf")
    assert all(cell.ok for cell in grid.cells.values())
    assert len(made) == 4   # 32 and 8 features of 400 samples: only cka-rbf builds a Gram matrix per node (1.2 MiB)
    small = sp.compare_grid(_models(), SMALL, _data(), "cka-linear")   # 96 samples: Grams of 72 KiB serve the cells
    assert len(made) == 8 and all(cell.ok for cell in small.cells.values())


def test_a_memory_bound_recomputes_and_never_changes_a_value():
    models, data = _models(), _data()
    free = sp.compare_grid(models, LAYERS, data, "cka-linear,cka-debiased")
    bound = sp.compare_grid(models, LAYERS, data, "cka-linear,cka-debiased", cache_bytes=0)
    for metric in free.metrics:
        assert np.allclose(free.matrix(metric), bound.matrix(metric), rtol=0, atol=1e-12)


def test_the_grid_leaves_models_and_rngs_as_they_were():
    from tests.helpers.models import assert_unchanged, snapshot

    models = _models()
    models["net1"].train()
    before = {k: snapshot(m) for k, m in models.items()}
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    sp.compare_grid(models, LAYERS[:2], _data(), "cka-linear")
    assert torch.equal(torch.rand(3), expected)
    for k, m in models.items():
        assert_unchanged(m, before[k])


def test_cli_grid_writes_json_csv_and_figure_all_or_none(tmp_path, capsys):
    from similarity_plugins.cli import main

    out, table, figure = tmp_path / "g.json", tmp_path / "g.csv", tmp_path / "g.png"
    args = ["grid", "--model", "a=small-cnn?width=4", "--model", "b=small-cnn?width=4", "--in-channels", "1",
            "--layers", "block3,pool", "--data", "digits", "--max-test", "64", "--metrics", "cka-linear,procrustes",
            "--pairs", "across", "--no-progress"]
    assert main(args + ["--out", str(out), "--csv", str(table), "--figure", str(figure)]) == 0
    printed = capsys.readouterr().out
    assert "rows: front, columns: end" in printed and "a:block3" in printed
    grid = sp.Grid.from_json(out)
    assert set(grid.cells) == {(m, i, j) for m in ("cka-linear", "procrustes") for i in range(4) for j in range(4)
                               if (i < 2) != (j < 2)}
    assert figure.read_bytes().startswith(b"\x89PNG") and "front_model" in table.read_text()
    bad = tmp_path / "other.json"
    assert main(args + ["--out", str(bad), "--figure", str(tmp_path / "g.gif")]) == 2  # refused before any work
    assert "png, svg, pdf" in capsys.readouterr().err and not bad.exists()
    assert main(args[:7] + ["--layers", "c=block3", "--data", "digits", "--metrics", "cka-linear"]) == 2
    assert "unknown model 'c'" in capsys.readouterr().err


def test_a_metric_that_changes_a_donor_gets_error_rows_and_the_other_cells_their_values(fresh_manager):
    from tests.helpers.models import assert_unchanged, snapshot

    class Scribbles:  # claims to read only activations, but writes into the front's weights at block2
        needs = ("test",)
        activations_only = True
        deterministic = True

        @sp.hookimpl
        def similarity(self, front, layer):
            if layer.front == "block2":
                with torch.no_grad():
                    front.block1[0].weight.add_(1.0)
            return 0.25

    sp.register_metric(Scribbles(), "scribbles")
    models, data = _models(), _data()
    before = {k: snapshot(m) for k, m in models.items()}
    grid = sp.compare_grid(models, LAYERS[:2], data, "cka-linear,scribbles")
    clean = sp.compare_grid(_models(), LAYERS[:2], data, "cka-linear")
    for (metric, i, j), cell in grid.cells.items():
        if metric == "cka-linear":
            assert cell.score == clean.cells[(metric, i, j)].score
        elif grid.nodes[i][1] == "block2":
            assert cell.error and cell.error.startswith("DonorModified"), cell.error
        else:
            assert cell.score == 0.25
    for k, m in models.items():
        assert_unchanged(m, before[k])


@pytest.mark.slow
def test_a_stitching_front_is_cached_per_node(monkeypatch):
    from similarity_plugins.stitch.cache import TrainingCache

    fills = []
    original = TrainingCache._fill_front
    monkeypatch.setattr(TrainingCache, "_fill_front", lambda self: fills.append(self.front_net.layer) or original(self))
    options = {"epochs": 1, "batch_size": 32, "max_train": 64}
    grid = sp.compare_grid(_models(), ["block3", "pool"], _data(), "stitch-hlm,stitch-slm", pairs="across",
                           options=options)
    assert all(c.ok for c in grid.cells.values()), [c.error for c in grid.cells.values() if not c.ok][:2]
    assert sorted(fills) == ["block3", "block3", "pool", "pool"]  # 4 front nodes, each stitched to 2 ends x 2 metrics
