"""The HTML report's content: every row of the result with its exact numbers, one axis per kind of score, the
plain-words meaning of each metric, grids' heatmaps, best pairs, nulls and failures, zoos' distances, the provenance,
large grids paged or summarised with a note, and files read back. The page is assembled here without its chart
runtime (``runtime=""``): drawing it in a browser is tests/apps/test_report_browser.py."""

from __future__ import annotations

import html
import json
import re
import sys

import numpy as np
import pytest

import similarity_plugins as sp
from similarity_plugins.apps import report as app
from similarity_plugins.apps.report import grid_view, zoo_view
from similarity_plugins.apps.report.page import page_html
from tests.helpers.report_results import comparison, zoo

VERSIONS = {"vega": "6", "vega-lite": "6.4", "vega-embed": "7"}


def render(result, **kw) -> str:
    return page_html(*app.page_parts(result, **kw), runtime="", versions=VERSIONS, footer="test")


def specs(text: str) -> dict[str, dict]:
    """``{chart name: Vega-Lite spec}`` of a page."""
    boxes = dict(re.findall(r'id="(chart-\d+)" data-chart="([^"]*)"', text))
    payload = json.loads(re.search(r'<script type="application/json" id="sp-specs">(.*?)</script>', text, re.S).group(1))
    return {html.unescape(boxes[box]): spec for box, spec in payload.items()}


def tables(text: str) -> list[str]:
    return [html.unescape(t) for t in re.findall(r'<table data-table="([^"]*)"', text)]


def values(spec: dict) -> list[dict]:
    """Every data row of a spec (top level, and each layer or view with its own data)."""
    rows = list((spec.get("data") or {}).get("values", []))
    for part in spec.get("layer", []) + spec.get("hconcat", []):
        rows += values(part)
    return rows


def test_a_comparison_shows_every_row_with_the_numbers_of_its_json():
    report = comparison()
    text = render(report)
    charts = specs(text)
    assert {"scores similarity", "scores relative accuracy", "scores distance", "depth similarity",
            "depth relative accuracy", "depth distance"} == set(charts)
    assert {"numbers", "provenance settings", "provenance models", "provenance data"} <= set(tables(text))
    plotted = [row for name, spec in charts.items() if name.startswith("scores") for row in values(spec)]
    for r in report.results:
        if r.score is None:
            assert html.escape(r.error) in text  # a failed row: its error in the table, escaped
            continue
        assert f'data-value="{r.score!r}"' in text  # the table carries the value, unrounded
        (row,) = [p for p in plotted if p["metric"] == r.metric and p["cut"] == r.layer]
        assert row["score"] == r.score and row["seconds"] == r.seconds
        bounds = r.details.get("seed_ci95") or r.details.get("test_ci95")
        if bounds:
            assert [row["interval low"], row["interval high"]] == bounds
        for key, word in (("p_value", "p-value"), ("calibrated", "calibrated"), ("tau", "tau")):
            assert row.get(word) == r.details.get(key)
    assert "<here>" not in text and "few samples &lt;b&gt;" in text  # errors and warnings are text, never markup


def test_each_kind_of_score_has_its_own_axis():
    charts = specs(render(comparison()))
    kinds = {"similarity": {"cka-linear"}, "relative accuracy": {"stitch-slm"}, "distance": {"my-distance"}}
    for kind, metrics in kinds.items():
        spec = charts[f"scores {kind}"]
        assert {row["metric"] for row in values(spec)} == metrics
        y = spec["spec"]["layer"][1]["encoding"]["y"]
        assert kind.split()[0] in y["title"]
    assert charts["scores similarity"]["spec"]["layer"][1]["encoding"]["y"]["scale"] == {"domain": [0.0, 1.0]}
    assert charts["scores distance"]["spec"]["layer"][1]["encoding"]["y"]["scale"] == {"zero": True}  # unbounded


def test_every_metric_has_a_line_of_plain_words_from_its_declared_meaning():
    text = html.unescape(render(comparison()))
    assert "cka-linear: a similarity in [0, 1]: higher means more alike; symmetric" in text
    assert "unchanged when one side's activations are shifted by one vector, or multiplied by a positive number" in text
    assert "stitch-slm: relative accuracy: the end model's test accuracy" in text
    assert "asymmetric: the front (A) is read into the end (B)" in text
    assert "my-distance: a distance of at least 0: lower means more alike" in text
    assert "broken: its meaning is not declared" in text


