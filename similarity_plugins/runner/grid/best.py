"""The best layer pair of a grid's block and the block's calibrated aggregates, under the block's joint null.

A *block* is every cell of one metric between the layers of a front model and the layers of an end model.
With ``permutations=K`` every cell of a grid runs its permutation test with the grid's seed, so the cells of
a block score the same K permutations of the end's test rows (the sample order of the whole block). The grid
keeps, per block and permutation, the best null value over the block's cells (the maximum for a similarity,
the minimum for a distance) and their mean. The best cell's observed score against the first is the
family-wise p-value of "the best pair" (Westfall and Young's max-statistic): it accounts for having picked the
best of all the block's cells, at the cost of the block's own permutation tests. The block's maximum or mean
against the same per-permutation aggregates gives the aggregate's p-value, critical value ``tau`` and
calibrated score (`similarity_plugins.stats.calibration`), the ``calibrate_layers`` of Groeger et al.

A family is all its cells: a block with a cell that was asked for and is missing (an interrupted grid) is
refused, naming those cells, rather than summarised over the cells that happen to be there; cells that failed
(the metric has no value there) are left out with an `IncompleteBlockWarning` naming them.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from ...host.results import SimilarityResult
from ...stats.calibration import DEFAULT_ALPHA, calibrate
from ...stats.permutation import summarise

BlockKey = tuple  # (metric, front model, end model)
NULL_KEY = "null_values"  # the cell details key the permutation tests fill in a grid (`summarise`)
AGGREGATES = ("max", "mean")


def take_nulls(cells: dict[tuple, SimilarityResult], nodes: list[tuple], info: dict[str, dict]
               ) -> tuple[dict[tuple, SimilarityResult], dict[BlockKey, list[float]], dict[BlockKey, list[float]],
                          dict[tuple, list[float]]]:
    """The cells without their null values; each block's best and mean null value per permutation; and the null
    values of each block's best cell.

    Args:
        cells: ``{(metric, front index, end index): result}``; a tested cell's ``details["null_values"]`` holds
            its K null values in permutation order.
        nodes: the grid's ``(model, layer)`` nodes, indexed by the cells' indices.
        info: ``{metric: {"kind", ...}}``: ``"distance"`` takes the minimum, anything else the maximum.

    Returns:
        ``(cells, best, mean, best_cells)``: the results copied without ``null_values`` (the others are the same
            objects); ``{(metric, front model, end model): [K floats]}`` of every block whose scored cells all have
            null values of one length K: the best over the block's cells and their mean, per permutation; and
            ``{(metric, front index, end index): [K floats]}``: for each such block, the null values of its best
            cell (the one [`best_pair`][best_pair] picks), so that a page can show the null of the cell a claim is
            made about.
    """
    clean: dict[tuple, SimilarityResult] = {}
    per_block: dict[BlockKey, list] = {}
    for key, cell in cells.items():
        if NULL_KEY in cell.details:
            details = dict(cell.details)
            null = details.pop(NULL_KEY)
            cell = replace(cell, details=details)
        else:
            null = None
        clean[key] = cell
        if cell.ok:
            metric, i, j = key
            per_block.setdefault((metric, nodes[i][0], nodes[j][0]), []).append((key, cell.score, null))
    best: dict[BlockKey, list[float]] = {}
    mean: dict[BlockKey, list[float]] = {}
    best_cells: dict[tuple, list[float]] = {}
    for block, entries in per_block.items():
        nulls = [null for _, _, null in entries]
        if any(n is None for n in nulls) or len({len(n) for n in nulls}) != 1 or not nulls[0]:
            continue
        stacked = np.asarray(nulls, dtype=np.float64)
        distance = info.get(block[0], {}).get("kind") == "distance"
        best[block] = (stacked.min(axis=0) if distance else stacked.max(axis=0)).tolist()
        mean[block] = stacked.mean(axis=0).tolist()
        top = _best_entry(entries, distance)
        if top is not None:
            best_cells[top[0]] = [float(v) for v in top[2]]
    return clean, best, mean, best_cells


def _best_entry(entries: list[tuple], distance: bool) -> tuple | None:
    """The ``(key, score, null)`` entry of a block's best score (lowest for a distance), the first in row-major order
    (front index, then end index) on a tie, as `best_pair` picks it; None when no score is a number."""
    top = None
    for entry in sorted(entries, key=lambda e: e[0][1:]):
        score = entry[1]
        if math.isnan(score):
            continue
        if top is None or (score < top[1] if distance else score > top[1]):
            top = entry
    return top


def asked_cells(grid: Any, metric: str, front: str, end: str) -> set[tuple[int, int]]:
    """The (front index, end index) cells of the block that the grid's ``pairs`` asked for (what its meta says;
    for a grid read from a file without that record, the cells it holds)."""
    rows, cols = grid._indices(front), grid._indices(end)
    pairs = grid.meta.get("pairs")
    if pairs == "all" or (pairs == "across" and front != end) or (pairs == "within" and front == end):
        return {(i, j) for i in rows for j in cols}
    if pairs in ("across", "within"):
        return set()
    explicit = grid.meta.get("explicit_pairs")
    if isinstance(explicit, list):
        return {(i, j) for i, j in explicit if i in rows and j in cols}
    return {(i, j) for (m, i, j) in grid.cells if m == metric and i in rows and j in cols}


class IncompleteBlockWarning(UserWarning):
    """A block's best pair or aggregate (`Grid.best_pair`, `Grid.aggregate`) was taken without its failed cells: cells
    where the metric has no value (a constant layer, an error), which the message names with their errors. Where
    that is expected, ``warnings.simplefilter("ignore", similarity_plugins.IncompleteBlockWarning)``; missing
    cells (an interrupted grid) are refused instead."""


def _cell_names(grid: Any, metric: str, cells: list[tuple[int, int]], errors: bool) -> str:
    """Up to five cells as ``model:layer x model:layer`` (with their errors), and how many more."""
    def name(cell: tuple[int, int]) -> str:
        (fm, fl), (em, el) = grid.nodes[cell[0]], grid.nodes[cell[1]]
        return f"{fm}:{fl} x {em}:{el}" + (f" ({grid.cells[(metric, *cell)].error})" if errors else "")

    return "; ".join(name(c) for c in cells[:5]) + (f" and {len(cells) - 5} more" if len(cells) > 5 else "")


def check_complete(grid: Any, metric: str, front: str, end: str) -> None:
    """Refuse a block with a cell that was asked for and is missing, and warn about failed ones, naming the cells.

    A missing cell (an interrupted grid) could have been the best or moved the mean, so nothing is given. A failed
    cell has no value (the metric is undefined there: a constant layer, a degenerate CCA), so the family is the
    cells that have one; an `IncompleteBlockWarning` names those left out.

    Raises:
        ValueError: naming up to five missing cells (and how many more), and what to do.
    """
    asked = asked_cells(grid, metric, front, end)
    missing = sorted(c for c in asked if (metric, *c) not in grid.cells)
    failed = sorted(c for c in asked if (metric, *c) in grid.cells and not grid.cells[(metric, *c)].ok)
    if missing:
        raise ValueError(f"metric {metric!r}, block {front} x {end}: {len(missing)} cells missing (not computed: an "
                         f"interrupted grid?): {_cell_names(grid, metric, missing, False)}; the best pair or an "
                         "aggregate over the other cells would not be the block's, so none is given: finish the grid "
                         "(compare_grid(..., resume=...)) or choose layers or pairs without these cells")
    if failed:
        warnings.warn(f"metric {metric!r}, block {front} x {end}: {len(failed)} of its {len(asked)} cells failed and "
                      f"are left out of the best pair and the aggregates (the metric has no value there): "
                      f"{_cell_names(grid, metric, failed, True)}", IncompleteBlockWarning, stacklevel=4)


def _best_cell(grid: Any, metric: str, front: str, end: str, other_layers: bool = False) -> tuple[int, int, float]:
    """(row, column, score) of the block's best cell: the highest (lowest for a distance), the first in row-major
    order on a tie, each layer against itself left out with ``other_layers`` (a model's own block); ``ValueError``
    when the block misses cells or has no scored cell (`check_complete`)."""
    block = grid.matrix(metric, front, end)
    check_complete(grid, metric, front, end)
    if other_layers and front == end:
        block = block.copy()
        np.fill_diagonal(block, np.nan)
    if np.isnan(block).all():
        raise ValueError(f"metric {metric!r} has no scored cell between model {front!r} and model {end!r}; "
                         "check the cells' errors (grid.report)")
    kind = grid.info.get(metric, {}).get("kind")
    flat = int(np.nanargmin(block) if kind == "distance" else np.nanargmax(block))
    row, col = divmod(flat, block.shape[1])
    return row, col, float(block[row, col])


def best_pair(grid: Any, metric: str, front: str, end: str, other_layers: bool = False) -> dict[str, Any]:
    """The best cell of ``metric`` between ``front``'s and ``end``'s layers, with its family-wise p-value.

    Args:
        grid: a [`Grid`][similarity_plugins.runner.grid.results.Grid].
        metric: a metric of the grid.
        front: a model name of the grid.
        end: a model name of the grid (``front`` again: that model's own block).
        other_layers: with ``front == end``, leave each layer against itself out of the choice (the block
            nulls still hold those cells' null values, which can only raise the p-value).

    Returns:
        ``{"front_layer", "end_layer", "score", "p_value"}``: the highest score (lowest for a metric declared a
            distance; the first in row-major order on a tie) and ``p_value = (1 + #{k: best null value of
            permutation k at least as extreme as score}) / (K + 1)``, never below that cell's own p-value (a
            permutation's best over the block is at least that cell's null value; the maximum with the cell's
            own p-value only absorbs float rounding between the two paths); None when the grid ran without
            permutations or a scored cell of the block has no null values (a metric without a permutation test).

    Raises:
        ValueError: an unknown metric or model (naming the valid ones), a block without any scored cell, or one
            with cells missing (`check_complete`; failed cells are left out with an `IncompleteBlockWarning`).
    """
    row, col, score = _best_cell(grid, metric, front, end, other_layers)
    kind = grid.info.get(metric, {}).get("kind")
    front_layer, end_layer = grid.layers_of(front)[row], grid.layers_of(end)[col]
    null = grid.block_nulls.get((metric, front, end))
    p_value = None
    if null is not None:
        p_value = summarise(score, torch.tensor(null, dtype=torch.float64), kind)["p_value"]
        own = grid.cells[(metric, grid.nodes.index((front, front_layer)), grid.nodes.index((end, end_layer)))]
        mine = own.details.get("p_value")
        if isinstance(mine, (int, float)) and math.isfinite(mine):
            p_value = max(p_value, float(mine))
    return {"front_layer": front_layer, "end_layer": end_layer, "score": score, "p_value": p_value}


def _level(grid: Any, metric: str, front: str, end: str, alpha: float | None) -> float:
    """``alpha`` checked, or the level the block's cells were calibrated at (their option ``alpha``)."""
    from ...stats.calibration import check_alpha

    if alpha is not None:
        return check_alpha(alpha)
    rows, cols = set(grid._indices(front)), set(grid._indices(end))
    levels = {c.details.get("alpha") for (m, i, j), c in grid.cells.items() if m == metric and i in rows and j in cols}
    levels.discard(None)
    return float(levels.pop()) if len(levels) == 1 else DEFAULT_ALPHA


def aggregate(grid: Any, metric: str, front: str, end: str, agg: str = "max",
              alpha: float | None = None) -> dict[str, Any]:
    """The block's aggregate with its p-value, critical value and calibrated score under the block's joint null.

    Args:
        grid: a [`Grid`][similarity_plugins.runner.grid.results.Grid].
        metric: a metric of the grid.
        front: a model name of the grid.
        end: a model name of the grid (``front`` again: that model's own block).
        agg: ``"max"`` (the best cell: the highest, the lowest for a distance) or ``"mean"`` (over the block).
        alpha: the level of ``tau``; None: the ``alpha`` the cells ran with (0.05 by default).

    Returns:
        ``{"score", "p_value", "tau", "calibrated"}``: the aggregate of the block's scores and, with permutations,
            ``p_value = (1 + #{k: the aggregate of permutation k's null values is at least as extreme}) / (K + 1)``,
            ``tau`` the ``ceil((1 - alpha) (K + 1))``-th smallest of the aggregate and its K null aggregates and
            ``calibrated = clamp((score - tau) / (smax - tau), 0, 1)`` with the metric's declared upper bound
            (``relu(score - tau)`` without one); the last three None without permutations.

    Raises:
        ValueError: an unknown metric, model or ``agg``, a bad ``alpha``, a block without any scored cell, or one
            with cells missing (`check_complete`; failed cells are left out with an `IncompleteBlockWarning`).
    """
    if agg not in AGGREGATES:
        raise ValueError(f"agg must be one of {', '.join(AGGREGATES)}, got {agg!r}")
    row, col, best = _best_cell(grid, metric, front, end)
    score = best if agg == "max" else float(np.nanmean(grid.matrix(metric, front, end)))
    level = _level(grid, metric, front, end, alpha)
    null = (grid.block_nulls if agg == "max" else grid.block_means).get((metric, front, end))
    if null is None:
        return {"score": score, "p_value": None, "tau": None, "calibrated": None}
    info = grid.info.get(metric, {})
    values = torch.tensor(null, dtype=torch.float64)
    p_value = summarise(score, values, info.get("kind"))["p_value"]
    found = calibrate(score, values, level, info.get("range"), info.get("kind"))
    return {"score": score, "p_value": p_value, "tau": found["tau"], "calibrated": found["calibrated"]}
