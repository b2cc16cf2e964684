"""The best layer pair of a grid's block with its family-wise p-value under the max-statistic null.

A *block* is every cell of one metric between the layers of a front model and the layers of an end model.
With ``permutations=K`` every cell of a grid runs its permutation test with the grid's seed, so the cells of
a block score the same K permutations of the end's test rows (the sample order of the whole block). The grid
keeps, per block and permutation, the best null value over the block's cells (the maximum for a similarity,
the minimum for a distance); the best cell's observed score against that distribution is the family-wise
p-value of "the best pair" (Westfall and Young's max-statistic): it accounts for having picked the best of
all the block's cells, at the cost of the block's own permutation tests.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from ..host.results import SimilarityResult
from ..stats.permutation import summarise

BlockKey = tuple  # (metric, front model, end model)
NULL_KEY = "null_values"  # the cell details key the permutation tests fill in a grid (`summarise`)


def take_nulls(cells: dict[tuple, SimilarityResult], nodes: list[tuple], info: dict[str, dict]
               ) -> tuple[dict[tuple, SimilarityResult], dict[BlockKey, list[float]], dict[tuple, list[float]]]:
    """The cells without their null values, each block's best null value per permutation, and the null values of
    each block's best cell.

    Args:
        cells: ``{(metric, front index, end index): result}``; a tested cell's ``details["null_values"]`` holds
            its K null values in permutation order.
        nodes: the grid's ``(model, layer)`` nodes, indexed by the cells' indices.
        info: ``{metric: {"kind", ...}}``: ``"distance"`` takes the minimum, anything else the maximum.

    Returns:
        ``(cells, {(metric, front model, end model): [K floats]}, {(metric, front index, end index): [K floats]})``:
            the results copied without ``null_values`` (the others are the same objects); the block nulls of every
            block whose scored cells all have null values of one length K; and, for each such block, the null
            values of its best cell (the one [`best_pair`][best_pair] picks), so that a page can show the null
            of the cell a claim is made about.
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
    blocks: dict[BlockKey, list[float]] = {}
    best_nulls: dict[tuple, list[float]] = {}
    for block, entries in per_block.items():
        nulls = [null for _, _, null in entries]
        if any(n is None for n in nulls) or len({len(n) for n in nulls}) != 1 or not nulls[0]:
            continue
        stacked = np.asarray(nulls, dtype=np.float64)
        distance = info.get(block[0], {}).get("kind") == "distance"
        blocks[block] = (stacked.min(axis=0) if distance else stacked.max(axis=0)).tolist()
        best = _best_entry(entries, distance)
        if best is not None:
            best_nulls[best[0]] = [float(v) for v in best[2]]
    return clean, blocks, best_nulls


def _best_entry(entries: list[tuple], distance: bool) -> tuple | None:
    """The ``(key, score, null)`` entry of a block's best score (lowest for a distance), the first in row-major order
    (front index, then end index) on a tie, as `best_pair` picks it; None when no score is a number."""
    best = None
    for entry in sorted(entries, key=lambda e: e[0][1:]):
        score = entry[1]
        if math.isnan(score):
            continue
        if best is None or (score < best[1] if distance else score > best[1]):
            best = entry
    return best


def best_pair(grid: Any, metric: str, front: str, end: str, other_layers: bool = False) -> dict[str, Any]:
    """The best cell of ``metric`` between ``front``'s and ``end``'s layers, with its family-wise p-value.

    Args:
        grid: a [`Grid`][similarity_plugins.runner.grid_results.Grid].
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
        ValueError: an unknown metric or model (naming the valid ones), or a block without any scored cell.
    """
    block = grid.matrix(metric, front, end)
    if other_layers and front == end:
        block = block.copy()
        np.fill_diagonal(block, np.nan)
    if np.isnan(block).all():
        raise ValueError(f"metric {metric!r} has no scored cell between model {front!r} and model {end!r}; "
                         "check the cells' errors (grid.report)")
    kind = grid.info.get(metric, {}).get("kind")
    flat = int(np.nanargmin(block) if kind == "distance" else np.nanargmax(block))
    row, col = divmod(flat, block.shape[1])
    front_layer, end_layer = grid.layers_of(front)[row], grid.layers_of(end)[col]
    score = float(block[row, col])
    null = grid.block_nulls.get((metric, front, end))
    p_value = None
    if null is not None:
        p_value = summarise(score, torch.tensor(null, dtype=torch.float64), kind)["p_value"]
        own = grid.cells[(metric, grid.nodes.index((front, front_layer)), grid.nodes.index((end, end_layer)))]
        mine = own.details.get("p_value")
        if isinstance(mine, (int, float)) and math.isfinite(mine):
            p_value = max(p_value, float(mine))
    return {"front_layer": front_layer, "end_layer": end_layer, "score": score, "p_value": p_value}
