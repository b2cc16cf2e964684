"""A zoo's view (three or more models): a model x model matrix per metric, and the models placed by how alike
the metric finds them, as a dendrogram (average linkage) and a two-dimensional classical MDS map.

Each model pair's entry is its block's best cell (over the pair's layers, `Grid.best_pair`). The distance the
dendrogram and the map are drawn from is the score itself for a distance and ``1 - score`` for a similarity
(clipped at 0: a relative accuracy can exceed 1), averaged over the two orders of a pair; the page says so.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from . import charts
from .meaning import axis_domain, axis_kind, axis_title
from .page import Chart, Section, Text
from .rows import clean


def blocks_of(grid: Any) -> set[tuple[str, str, str]]:
    """The ``(metric, front model, end model)`` blocks that have at least one cell in ``grid``."""
    return {(m, grid.nodes[i][0], grid.nodes[j][0]) for (m, i, j) in grid.cells}


def best_or_none(grid: Any, metric: str, front: str, end: str, blocks: set | None = None) -> dict | None:
    """``grid.best_pair(metric, front, end)``, or None when the block has no cell (``blocks``: `blocks_of`, when
    known) or no scored one."""
    if (metric, front, end) not in (blocks if blocks is not None else blocks_of(grid)):
        return None
    try:
        return grid.best_pair(metric, front, end)
    except ValueError:
        return None


def block_rows(grid: Any, metric: str) -> list[dict]:
    """One row per model pair (a block of the grid): its best cell's score, layers and family-wise p-value
    (``{"front model", "end model"}`` alone where the block has no scored cell)."""
    rows, blocks = [], blocks_of(grid)
    for front in grid.models:
        for end in grid.models:
            best = best_or_none(grid, metric, front, end, blocks)
            row: dict[str, Any] = {"front model": front, "end model": end}
            if best is not None:
                row.update({"best score": best["score"], "front layer": best["front_layer"],
                            "end layer": best["end_layer"], "family-wise p-value": best["p_value"]})
            elif front == end:
                continue
            rows.append(clean(row))
    return rows


def distances(grid: Any, metric: str, distance_kind: bool) -> tuple[np.ndarray | None, list[str]]:
    """The models' symmetric distance matrix for ``metric``, and the model pairs missing from it.

    Returns:
        ``(D, missing)``: ``D[a, b]`` the mean over both orders of ``score`` (a distance) or ``max(0, 1 - score)``
            (a similarity) of the block's best cell, 0 on the diagonal; None with ``missing`` naming the pairs
            that have no scored block in either order.
    """
    models, blocks = grid.models, blocks_of(grid)
    n = len(models)
    one = np.full((n, n), np.nan)
    for a, front in enumerate(models):
        for b, end in enumerate(models):
            best = best_or_none(grid, metric, front, end, blocks) if a != b else None
            if best is not None and np.isfinite(best["score"]):
                one[a, b] = best["score"] if distance_kind else max(0.0, 1.0 - best["score"])
    both = np.stack([one, one.T])
    counts = np.isfinite(both).sum(axis=0)
    d = np.where(counts > 0, np.nansum(np.where(np.isfinite(both), both, 0.0), axis=0) / np.maximum(counts, 1), np.nan)
    np.fill_diagonal(d, 0.0)
    missing = [f"{models[a]} - {models[b]}" for a in range(n) for b in range(a + 1, n) if np.isnan(d[a, b])]
    return (None, missing) if missing else (d, [])


def mds(d: np.ndarray) -> np.ndarray:
    """Classical (Torgerson) MDS: (n, 2) coordinates whose distances approximate ``d`` (n, n) best in the
    least-squares sense of the double-centred squared distances."""
    n = len(d)
    j = np.eye(n) - np.ones((n, n)) / n
    b = -0.5 * j @ (d ** 2) @ j
    values, vectors = np.linalg.eigh(b)
    top = np.argsort(values)[::-1][:2]
    coords = vectors[:, top] * np.sqrt(np.maximum(values[top], 0.0))
    return np.pad(coords, ((0, 0), (0, 2 - coords.shape[1])))


def dendrogram_lines(d: np.ndarray, models: list[str]) -> tuple[list[dict], list[dict]]:
    """The segments and leaves of the average-linkage dendrogram of ``d``: ``([{"x", "x2", "y", "y2"}],
    [{"model", "x"}])``."""
    from scipy.cluster.hierarchy import dendrogram, linkage
    from scipy.spatial.distance import squareform

    tree = dendrogram(linkage(squareform(d, checks=False), method="average"), no_plot=True, labels=models)
    segments = []
    for xs, ys in zip(tree["icoord"], tree["dcoord"]):
        for k in range(3):
            segments.append({"x": xs[k], "x2": xs[k + 1], "y": ys[k], "y2": ys[k + 1]})
    leaves = [{"model": name, "x": 5.0 + 10.0 * k} for k, name in enumerate(tree["ivl"])]
    return segments, leaves


def _metric_parts(grid: Any, metric: str, info: Mapping[str, Any]) -> list:
    kind = axis_kind(info)
    distance_kind = kind == "distance"
    views = [charts.matrix(block_rows(grid, metric), grid.models, "best score", axis_title(kind), axis_domain([info]),
                           distance_kind)]
    caption = (f"{metric}: each model pair's best cell over their layers (hover: the layers and the family-wise "
               "p-value; grey: no scored cell)")
    d, missing = distances(grid, metric, distance_kind)
    if d is None:
        return [Chart(f"zoo {metric}", views[0], caption + "."),
                Text([f"{metric}: no dendrogram or map: no scored block for {', '.join(missing)}."], note=True)]
    said = "the score (a distance)" if distance_kind else "1 - score (clipped at 0)"
    segments, leaves = dendrogram_lines(d, grid.models)
    points = [{"model": m, "MDS 1": float(x), "MDS 2": float(y)} for m, (x, y) in zip(grid.models, mds(d))]
    views += [charts.dendrogram(segments, leaves, f"distance: {said}"), charts.mds_map(points)]
    return [Chart(f"zoo {metric}", {"hconcat": views, "resolve": {"scale": {"color": "independent"}}},
                  f"{caption}; the average-linkage dendrogram of the models and their classical MDS map in two "
                  f"dimensions, both from the distance between two models: {said} of their best cell, averaged over "
                  "both orders. Models close together are alike by this metric.")]


def zoo_sections(grid: Any, infos: Mapping[str, dict]) -> Section:
    """The zoo section: for every metric, the model x model matrix, the dendrogram and the MDS map."""
    parts = [Section(metric, _metric_parts(grid, metric, infos.get(metric, {}))) for metric in grid.metrics]
    return Section("Model x model", parts, anchor="zoo")
