"""The page's charts as Vega-Lite specifications (plain dicts; the page adds ``$schema`` and draws them).

Every chart's data are rows whose keys are words a reader understands (``"front layer"``, ``"score"``,
``"p-value"``): the tooltips show each row as it is (``{"content": "data"}``), so a hovered value is the number of
the result's JSON, unrounded, and a value the result does not have is not in its row.
"""

from __future__ import annotations

from typing import Any, Sequence

TOOLTIP = {"content": "data"}
SCHEME = "viridis"
CELL = 22  # pixels per heatmap cell
NULL_OWN = "null of this cell"
NULL_BLOCK = "best null value of the block per permutation"
FAILED = "#b9b9b9"  # a failed cell
FACET_HEADER = {"labelFontSize": 12, "titleFontSize": 12, "labelLimit": 240}


def _scale(domain: Sequence[float | None] | None) -> dict:
    """A y or colour scale over ``domain`` (both bounds finite; else fitted to the data and 0)."""
    if domain is not None and len(domain) == 2 and None not in domain:
        return {"domain": list(domain)}
    return {"zero": True}


def _has(rows: list[dict], field: str) -> bool:
    return any(field in row for row in rows)


def score_panels(rows: list[dict], metrics: list[str], cuts: list[str], axis: str,
                 domain: Sequence[float | None] | None) -> dict:
    """Metrics side by side at every cut, on one y axis: a point per score and a bar for its interval.

    Args:
        rows: ``{"cut", "metric", "score", "interval low", "interval high", ...}`` (each row a tooltip).
        metrics: the metrics in order (the x axis).
        cuts: the cuts in order (one column each).
        axis: the y axis title (the kind of score, e.g. ``"similarity (higher: more alike)"``). A score's p-value,
            where it has one, is written above its point.
        domain: ``(lo, hi)`` of the y axis, or None to fit it to the data.

    Returns:
        A faceted Vega-Lite spec.
    """
    x = {"field": "metric", "type": "nominal", "sort": metrics, "title": None, "axis": {"labelAngle": -30}}
    y = {"field": "score", "type": "quantitative", "title": axis, "scale": _scale(domain)}
    color = {"field": "metric", "type": "nominal", "sort": metrics, "legend": None}
    layers: list[dict] = [{"mark": {"type": "point", "filled": True, "size": 70, "tooltip": TOOLTIP},
                           "encoding": {"x": x, "y": y, "color": color}}]
    if _has(rows, "interval low"):
        layers.insert(0, {"mark": {"type": "rule", "strokeWidth": 2, "tooltip": TOOLTIP},
                          "encoding": {"x": x, "y": {**y, "field": "interval low"}, "y2": {"field": "interval high"},
                                       "color": color}})
    if _has(rows, "p-value"):
        layers.append({"transform": [{"filter": "isValid(datum['p-value'])"},
                                     {"calculate": "'p ' + format(datum['p-value'], '.2g')", "as": "p label"}],
                       "mark": {"type": "text", "dy": -12, "fontSize": 10, "color": "#444"},
                       "encoding": {"x": x, "y": y, "text": {"field": "p label"}}})
    return {
        "data": {"values": rows},
        "facet": {"column": {"field": "cut", "type": "nominal", "sort": cuts, "title": "cut", "header": FACET_HEADER}},
        "spec": {"width": {"step": 34}, "height": 220, "layer": layers},
    }


def sweep_lines(rows: list[dict], metrics: list[str], cuts: list[str], panels: list[str], axis: str,
                domain: Sequence[float | None] | None) -> dict:
    """Score against depth: one line per metric over the cuts (shallow to deep), one panel per comparison.

    Args:
        rows: ``{"panel", "cut", "metric", "score", "interval low", "interval high", ...}``.
        metrics: the metrics in order (the colours).
        cuts: the cuts, shallow to deep (the x axis).
        panels: the comparisons in order (one column each).
        axis: the y axis title.
        domain: ``(lo, hi)`` of the y axis, or None.

    Returns:
        A faceted Vega-Lite spec.
    """
    x = {"field": "cut", "type": "ordinal", "sort": cuts, "title": "cut (shallow to deep)", "axis": {"labelAngle": -30}}
    y = {"field": "score", "type": "quantitative", "title": axis, "scale": _scale(domain)}
    color = {"field": "metric", "type": "nominal", "sort": metrics, "title": "metric"}
    layers: list[dict] = [{"mark": {"type": "line", "point": {"filled": True, "size": 50}, "tooltip": TOOLTIP},
                           "encoding": {"x": x, "y": y, "color": color}}]
    if _has(rows, "interval low"):
        layers.append({"mark": {"type": "rule", "tooltip": TOOLTIP},
                       "encoding": {"x": x, "y": {**y, "field": "interval low"}, "y2": {"field": "interval high"},
                                    "color": color}})
    return {
        "data": {"values": rows},
        "facet": {"column": {"field": "panel", "type": "nominal", "sort": panels, "title": None, "header": FACET_HEADER}},
        "spec": {"width": max(180, 60 * len(cuts)), "height": 220, "layer": layers},
    }