def test_the_provenance_names_models_data_machine_and_options():
    text = html.unescape(render(comparison()))
    for expected in ("similarity-plugins 0.1.0", "2026-01-02T03:04:05+00:00", "Test CPU (2 logical cores)",
                     "org/model", "abc123", "pinned by the hub commit", "f" * 64, "d" * 64, '"permutations": 9',
                     "3 .. 5 (3 seeds per seeded metric)"):
        assert expected in text, expected
    old = sp.Report(comparison().results, {"seed": 1})  # written before results recorded their provenance
    assert "does not record its provenance" in render(old)


def test_a_page_of_score_names_the_arrays():
    rng = np.random.default_rng(1)
    report = sp.score(rng.standard_normal((40, 6)), rng.standard_normal((40, 3)), ["cka-linear", "procrustes"])
    title, lines, _ = app.page_parts(report)
    assert title == "Comparison: x (40, 6) vs y (40, 3)"
    text = html.unescape(render(report))
    assert "samples (or shape)" in text and "40x6" in text and "scores similarity" in specs(render(report))


def test_names_and_errors_cannot_break_out_of_the_page():
    row = sp.SimilarityResult("cka-linear", 0.5, {}, 0.1, None, "</script><script>alert(1)</script>")
    text = render(sp.Report([row], {"front": "<b>A</b>", "end": "B"}))
    assert "<script>alert(1)" not in text and "<b>A</b>" not in text
    assert "\\u003c/script>" in text  # inside the specs' JSON


def test_a_grid_shows_heatmaps_best_pairs_nulls_failures_and_the_zoo():
    grid = zoo()
    text = render(grid)
    charts = specs(text)
    assert set(charts) == {"heatmap cka-linear", "calibrated cka-linear", "heatmap my-distance", "permutation nulls",
                           "zoo cka-linear", "zoo my-distance"}
    assert {"best pairs", "failed cells"} <= set(tables(text))
    rows = [row for row in values(charts["heatmap cka-linear"]) if "front" in row and "end" in row]
    assert len(rows) == len(grid.nodes) ** 2
    for (metric, i, j), cell in grid.cells.items():
        if metric != "cka-linear":
            continue
        (row,) = [r for r in rows if r["front"] == ":".join(grid.nodes[i]) and r["end"] == ":".join(grid.nodes[j])]
        if cell.ok:
            assert row["score"] == cell.score and row["p-value"] == cell.details["p_value"]
            assert row["calibrated"] == cell.details["calibrated"] and row["seconds"] == cell.seconds
        else:
            assert "score" not in row and row["error"] == "RuntimeError: out of <memory>"
    assert "out of &lt;memory&gt;" in text
    for metric in grid.metrics:
        for front in grid.models:
            for end in grid.models:
                try:
                    best = grid.best_pair(metric, front, end)
                except ValueError as exc:  # a block with a failed cell may have no best pair: the table says why
                    assert html.escape(f"none: {exc}") in text
                    continue
                assert f'data-value="{best["score"]!r}"' in text and f'data-value="{best["p_value"]!r}"' in text
    reverse = charts["heatmap my-distance"]["layer"][0]["encoding"]["color"]["scale"]["reverse"]
    assert reverse is True  # a distance's colours are reversed, so that bright means alike in every map


def test_the_best_pairs_table_shows_the_aggregates_where_the_grid_computes_them():
    """The agreed interface of calibrated aggregates (issue 59): ``Grid.aggregate(metric, front, end, agg)`` ->
    ``{"score", "p_value", "tau", "calibrated"}``, or a ValueError naming what is missing; a grid that has it gets six
    more columns (here a grid whose aggregate is written in the test, until the package's own lands)."""
    class Aggregating(sp.Grid):
        def aggregate(self, metric, front, end, agg="max"):
            if front == end:
                raise ValueError(f"no aggregate for {front} x {end}")
            return {"score": 0.25 if agg == "mean" else 0.5, "p_value": 0.125, "tau": 0.375, "calibrated": 0.0625}

    base = zoo(models=2, layers=2, fail=False)
    grid = Aggregating(base.nodes, base.metrics, base.cells, base.info, base.meta, base.block_nulls, base.cell_nulls)
    text = html.unescape(render(grid))
    table = text.split('data-table="best pairs"')[1].split("</table>")[0]
    assert "mean: calibrated" in table and "no aggregate for m0 x m0" in table
    for value in (0.25, 0.125, 0.375, 0.0625):
        assert f'data-value="{value!r}"' in table


