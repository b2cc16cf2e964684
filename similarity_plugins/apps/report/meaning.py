"""What a metric's score means, in words a reader of the page understands, and the axis each score is drawn on.

A result records what its metrics declare (``Report.meta["info"]``, ``Grid.info``: kind, range, symmetry,
invariances, family, description); a result written before it did falls back on the metrics registered here.
Scores of one kind share one axis: similarities, distances, and the relative accuracy of the stitching families
(a stitched model's test accuracy over the end model's), which is not bounded by 1.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from ..experiments import STITCHING_FAMILIES

#: the axes of a page, in the order they are drawn: a kind of score -> its axis title
AXES = {
    "similarity": "similarity (higher: more alike)",
    "relative accuracy": "relative accuracy (stitched model's accuracy / end model's)",
    "distance": "distance (lower: more alike)",
    "undeclared": "score (kind not declared)",
}

#: each invariance word (`similarity_plugins.host.contract.INVARIANCES`) as what it lets one side's activations do
INVARIANT_WORDS = {
    "translation": "shifted by one vector",
    "isotropic-scaling": "multiplied by a positive number",
    "orthogonal": "rotated or reflected",
    "invertible-linear": "mapped by any invertible linear map",
    "permutation": "given their features in another order",
    "monotonic": "changed in any way that keeps the rank order of their pairwise dissimilarities",
}


def metric_infos(metrics: list[str], recorded: Mapping[str, Any] | None, kinds: Mapping[str, Any] | None) -> dict:
    """``{metric: {"kind", "range", "symmetric", "invariances", "family", "description"}}`` for ``metrics``.

    Args:
        metrics: the result's metrics.
        recorded: what the result recorded (``meta["info"]`` or a grid's ``info``), or None.
        kinds: ``meta["kinds"]`` of an older report, or None.

    Returns:
        The recorded declaration, else the registered metric's, else only the recorded kind (None elsewhere).
    """
    from ...host.manager import get_plugin_manager

    registered = get_plugin_manager().info
    out = {}
    for m in metrics:
        info = dict((recorded or {}).get(m) or {})
        if not info.get("description") and m in registered:
            r = registered[m]
            info = {"kind": r.kind, "range": r.range, "symmetric": r.symmetric, "invariances": r.invariances,
                    "family": r.family, "description": r.description, **{k: v for k, v in info.items() if v is not None}}
        if info.get("kind") is None and kinds and kinds.get(m):
            info["kind"] = kinds[m]
        out[m] = info
    return out


def axis_kind(info: Mapping[str, Any]) -> str:
    """The axis a metric's scores are drawn on: a key of `AXES`."""
    if info.get("family") in STITCHING_FAMILIES:
        return "relative accuracy"
    return info.get("kind") if info.get("kind") in ("similarity", "distance") else "undeclared"


def axis_title(kind: str) -> str:
    """The y axis title of an axis kind."""
    return AXES[kind]


def _bounds(info: Mapping[str, Any]) -> tuple[float, float] | None:
    value = info.get("range")
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        return None
    try:
        lo, hi = float(value[0]), float(value[1])
    except (TypeError, ValueError):
        return None
    return (lo, hi) if math.isfinite(lo) and math.isfinite(hi) else None


def axis_domain(infos: list[Mapping[str, Any]]) -> tuple[float, float] | None:
    """One y range for metrics drawn on one axis: the union of their declared ranges when every one is finite,
    else None (the axis fits the data)."""
    bounds = [_bounds(info) for info in infos]
    if not bounds or None in bounds:
        return None
    return min(b[0] for b in bounds), max(b[1] for b in bounds)


def _range_words(info: Mapping[str, Any]) -> str:
    bounds = _bounds(info)
    if bounds is not None:
        return f" in [{bounds[0]:g}, {bounds[1]:g}]"
    value = info.get("range")
    if isinstance(value, (list, tuple)) and len(value) == 2 and value[0] is not None:
        return f" of at least {float(value[0]):g}"
    return ""


def meaning_line(metric: str, info: Mapping[str, Any]) -> str:
    """One line of plain words: what the score of ``metric`` is, its range, symmetry and invariances, and the
    metric's own description, from what it declares (``info``, as `metric_infos` gives it)."""
    kind = axis_kind(info)
    what = {
        "similarity": f"a similarity{_range_words(info)}: higher means more alike",
        "distance": f"a distance{_range_words(info)}: lower means more alike",
        "relative accuracy": "relative accuracy: the end model's test accuracy when it reads the front's layer "
                             "through a trained stitch, over its own accuracy (1: as accurate as the end alone; "
                             "it can exceed 1)",
        "undeclared": "its meaning is not declared (kind and range unknown)",
    }[kind]
    parts = [what]
    if info.get("symmetric") is True:
        parts.append("symmetric: A against B scores as B against A")
    elif info.get("symmetric") is False:
        parts.append("asymmetric: the front (A) is read into the end (B)")
    invariances = info.get("invariances")
    if invariances:
        parts.append("unchanged when one side's activations are "
                     + ", or ".join(INVARIANT_WORDS.get(w, w) for w in invariances))
    description = info.get("description")
    line = f"{metric}: " + "; ".join(parts) + "."
    return line + (f" ({description})" if description else "")
