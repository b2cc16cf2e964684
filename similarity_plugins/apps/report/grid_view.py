"""The page of a grid: a heatmap per metric and block, the best pairs (and aggregates) with their family-wise
p-values, the permutation nulls of the cells a claim is made about, the failed cells, and for a zoo the model x
model view (`zoo_view`).

A grid too large for one page is never cut in silence: past `PAGED_CELLS` cells a metric's heatmap shows one front
model's blocks at a time (a menu pages through them, every cell still in the page), and past `SUMMARY_CELLS`
cells in all each metric shows the best cell of every block, the page saying so (the JSON holds every cell).
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import numpy as np

from ...runner.grid.results import Grid
from . import charts
from .meaning import axis_domain, axis_kind, axis_title, meaning_line, metric_infos
from .page import Chart, Number, Section, Table, Text
from .rows import clean, result_fields
from .zoo_view import best_or_none, block_rows, blocks_of, zoo_sections

PAGED_CELLS = 3000     # a metric with more cells than this pages its heatmap by front model
SUMMARY_CELLS = 40000  # a grid with more cells than this shows each block's best cell
NULL_CELLS = 200       # the most cells whose null histograms the page carries (in model order)
NULL_BINS = 30


def grid_infos(grid: Grid) -> dict[str, dict]:
    """What each metric of ``grid`` declares (its ``info``; `meaning.metric_infos`)."""
    return metric_infos(grid.metrics, grid.info, None)


def _cell_rows(grid: Grid, metric: str) -> list[dict]:
    holm = grid.p_values(metric, "holm")
    rows = []
    for (m, i, j), cell in grid.cells.items():
        if m != metric:
            continue
        (fm, fl), (em, el) = grid.nodes[i], grid.nodes[j]
        fields = result_fields(cell)
        if fields.get("p-value") is not None and not math.isnan(holm[i, j]):
            fields["p-value (Holm, all cells of the metric)"] = float(holm[i, j])
        extra = {"copy of the reversed pair": True} if cell.details.get("mirrored") else {}
        rows.append(clean({"front": f"{fm}:{fl}", "end": f"{em}:{el}", "front model": fm, **fields, **extra}))
    return rows


def _metric_section(grid: Grid, metric: str, info: dict, summary: bool) -> Section:
    kind = axis_kind(info)
    domain = axis_domain([info])
    reverse = kind == "distance"
    nodes = [f"{m}:{layer}" for m, layer in grid.nodes]
    bounds = [nodes[k] for k in range(1, len(nodes)) if grid.nodes[k][0] != grid.nodes[k - 1][0]]
    if summary:
        rows = block_rows(grid, metric)
        return Section(metric, [
            Text([meaning_line(metric, info)], note=True),
            Chart(f"blocks {metric}", charts.matrix(rows, grid.models, "best score", axis_title(kind), domain, reverse),
                  "Each block's best cell (its layers and family-wise p-value on hover): the grid has too many cells "
                  "for one page; its JSON holds every one.")], anchor=f"metric-{metric}")
    rows = _cell_rows(grid, metric)
    paged = grid.models if len(rows) > PAGED_CELLS and len(grid.models) > 1 else None
    caption = ("Rows: front nodes; columns: end nodes (model:layer); black lines between the models' blocks. Colour "
               "scale: the metric's declared range where it has one" + (", reversed (low is alike)" if reverse else "")
               + ", bright is alike. Grey: a failed cell (hover for the reason). Hover a cell for its score, interval, "
               "p-values, calibrated score and seconds."
               + (f" {len(rows)} cells: the menu shows one front model's rows at a time." if paged else ""))
    parts: list = [Text([meaning_line(metric, info)], note=True),
                   Chart(f"heatmap {metric}", charts.heatmap(rows, "score", nodes, bounds, axis_title(kind), domain,
                                                             reverse, paged), caption)]
    if any("calibrated" in r for r in rows):
        parts.append(Chart(f"calibrated {metric}", charts.heatmap(rows, "calibrated", nodes, bounds,
                                                                  "calibrated score", (0.0, 1.0), False, paged),
                           "Calibrated scores: (score - tau) / (max - tau), clamped to [0, 1], tau the permutation "
                           "null's critical value: 0 where the score is within chance."))
    return Section(metric, parts, anchor=f"metric-{metric}")


def _aggregate(grid: Grid, metric: str, front: str, end: str, agg: str) -> dict | str:
    try:
        return grid.aggregate(metric, front, end, agg=agg)
    except (ValueError, KeyError, RuntimeError) as exc:
        return str(exc)


def best_pairs_table(grid: Grid) -> Table:
    """Each block's best pair with its family-wise p-value, and where the grid computes them (``Grid.aggregate``)
    the calibrated max and mean aggregates."""
    aggregates = hasattr(grid, "aggregate")
    header = ["metric", "front model", "end model", "best front layer", "best end layer", "score", "family-wise p"]
    if aggregates:
        header += ["max: tau", "max: calibrated", "mean: score", "mean: p-value", "mean: tau", "mean: calibrated"]
    rows, blocks = [], blocks_of(grid)
    for metric in grid.metrics:
        for front in grid.models:
            for end in grid.models:
                if (metric, front, end) not in blocks:
                    continue
                try:
                    best = grid.best_pair(metric, front, end)
                except ValueError as exc:
                    rows.append([metric, front, end, f"none: {exc}", None, None, None] + [None] * (6 * aggregates))
                    continue
                row = [metric, front, end, best["front_layer"], best["end_layer"], Number(best["score"]),
                       Number(best["p_value"], ".3g")]
                if aggregates:
                    top, mean = (_aggregate(grid, metric, front, end, agg) for agg in ("max", "mean"))
                    row += [_agg_cell(top, "tau"), _agg_cell(top, "calibrated"), _agg_cell(mean, "score"),
                            _agg_cell(mean, "p_value", ".3g"), _agg_cell(mean, "tau"), _agg_cell(mean, "calibrated")]
                rows.append(row)
    return Table("best pairs", header, rows,
                 "The best cell of each block (highest similarity, lowest distance) and its family-wise p-value under "
                 "the max-statistic null: every cell of the block scored under the same permutations (none without "
                 "permutations=K).")


def _agg_cell(value: dict | str, key: str, fmt: str = ".4f") -> Any:
    return value if isinstance(value, str) else Number(value.get(key), fmt)


def _histogram(own: list[float], block: list[float] | None) -> dict:
    """Counts of both nulls over one set of bins spanning their values (the observed score is drawn as a line)."""
    values = np.asarray(own + (block or []), dtype=np.float64)
    values = values[np.isfinite(values)]
    lo, hi = (float(values.min()), float(values.max())) if len(values) else (0.0, 1.0)
    edges = np.linspace(lo, hi if hi > lo else lo + 1.0, NULL_BINS + 1)
    count = lambda v: np.histogram(np.asarray(v, dtype=np.float64), edges)[0].tolist()  # noqa: E731
    return {"from": [float(f"{e:.6g}") for e in edges[:-1]], "to": [float(f"{e:.6g}") for e in edges[1:]],
            charts.NULL_OWN: count(own), charts.NULL_BLOCK: count(block) if block else []}


def null_section(grid: Grid) -> Section | None:
    """Histograms of the null values the grid kept (each block's best cell, beside the block's best null value
    per permutation) with the observed score; None when it kept none (no permutations)."""
    own = lambda k: grid.nodes[k[1]][0] == grid.nodes[k[2]][0]  # noqa: E731 - a model's own block: listed last
    kept = sorted((k for k in grid.cell_nulls if k in grid.cells and grid.cells[k].ok),
                  key=lambda k: (own(k), grid.metrics.index(k[0]), k[1], k[2]))
    if not kept:
        return None
    cells, observed, choices, blocks = [], [], [], blocks_of(grid)
    for key in kept[:NULL_CELLS]:
        metric, i, j = key
        (fm, fl), (em, el) = grid.nodes[i], grid.nodes[j]
        label = f"{metric} | {fm}:{fl} -> {em}:{el}"
        cell, block = grid.cells[key], grid.block_nulls.get((metric, fm, em))
        best = best_or_none(grid, metric, fm, em, blocks)
        choices.append(label)
        cells.append({"cell": label, **_histogram(grid.cell_nulls[key], block)})
        observed.append(clean({"cell": label, "observed score": cell.score, "p-value": cell.details.get("p_value"),
                               "family-wise p-value (best of the block)": best and best["p_value"],
                               "permutations": len(grid.cell_nulls[key])}))
    notes = [f"The page carries the nulls of the first {NULL_CELLS} of the {len(kept)} cells the grid kept (blocks "
             "between two models first, in metric and model order); the grid's JSON holds all of them."] \
        if len(kept) > NULL_CELLS else []
    return Section("Permutation nulls", [
        Chart("permutation nulls", charts.null_histogram(cells, observed, choices),
              "For the best cell of each block: its own null (its score under each permutation of the end's rows) and "
              "the block's best null value per permutation (against which the best pair's family-wise p-value is "
              "taken), binned; the red line is the observed score. Choose the cell in the menu."),
        *([Text(notes, note=True)] if notes else [])], anchor="nulls")


def failed_section(grid: Grid) -> Section | None:
    """The failed cells, grouped by error (each error once, with its count and first cells); None when none failed."""
    errors: Counter = Counter()
    where: dict[tuple, list[str]] = {}
    for (metric, i, j), cell in grid.cells.items():
        if not cell.ok:
            key = (metric, cell.error or "no score")
            errors[key] += 1
            where.setdefault(key, []).append(f"{grid.nodes[i][0]}:{grid.nodes[i][1]} -> {grid.nodes[j][0]}:{grid.nodes[j][1]}")
    if not errors:
        return None
    rows = [[metric, error, Number(n), "; ".join(where[(metric, error)][:5]) + (" ..." if n > 5 else "")]
            for (metric, error), n in errors.most_common()]
    return Section("Failed cells", [Table("failed cells", ["metric", "error", "cells", "first cells"], rows)],
                   anchor="failed")


def grid_lines(grid: Grid) -> list[str]:
    """The lines under the page's heading: what the grid compared and how many cells it scored."""
    done = sum(c.ok for c in grid.cells.values())
    ks = sorted({int(c.details["permutations"]) for c in grid.cells.values()
                 if isinstance(c.details.get("permutations"), (int, float)) and c.details.get("p_value") is not None})
    layers = {m: grid.layers_of(m) for m in grid.models}
    return [f"{len(grid.models)} model(s): " + "; ".join(f"{m} ({', '.join(ls)})" for m, ls in layers.items()),
            f"metrics: {', '.join(grid.metrics)}; pairs: {grid.meta.get('pairs', '?')}; {done} of {len(grid.cells)} "
            "cells scored" + (f"; permutation tests with K = {'/'.join(map(str, ks))}" if ks else "")]


def grid_sections(grid: Grid) -> list[Section]:
    """The sections of a grid's page (the provenance section is added by the caller)."""
    infos = grid_infos(grid)
    summary = len(grid.cells) > SUMMARY_CELLS
    sections = []
    if summary:
        sections.append(Section("Summary", [Text([f"This grid has {len(grid.cells)} cells, more than one page shows "
                                                  f"({SUMMARY_CELLS}): each metric shows the best cell of every block. "
                                                  "The grid's JSON holds every cell."], note=True)], anchor="summary"))
    sections += [_metric_section(grid, m, infos[m], summary) for m in grid.metrics]
    sections.append(Section("Best pairs", [best_pairs_table(grid)], anchor="best"))
    sections += [s for s in (null_section(grid), failed_section(grid)) if s is not None]
    if len(grid.models) >= 3:
        sections.append(zoo_sections(grid, infos))
    return sections