def test_the_null_histogram_bins_the_kept_nulls_of_each_blocks_best_cell():
    grid = zoo(permutations=19, fail=False)
    spec = specs(render(grid))["permutation nulls"]
    bins, observed = spec["layer"][0]["data"]["values"], spec["layer"][1]["data"]["values"]
    assert len(bins) == len(observed) == len(grid.cell_nulls) == len(grid.metrics) * len(grid.models) ** 2
    first = spec["params"][0]["value"]
    assert first.split(" | ")[1].split(" -> ")[0].split(":")[0] != first.split(" -> ")[1].split(":")[0]  # two models
    for counts in bins:
        assert sum(counts["null of this cell"]) == sum(counts["best null value of the block per permutation"]) == 19
    for row in observed:
        metric, pair = row["cell"].split(" | ")
        front, end = (tuple(node.split(":")) for node in pair.split(" -> "))
        key = (metric, grid.nodes.index(front), grid.nodes.index(end))
        assert row["observed score"] == grid.cells[key].score
        assert row["family-wise p-value (best of the block)"] == grid.best_pair(metric, front[0], end[0])["p_value"]


def test_a_grid_keeps_its_best_cells_null_values_through_json(tmp_path):
    import torch
    from torch.utils.data import TensorDataset

    from tests.helpers.models import tiny_cnn

    g = torch.Generator().manual_seed(0)
    data = sp.Data(test=TensorDataset(torch.rand(40, 1, 16, 16, generator=g), torch.randint(0, 10, (40,), generator=g)))
    grid = sp.compare_grid({"a": tiny_cnn(seed=0), "b": tiny_cnn(seed=1)}, {"a": ["block2", "block3"], "b": ["block3"]},
                           data, "cka-linear", pairs="across", options={"permutations": 19})
    assert len(grid.cell_nulls) == 2  # one per block (a -> b and b -> a, two cells each)
    for (metric, i, j), null in grid.cell_nulls.items():
        cell, best = grid.cells[(metric, i, j)], grid.best_pair(metric, grid.nodes[i][0], grid.nodes[j][0])
        assert (grid.nodes[i][1], grid.nodes[j][1], cell.score) == (best["front_layer"], best["end_layer"], best["score"])
        assert cell.details["p_value"] == (1 + sum(v >= cell.score - 1e-9 * abs(cell.score) for v in null)) / 20
        block = grid.block_nulls[(metric, grid.nodes[i][0], grid.nodes[j][0])]
        assert all(b >= v for b, v in zip(block, null))  # the block's best null value is at least the cell's
    grid.to_json(tmp_path / "g.json")
    assert sp.Grid.from_json(tmp_path / "g.json").cell_nulls == grid.cell_nulls


def test_large_grids_are_paged_then_summarised_and_the_page_says_so(monkeypatch):
    grid = zoo(models=3, layers=2, fail=False)
    monkeypatch.setattr(grid_view, "PAGED_CELLS", 10)
    paged = specs(render(grid))["heatmap cka-linear"]
    assert paged["params"][0]["bind"]["options"] == grid.models
    assert len([row for row in values(paged) if "front" in row and "end" in row]) == 36  # every cell still there
    monkeypatch.setattr(grid_view, "SUMMARY_CELLS", 10)
    monkeypatch.setattr(grid_view, "NULL_CELLS", 2)
    text = render(grid)
    charts = specs(text)
    assert not any(name.startswith("heatmap") for name in charts) and "blocks cka-linear" in charts
    assert "The grid's JSON holds every cell" in html.unescape(text)
    assert "the first 2 of the 18 cells the grid kept" in html.unescape(text)
    assert len(values(charts["blocks cka-linear"])) == 9