def heatmap(rows: list[dict], value: str, nodes: list[str], bounds: list[str], legend: str,
            domain: Sequence[float | None] | None, reverse: bool, page_by: list[str] | None = None) -> dict:
    """Cells of a grid as coloured squares: front nodes on the rows, end nodes on the columns, a line between the
    blocks of two models.

    Args:
        rows: one per cell: ``{"front", "end", value, ...}`` (``front`` and ``end``: ``"model:layer"``); a row
            without ``value`` (a failed cell) is drawn grey.
        value: the field coloured (``"score"`` or ``"calibrated"``).
        nodes: every node as ``"model:layer"``, in order (both axes).
        bounds: the nodes where a new model starts (a line is drawn before each).
        legend: the colour legend's title.
        domain: ``(lo, hi)`` of the colour scale, or None to fit it to the data.
        reverse: reverse the colours (a distance: low is alike), so that bright means alike in every map.
        page_by: the front models, to show one front model's rows at a time (a menu picks it), for large grids.

    Returns:
        A layered Vega-Lite spec.
    """
    x = {"field": "end", "type": "ordinal", "sort": nodes, "title": "end (model:layer)", "axis": {"labelAngle": -45}}
    y = {"field": "front", "type": "ordinal", "sort": nodes, "title": "front (model:layer)"}
    color = {"field": value, "type": "quantitative", "title": legend,
             "scale": {**_scale(domain), "scheme": SCHEME, "reverse": reverse}}
    cells: dict[str, Any] = {"mark": {"type": "rect", "tooltip": TOOLTIP, "invalid": "show"},
                             "encoding": {"x": x, "y": y, "color": color}}
    layers = [cells]
    if bounds:
        rule = {"type": "rule", "color": "black", "strokeWidth": 1.5}
        layers += [{"data": {"values": [{"end": node} for node in bounds]}, "mark": rule,
                    "encoding": {"x": {**x, "bandPosition": 0}}},
                   {"data": {"values": [{"front": node} for node in bounds]}, "mark": rule,
                    "encoding": {"y": {**y, "bandPosition": 0}}}]
    spec: dict[str, Any] = {"data": {"values": rows}, "width": {"step": CELL}, "height": {"step": CELL},
                            "layer": layers, "config": {"scale": {"invalid": {"color": {"value": FAILED}}}}}
    if page_by:
        spec["params"] = [{"name": "page", "value": page_by[0],
                           "bind": {"input": "select", "options": page_by, "name": "front model: "}}]
        cells["transform"] = [{"filter": "datum['front model'] === page"}]
    return spec


