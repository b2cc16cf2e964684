"""``grid --calibrate``: the grid's calibrated matrices and each block's calibrated maximum and mean."""

from __future__ import annotations

import math
from typing import Any


def blocks_of(grid: Any, pairs: str) -> list[tuple[str, str]]:
    """The (front model, end model) blocks a grid's summary lines cover: each pair of two models once, or each
    model's own block for one model or ``--pairs within``."""
    models = grid.models
    return [(f, e) for i, f in enumerate(models) for e in models[i:]
            if (f == e) == (len(models) == 1 or pairs == "within")]


def check_calibrate(options: dict, metrics: list[str]) -> None:
    """Refuse ``--calibrate`` before any work when no selected metric runs permutations (``ValueError``: exit 2)."""
    def asked(value: Any) -> bool:
        return hasattr(value, "__len__") or (isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0)

    if not any(asked(options.get("permutations", 0)) or asked((options.get(m) or {}).get("permutations", 0))
               for m in metrics):
        raise ValueError("--calibrate needs permutations: add --option permutations=K (e.g. 999); each cell is then "
                         "scored against its own permutation null and each block against the block's")


def _number(value: Any, fmt: str) -> str:
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, fmt)


def calibrated_text(grid: Any, pairs: str) -> str:
    """Each metric's calibrated matrix, then one line per block and aggregate (max, mean): the score, its p-value
    under the block's joint null, tau and the calibrated score; a block that cannot be summarised says why."""
    from ..utils.io import text_table

    labels = [f"{m}:{layer}" for m, layer in grid.nodes]
    parts, lines = [], []
    for metric in grid.metrics:
        values = grid.calibrated(metric)
        rows = [[label] + [_number(v, ".4f") for v in row] for label, row in zip(labels, values)]
        parts.append(f"{metric} calibrated (rows: front, columns: end)\n" + text_table(["front \\ end"] + labels, rows))
        for front, end in blocks_of(grid, pairs):
            for agg in ("max", "mean"):
                try:
                    found = grid.aggregate(metric, front, end, agg)
                except ValueError as exc:
                    lines.append(f"{agg} {metric} {front} x {end}: not given: {exc}")
                    continue
                if found["p_value"] is None:
                    continue
                lines.append(f"{agg} {metric} {front} x {end}: {found['score']:.4f} (p = {found['p_value']:.4g}, "
                             f"tau = {found['tau']:.4f}, calibrated {found['calibrated']:.4f})")
    return "\n\n".join(parts) + ("\n\n" + "\n".join(lines) if lines else "")