def test_the_zoo_distance_is_one_minus_the_best_score_averaged_over_both_orders():
    grid = zoo(models=4, layers=2, fail=False)
    d, missing = zoo_view.distances(grid, "cka-linear", distance_kind=False)
    assert missing == []
    for a, front in enumerate(grid.models):
        for b, end in enumerate(grid.models):
            expected = 0.0 if a == b else np.mean([max(0.0, 1 - grid.best_pair("cka-linear", x, y)["score"])
                                                   for x, y in ((front, end), (end, front))])
            assert d[a, b] == pytest.approx(expected, abs=1e-15)
    dist, _ = zoo_view.distances(grid, "my-distance", distance_kind=True)
    assert dist[0, 1] == pytest.approx((grid.best_pair("my-distance", "m0", "m1")["score"]
                                        + grid.best_pair("my-distance", "m1", "m0")["score"]) / 2)
    points = np.array([[0.0, 0.0], [3.0, 0.0], [0.0, 4.0], [1.0, 1.0]])  # Euclidean distances: MDS recovers them
    exact = np.linalg.norm(points[:, None] - points[None], axis=-1)
    coords = zoo_view.mds(exact)
    assert np.allclose(np.linalg.norm(coords[:, None] - coords[None], axis=-1), exact)
    segments, leaves = zoo_view.dendrogram_lines(exact, ["a", "b", "c", "d"])
    assert len(segments) == 3 * 3 and sorted(leaf["model"] for leaf in leaves) == ["a", "b", "c", "d"]


def test_a_zoo_without_a_block_says_why_it_has_no_map():
    full = zoo(models=3, layers=1, fail=False)
    cells = {k: v for k, v in full.cells.items() if {full.nodes[k[1]][0], full.nodes[k[2]][0]} != {"m0", "m2"}}
    grid = sp.Grid(full.nodes, full.metrics, cells, full.info, full.meta)
    text = html.unescape(render(grid))
    assert "no dendrogram or map: no scored block for m0 - m2" in text


def test_a_study_page_has_its_reading_donors_comparisons_and_figures(tmp_path):
    payload = {"meta": {"study": "shortcut", "data": "digits", "seed": 0, "figures": {"iris.png": "the IRIs",
                                                                                         "gone.png": "lost"}},
               "donor_accuracy": {"clean A": {"with mark": 0.9, "mark removed": 0.8}},
               "pairs": {"clean -> clean": comparison(seed=1).to_dict(), "clean -> shortcut": comparison(seed=2).to_dict()},
               "explanation": ["Standard stitching is fooled at block3."]}
    (tmp_path / "report.json").write_text(json.dumps(payload))
    (tmp_path / "iris.png").write_bytes(b"\x89PNG fake bytes")
    result, images, notes = app.read_result(tmp_path / "report.json")
    assert list(images) == ["iris.png"] and "gone.png (lost) is not shown" in notes[0]
    text = render(result, images=images, notes=notes)
    charts = specs(text)
    assert {"depth similarity", "scores clean -> clean similarity", "scores clean -> shortcut distance"} <= set(charts)
    assert {"donor accuracy", "numbers clean -> clean", "numbers clean -> shortcut", "study settings",
            "provenance clean -> shortcut models"} <= set(tables(text))
    assert "Standard stitching is fooled at block3." in text and 'data-image="iris.png"' in text
    assert {row["panel"] for row in values(charts["depth similarity"])} == {"clean -> clean", "clean -> shortcut"}


def test_results_read_back_and_anything_else_is_refused(tmp_path):
    report = comparison()
    report.to_json(tmp_path / "r.json")
    back = sp.Report.from_json(tmp_path / "r.json")
    assert [r.to_dict() for r in back] == [r.to_dict() for r in report] and back.meta == json.loads(report.to_json())["meta"]
    assert isinstance(app.read_result(tmp_path / "r.json")[0], sp.Report)
    zoo().to_json(tmp_path / "g.json")
    assert isinstance(app.read_result(tmp_path / "g.json")[0], sp.Grid)
    (tmp_path / "x.json").write_text('{"results": [{"score": 1}]}')
    with pytest.raises(ValueError, match=r"x.json', result 0: the result has no metric name"):
        app.read_result(tmp_path / "x.json")
    (tmp_path / "y.json").write_text('{"a": 1}')
    with pytest.raises(ValueError, match="not a result of similarity-plugins"):
        app.read_result(tmp_path / "y.json")
    with pytest.raises(TypeError, match="draws a Report, a Grid or a study"):
        app.page_parts({"a": 1})