def null_histogram(cells: list[dict], observed: list[dict], choices: list[str]) -> dict:
    """The permutation null of a chosen cell: a histogram of its null values beside the block's best null value
    per permutation, with the observed score as a red line; a menu chooses the cell.

    Args:
        cells: one per cell: ``{"cell", "from": [bin starts], "to": [bin ends], NULL_OWN: [counts],
            NULL_BLOCK: [counts]}`` (the second may be left out).
        observed: ``{"cell", "observed score", ...}`` rows (the p-values in their tooltip).
        choices: the cells in the menu, in order.

    Returns:
        A layered Vega-Lite spec.
    """
    chosen = [{"filter": "datum['cell'] === cell"}]
    series = [NULL_OWN, NULL_BLOCK]
    return {
        "params": [{"name": "cell", "value": choices[0], "bind": {"input": "select", "options": choices,
                                                                   "name": "cell: "}}],
        "width": 560, "height": 210,
        "layer": [
            {"data": {"values": cells},
             "transform": [*chosen, {"flatten": ["from", "to", *series]}, {"fold": series, "as": ["null", "permutations"]},
                           {"filter": "isValid(datum['permutations'])"}],
             "mark": {"type": "rect", "opacity": 0.55, "tooltip": True},
             "encoding": {"x": {"field": "from", "type": "quantitative", "title": "score under permutation",
                                "scale": {"zero": False}},
                          "x2": {"field": "to"},
                          "y": {"field": "permutations", "type": "quantitative", "stack": None, "title": "permutations"},
                          "color": {"field": "null", "type": "nominal", "title": None, "sort": series,
                                    "legend": {"orient": "top", "labelLimit": 420}}}},
            {"data": {"values": observed}, "transform": chosen,
             "mark": {"type": "rule", "color": "#d62728", "strokeWidth": 2.5, "tooltip": TOOLTIP},
             "encoding": {"x": {"field": "observed score", "type": "quantitative"}}},
        ],
    }


def dendrogram(segments: list[dict], leaves: list[dict], axis: str) -> dict:
    """A dendrogram drawn from its segments (``{"x", "x2", "y", "y2"}``) with the models' names at the leaves
    (``{"model", "x"}``); ``axis`` titles the height (the merge distance)."""
    return {
        "width": max(240, 70 * len(leaves)), "height": 220,
        "layer": [
            {"data": {"values": segments}, "mark": {"type": "rule", "strokeWidth": 1.6},
             "encoding": {"x": {"field": "x", "type": "quantitative", "axis": None},
                          "x2": {"field": "x2"},
                          "y": {"field": "y", "type": "quantitative", "title": axis},
                          "y2": {"field": "y2"}}},
            {"data": {"values": leaves}, "mark": {"type": "text", "dy": 12, "baseline": "top", "angle": 0},
             "encoding": {"x": {"field": "x", "type": "quantitative"}, "y": {"datum": 0, "type": "quantitative"},
                          "text": {"field": "model"}}},
        ],
    }


def mds_map(points: list[dict]) -> dict:
    """The models as points of a two-dimensional classical MDS map (``{"model", "MDS 1", "MDS 2"}``), labelled."""
    x = {"field": "MDS 1", "type": "quantitative", "scale": {"zero": False, "padding": 30}}
    y = {"field": "MDS 2", "type": "quantitative", "scale": {"zero": False, "padding": 30}}
    return {
        "data": {"values": points}, "width": 300, "height": 260,
        "layer": [
            {"mark": {"type": "point", "filled": True, "size": 80, "tooltip": TOOLTIP}, "encoding": {"x": x, "y": y}},
            {"mark": {"type": "text", "dy": -10}, "encoding": {"x": x, "y": y, "text": {"field": "model"}}},
        ],
    }


def matrix(rows: list[dict], models: list[str], value: str, legend: str, domain: Sequence[float | None] | None,
           reverse: bool) -> dict:
    """A model x model matrix: front models on the rows, end models on the columns, ``value`` coloured.

    Args:
        rows: one per block: ``{"front model", "end model", value, ...}`` (each row a tooltip).
        models: the models in order.
        value: the field coloured.
        legend: the colour legend's title.
        domain: ``(lo, hi)`` of the colour scale, or None to fit it to the data.
        reverse: reverse the colours (a distance), so that bright means alike.

    Returns:
        A Vega-Lite spec.
    """
    x = {"field": "end model", "type": "nominal", "sort": models, "title": "end model", "axis": {"labelAngle": -30}}
    y = {"field": "front model", "type": "nominal", "sort": models, "title": "front model"}
    return {
        "data": {"values": rows}, "width": {"step": 2 * CELL}, "height": {"step": 2 * CELL},
        "layer": [
            {"mark": {"type": "rect", "tooltip": TOOLTIP}, "transform": [{"filter": f"isValid(datum[{value!r}])"}],
             "encoding": {"x": x, "y": y, "color": {"field": value, "type": "quantitative", "title": legend,
                                                    "scale": {**_scale(domain), "scheme": SCHEME, "reverse": reverse}}}},
            {"mark": {"type": "rect", "color": FAILED, "tooltip": TOOLTIP},
             "transform": [{"filter": f"!isValid(datum[{value!r}])"}], "encoding": {"x": x, "y": y}},
        ],
    }
