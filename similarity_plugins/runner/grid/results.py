"""The result of [`compare_grid`][grid.compare_grid]: a [`Grid`][Grid] of cells over (model, layer) nodes.

A *node* is a ``(model name, layer name)`` pair; a *cell* is one metric's
[`SimilarityResult`][similarity_plugins.SimilarityResult] for one ordered pair of nodes
(front node on the rows, end node on the columns). A cell of a symmetric metric that was
computed once for both orders appears in both, the copy marked ``details["mirrored"] = True``.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

import numpy as np

from ...host.results import Report, SimilarityResult, jsonable
from ...stats.pvalues import adjust_p_values
from ...utils.io import write_text
from ...utils.text import did_you_mean
from .files import GRID_FORMAT, cell_result_dict, grid_parts, read_grid_file

Node = tuple  # (model name, layer name)


class Grid:
    """Every cell of a grid of comparisons, as matrices, best pairs, a flat report, JSON and heatmaps.

    Attributes:
        nodes: ``(model, layer)`` pairs in order: models as given, each model's layers as given.
        metrics: metric names, in order.
        cells: ``{(metric, front index, end index): result}``.
        info: ``{metric: {"kind", "range", "symmetric"}}`` as the metrics declare.
        meta: the call's settings.
        block_nulls: ``{(metric, front model, end model): [K floats]}``: with permutations, each permutation's
            best null value over the block's cells, for [`best_pair`][similarity_plugins.Grid.best_pair].
        cell_nulls: ``{(metric, front index, end index): [K floats]}``: with permutations, the null values of each
            block's best cell (the cell `best_pair` picks), in permutation order; the other cells keep only their
            ``p_value``, ``null_mean`` and ``null_std``.
        block_means: ``{(metric, front model, end model): [K floats]}``: with permutations, each permutation's mean
            null value over the block's cells, for [`aggregate`][similarity_plugins.Grid.aggregate] with
            ``agg="mean"`` (``block_nulls`` serves ``"max"``).
    """

    def __init__(self, nodes: list[Node], metrics: list[str], cells: dict[tuple[str, int, int], SimilarityResult],
                 info: dict[str, dict] | None = None, meta: dict | None = None,
                 block_nulls: dict[tuple[str, str, str], list[float]] | None = None,
                 cell_nulls: dict[tuple[str, int, int], list[float]] | None = None,
                 block_means: dict[tuple[str, str, str], list[float]] | None = None) -> None:
        from .best import take_nulls

        self.nodes: list[Node] = [tuple(n) for n in nodes]
        self.metrics = list(metrics)
        self.info = {m: dict((info or {}).get(m, {})) for m in self.metrics}
        self.cells, found, means, best = take_nulls(dict(cells), self.nodes, self.info)
        self.block_nulls = {**found, **{tuple(k): list(v) for k, v in (block_nulls or {}).items()}}
        self.cell_nulls = {**best, **{tuple(k): list(v) for k, v in (cell_nulls or {}).items()}}
        self.block_means = {**means, **{tuple(k): list(v) for k, v in (block_means or {}).items()}}
        self.meta = dict(meta or {})

    # -- shape -----------------------------------------------------------------------------------

    @property
    def models(self) -> list[str]:
        """Model names in order."""
        return list(dict.fromkeys(m for m, _ in self.nodes))

    def layers_of(self, model: str) -> list[str]:
        """The layers of ``model`` in the grid, in order."""
        self._check_model(model)
        return [layer for m, layer in self.nodes if m == model]

    def _check_model(self, model: str | None) -> None:
        if model is not None and model not in self.models:
            raise ValueError(f"unknown model {model!r}{did_you_mean(str(model), self.models)}; "
                             f"the grid's models: {', '.join(self.models)}")

    def _check_metric(self, metric: str) -> None:
        if metric not in self.metrics:
            raise ValueError(f"metric {metric!r} is not in this grid{did_you_mean(str(metric), self.metrics)}; "
                             f"its metrics: {', '.join(self.metrics)}")

    def _indices(self, model: str | None) -> list[int]:
        self._check_model(model)
        return [i for i, (m, _) in enumerate(self.nodes) if model is None or m == model]

    # -- matrices --------------------------------------------------------------------------------

    def _matrix(self, metric: str, front: str | None, end: str | None, value) -> np.ndarray:
        self._check_metric(metric)
        rows, cols = self._indices(front), self._indices(end)
        out = np.full((len(rows), len(cols)), np.nan)
        for r, i in enumerate(rows):
            for c, j in enumerate(cols):
                cell = self.cells.get((metric, i, j))
                if cell is not None and cell.ok:
                    out[r, c] = value(cell)
        return out

    def matrix(self, metric: str, front: str | None = None, end: str | None = None) -> np.ndarray:
        """Scores of ``metric`` as a float64 array.

        Args:
            metric: a metric of the grid.
            front: a model name (its layers are the rows), or None for every node.
            end: a model name (its layers are the columns), or None for every node.

        Returns:
            A (rows, columns) array. Rows are front nodes (all nodes, or ``front``'s layers), columns end nodes
                (all, or ``end``'s layers), in ``nodes`` order; NaN where a cell was not asked for or failed.
        """
        return self._matrix(metric, front, end, lambda cell: float(cell.score))

    def calibrated(self, metric: str, front: str | None = None, end: str | None = None) -> np.ndarray:
        """The cells' calibrated scores (``details["calibrated"]``) of ``metric``, shaped like [`matrix`][matrix].

        With ``compare_grid(..., options={"permutations": K})`` each cell's score against its own permutation
        null: ``clamp((s - tau) / (smax - tau), 0, 1)`` with ``tau`` the level-``alpha`` critical value and
        ``smax`` the metric's declared upper bound (``relu(s - tau)`` without one); 0 where the cell's test does
        not reject. NaN where a cell has none (not asked for, failed, or run without permutations).
        """
        return self._matrix(metric, front, end, lambda cell: _number(cell.details.get("calibrated")))

    def aggregate(self, metric: str, front: str, end: str, agg: str = "max",
                  alpha: float | None = None) -> dict[str, Any]:
        """The maximum or the mean of ``metric`` over the block of ``front``'s x ``end``'s layers, calibrated under
        the block's joint null (every permutation applied to the whole block, as for
        [`best_pair`][similarity_plugins.Grid.best_pair]).

        Args:
            metric: a metric of the grid.
            front: a model name of the grid.
            end: a model name of the grid (``front`` again: that model's own block).
            agg: ``"max"`` (the best cell; the lowest for a distance) or ``"mean"``.
            alpha: the level of ``tau``; None: the ``alpha`` option the cells ran with (default 0.05).

        Returns:
            ``{"score", "p_value", "tau", "calibrated"}``; ``p_value``, ``tau`` and ``calibrated`` are None when the
                grid ran without permutations. For ``"max"`` the p-value is the family-wise p-value of
                ``best_pair``. See `similarity_plugins.runner.grid.best`.

        Raises:
            ValueError: an unknown metric, model or ``agg``, a bad ``alpha``, or a block with cells missing (an
                interrupted grid), naming them; failed cells (no value) are left out with an
                ``IncompleteBlockWarning`` naming them.
        """
        from .best import aggregate

        return aggregate(self, metric, front, end, agg, alpha)

    def best(self, metric: str, front: str, end: str) -> list[tuple[str, str | None, float]]:
        """For each layer of model ``front``, the layer of model ``end`` with the best score of ``metric``.

        Returns a list of ``(front_layer, end_layer, score)`` in ``front``'s layer order; best is the highest
        score for a similarity and the lowest for a metric declared a distance. A row without any score gives
        ``(front_layer, None, nan)``.
        """
        block = self.matrix(metric, front, end)
        distance = self.info.get(metric, {}).get("kind") == "distance"
        end_layers = self.layers_of(end)
        out = []
        for layer, row in zip(self.layers_of(front), block):
            if np.isnan(row).all():
                out.append((layer, None, math.nan))
                continue
            k = int(np.nanargmin(row) if distance else np.nanargmax(row))
            out.append((layer, end_layers[k], float(row[k])))
        return out

    def best_pair(self, metric: str, front: str, end: str, *, other_layers: bool = False) -> dict[str, Any]:
        """The best cell of ``metric`` between model ``front``'s and model ``end``'s layers and its family-wise
        p-value under the max-statistic null.

        Args:
            metric: a metric of the grid.
            front: a model name of the grid.
            end: a model name of the grid (``front`` again: that model's own block).
            other_layers: in a model's own block, leave out each layer against itself (the best pair of two
                different layers; the p-value still counts those cells' nulls, so it errs on the high side).

        Returns:
            ``{"front_layer", "end_layer", "score", "p_value"}``. ``score`` is the block's highest (lowest for a
                distance); with ``compare_grid(..., options={"permutations": K})``, ``p_value = (1 + #{k: the best
                null value over all the block's cells under permutation k is at least as extreme as score}) /
                (K + 1)``, every cell of the block scored under the same K permutations of the end's test rows.
                It is never below that cell's own p-value and is 1/(K+1) for a model against itself; None
                without permutations. See `similarity_plugins.runner.grid.best`.
        """
        from .best import best_pair

        return best_pair(self, metric, front, end, other_layers=other_layers)

    def p_values(self, metric: str, correction: str | None = None, front: str | None = None,
                 end: str | None = None) -> np.ndarray:
        """The cells' ``details["p_value"]`` of ``metric`` as a matrix shaped like [`matrix`][matrix].

        NaN where a cell has none (not asked for, failed, or the metric was run without a permutation test).
        ``correction``: None, ``"holm"`` (family-wise) or ``"bh"`` (Benjamini-Hochberg false discovery rate),
        applied over every cell of ``metric`` in the grid that has a p-value, a mirrored cell counted once
        (the block asked for with ``front``/``end`` is then cut from the adjusted matrix).
        """
        self._check_metric(metric)
        adjust_p_values([], correction)  # refuse an unknown correction before any work
        own = [(k, c) for k, c in self.cells.items() if k[0] == metric and c.ok and not c.details.get("mirrored")
               and _is_p(c.details.get("p_value"))]
        adjusted = adjust_p_values([float(c.details["p_value"]) for _, c in own], correction)
        by_cell = {(i, j): p for ((_, i, j), _), p in zip(own, adjusted)}
        for (m, i, j), cell in self.cells.items():  # a mirrored cell takes the value of the cell it copies
            if m == metric and cell.details.get("mirrored") and (j, i) in by_cell:
                by_cell[(i, j)] = by_cell[(j, i)]
        rows, cols = self._indices(front), self._indices(end)
        out = np.full((len(rows), len(cols)), np.nan)
        for r, i in enumerate(rows):
            for c, j in enumerate(cols):
                out[r, c] = by_cell.get((i, j), np.nan)
        return out

    # -- flat forms ------------------------------------------------------------------------------

    @property
    def report(self) -> Report:
        """The flat [`Report`][similarity_plugins.Report]: one row per metric and cell (metric-major, then front node, then
        end node); each row's ``layer`` is the cut and ``details["front_model"]`` / ``["end_model"]`` name the models."""
        rows = [self.cells[k] for k in sorted(self.cells, key=lambda k: (self.metrics.index(k[0]), k[1], k[2]))]
        return Report(rows, {**self.meta, "kinds": {m: self.info[m].get("kind") for m in self.metrics}})

    def to_dict(self) -> dict:
        """A JSON-ready dict of the whole grid (nodes, metrics, info, meta and every cell; a non-finite score as
        ``"inf"``, ``"-inf"`` or ``"nan"``, so that it reads back as it was)."""
        cells = [{"metric": m, "front": i, "end": j, "result": cell_result_dict(c)}
                 for (m, i, j), c in sorted(self.cells.items(), key=lambda kv: (self.metrics.index(kv[0][0]),) + kv[0][1:])]
        nulls = [{"metric": m, "front": f, "end": e, "null": list(v)} for (m, f, e), v in self.block_nulls.items()]
        kept = [{"metric": m, "front": i, "end": j, "null": list(v)} for (m, i, j), v in self.cell_nulls.items()]
        means = [{"metric": m, "front": f, "end": e, "null": list(v)} for (m, f, e), v in self.block_means.items()]
        return {"format": GRID_FORMAT, "version": 1, "nodes": [list(n) for n in self.nodes], "metrics": self.metrics,
                "info": jsonable(self.info), "meta": jsonable(self.meta), "cells": cells, "block_nulls": nulls,
                "cell_nulls": kept, "block_means": means}

    def to_json(self, path: str | os.PathLike | None = None, indent: int = 2) -> str:
        """The grid as JSON text; also written (whole, atomically) to ``path`` when given."""
        text = json.dumps(self.to_dict(), indent=indent)
        if path is not None:
            write_text(path, text + "\n")
        return text

    def to_html(self, path: str | os.PathLike | None = None, *, title: str | None = None) -> str:
        """The grid as one self-contained HTML page: a heatmap per metric and block, the best pairs with their
        family-wise p-values, the kept permutation nulls, for three or more models a model x model matrix with
        a dendrogram and an MDS map, and the provenance ([The HTML report](../report.md)).

        Args:
            path: where to write the page (whole, atomically); None: only return it.
            title: the page's title; None: made from the models and metrics.

        Returns:
            The page's HTML text, drawn from [`to_dict`][to_dict] alone, so it equals the page that
                ``similarity-plugins report`` makes from the grid's JSON file.
        """
        from ...host.pages import write_page

        return write_page(self, path, title=title)

    @classmethod
    def from_dict(cls, payload: dict) -> Grid:
        """The grid of [`to_dict`][to_dict]; `BadFile` (a ``ValueError``) naming the first problem when
        ``payload`` is not one (a missing field, a cell index out of range, a score that is not a number)."""
        return cls(*grid_parts(payload, "the grid dict"))

    @classmethod
    def from_json(cls, path: str | os.PathLike) -> Grid:
        """Read a grid written by [`to_json`][to_json]; `BadFile` (a ``ValueError``) naming the file when it is
        not valid JSON or not a grid, ``FileNotFoundError`` when it does not exist."""
        return cls(*read_grid_file(path))

    # -- figures ---------------------------------------------------------------------------------

    def heatmap(self, path: str | os.PathLike, metric: str | None = None) -> str:
        """Write [`heatmap_bytes`][heatmap_bytes] to ``path`` (whole, atomically), in the format of its extension (png, svg or
        pdf); returns the path."""
        from ...utils.io import write_all

        fmt = os.path.splitext(os.fspath(path))[1].lstrip(".").lower() or "png"
        write_all({os.fspath(path): self.heatmap_bytes(fmt, metric)})
        return os.fspath(path)

    def heatmap_bytes(self, fmt: str = "png", metric: str | None = None) -> bytes:
        """One heatmap panel per metric (or only ``metric``) as the contents of a ``fmt`` file (png, svg, pdf).

        Front nodes on the rows, end nodes on the columns, labelled ``model:layer`` (black lines between models);
        the colour scale is the metric's declared range where it has one, reversed for distances; failed cells
        are hatched grey, cells not asked for blank; the best end layer of each row within each end model is
        outlined in red (highest similarity, lowest distance).
        """
        from ...utils.heatmap import heatmap_bytes

        names = [metric] if metric is not None else self.metrics
        for name in names:
            self._check_metric(name)
        return heatmap_bytes([self._panel(name) for name in names], fmt)

    def _panel(self, metric: str) -> dict:
        info = self.info.get(metric, {})
        values = self.matrix(metric)
        failed = np.zeros(values.shape, bool)
        for (m, i, j), cell in self.cells.items():
            if m == metric and not cell.ok:
                failed[i, j] = True
        best = []
        for front in self.models:
            for end in self.models:
                rows, cols = self._indices(front), self._indices(end)
                block = values[np.ix_(rows, cols)]
                for r, row in zip(rows, block):
                    if not np.isnan(row).all():
                        k = int(np.nanargmin(row) if info.get("kind") == "distance" else np.nanargmax(row))
                        best.append((r, cols[k]))
        return {"title": metric, "values": values, "failed": failed, "best": best, "kind": info.get("kind"),
                "range": info.get("range"),
                "bounds": [k for k in range(1, len(self.nodes)) if self.nodes[k][0] != self.nodes[k - 1][0]],
                "labels": [f"{m}:{layer}" for m, layer in self.nodes]}

    def __repr__(self) -> str:
        done = sum(c.ok for c in self.cells.values())
        return (f"Grid({len(self.nodes)} nodes of {len(self.models)} model(s), metrics {self.metrics}, "
                f"{done}/{len(self.cells)} cells scored)")


def _number(value: Any) -> float:
    """``value`` as a float when it is a finite number, else NaN."""
    return float(value) if _is_p(value) else math.nan


def _is_p(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