def test_a_missing_runtime_names_the_install(tmp_path, monkeypatch, capsys):
    from similarity_plugins.cli.main import main

    monkeypatch.setitem(sys.modules, "vl_convert", None)
    from similarity_plugins.utils.extras import MissingExtra

    with pytest.raises(MissingExtra, match=r'pip install "similarity-plugins\[report\]"'):
        comparison().to_html()
    comparison().to_json(tmp_path / "r.json")
    assert main(["report", str(tmp_path / "r.json")]) == 2
    assert 'pip install "similarity-plugins[report]"' in capsys.readouterr().err
    assert not (tmp_path / "r.html").exists()


@pytest.mark.slow  # draws the demo's figures (about a second)
def test_the_demo_without_the_runtime_writes_its_other_files_and_says_why(tmp_path, monkeypatch, capsys):
    from similarity_plugins.apps.studies import shortcut

    monkeypatch.setitem(sys.modules, "vl_convert", None)
    written = shortcut.write_files(str(tmp_path), {"a -> b": comparison()}, {}, shortcut.DemoConfig.quick(), 0,
                                   ["x"], [], None)
    assert sorted(p.rsplit("/", 1)[1] for p in written) == ["report.csv", "report.json", "similarity.png"]
    assert 'report.html is not written' in capsys.readouterr().err


def test_the_runtime_is_built_once_and_kept_checked_in_the_cache_folder(tmp_path, monkeypatch):
    import vl_convert

    from similarity_plugins.apps.report import runtime

    built = []
    monkeypatch.setattr(vl_convert, "javascript_bundle", lambda: built.append(1) or "window.vega = 1;\r\n</script>")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    first = runtime.vega_runtime()
    assert first == "window.vega = 1;\r\n<\\/script>" and len(built) == 1
    assert runtime.vega_runtime() == first and len(built) == 1  # read back from the cache folder
    path = runtime.runtime_cache_path()
    assert path.startswith(str(tmp_path)) and vl_convert.__version__ in path
    with open(path, "r+", encoding="utf-8") as fh:  # an edited copy is not used: it is built again
        fh.seek(len(fh.readline()))
        fh.write("X")
    assert runtime.vega_runtime() == first and len(built) == 2
    assert runtime.vega_runtime() == first and len(built) == 2
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "file"))  # a cache folder that cannot be made: built each time
    assert runtime.vega_runtime() == first and runtime.vega_runtime() == first and len(built) == 4


def test_the_report_command_refuses_what_it_cannot_read_or_write(tmp_path, capsys):
    from similarity_plugins.cli.main import main

    (tmp_path / "y.json").write_text("[1, 2]")
    assert main(["report", str(tmp_path / "y.json")]) == 2
    assert "not a result of similarity-plugins" in capsys.readouterr().err
    comparison().to_json(tmp_path / "r.json")
    assert main(["report", str(tmp_path / "r.json"), "--out", str(tmp_path / "r.json")]) == 2
    assert "is the input RESULT" in capsys.readouterr().err


@pytest.mark.slow  # seconds: the schema is large and the pages carry some 25 charts
def test_every_chart_is_valid_vega_lite():
    """Each spec the pages carry validates against the Vega-Lite schema (altair's copy of it, the test extra) of the
    runtime's major version, so the runtime draws what the page describes."""
    import importlib.util
    from pathlib import Path

    import jsonschema

    altair = importlib.util.find_spec("altair")  # its schema file, read without importing altair (seconds)
    schema = Path(altair.submodule_search_locations[0]) / "vegalite" / "v6" / "schema" / "vega-lite-schema.json"
    validator = jsonschema.Draft7Validator(json.loads(schema.read_text(encoding="utf-8")))
    grid = zoo(models=3, layers=2, permutations=9)
    pages = [render(comparison()), render(grid), render(sp.Report(comparison().results[:2], {}))]
    charts = [_few_rows(spec) for text in pages for spec in specs(text).values()]
    assert len(charts) > 10
    for spec in charts:
        errors = [f"{list(e.absolute_path)}: {e.message[:200]}" for e in validator.iter_errors(spec)]
        assert not errors, errors


def _few_rows(spec):
    """``spec`` with each inline data list cut to 3 rows (the rows all have the same form; validating every row of a
    grid's data would take seconds)."""
    if isinstance(spec, dict):
        return {k: (v[:3] if k == "values" and isinstance(v, list) else _few_rows(v)) for k, v in spec.items()}
    if isinstance(spec, list):
        return [_few_rows(v) for v in spec]
    return spec
