"""Heatmaps of labelled square matrices (a grid's cells): one panel per matrix, as file contents.

Bottom layer: plain arrays and labels in, bytes out (matplotlib imported only when drawing).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .figures import figure_bytes, pyplot


def _limits(values: np.ndarray, declared: Sequence[float] | None) -> tuple[float, float]:
    """The colour scale: the declared range where both ends are finite, else the finite values' span."""
    finite = values[np.isfinite(values)]
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    if declared is not None:
        dlo, dhi = float(declared[0]), float(declared[1])
        lo = dlo if np.isfinite(dlo) else lo
        hi = dhi if np.isfinite(dhi) else max(hi, lo)
    return (lo, hi) if hi > lo else (lo - 0.5, lo + 0.5)


def _draw_panel(ax, panel: dict, plt) -> None:
    values = np.asarray(panel["values"], dtype=np.float64)
    distance = panel.get("kind") == "distance"
    cmap = plt.get_cmap("viridis_r" if distance else "viridis").with_extremes(bad="white")
    lo, hi = _limits(values, panel.get("range"))
    image = ax.imshow(np.ma.masked_invalid(values), cmap=cmap, vmin=lo, vmax=hi, interpolation="nearest")
    failed = np.asarray(panel["failed"], bool)
    for i, j in zip(*np.nonzero(failed)):
        ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, facecolor="0.75", edgecolor="0.4", hatch="xx", lw=0))
    for i, j in panel.get("best", ()):
        ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="red", lw=1.5))
    for k in panel.get("bounds", ()):  # between two models' blocks
        ax.axhline(k - 0.5, color="black", lw=1.2)
        ax.axvline(k - 0.5, color="black", lw=1.2)
    labels = panel["labels"]
    size = max(4, min(9, int(260 / max(1, len(labels)))))
    ax.set_xticks(range(len(labels)), labels, rotation=90, fontsize=size)
    ax.set_yticks(range(len(labels)), labels, fontsize=size)
    ax.set_xlabel("end (model:layer)")
    ax.set_ylabel("front (model:layer)")
    kind = "distance: lower is more alike" if distance else "similarity: higher is more alike"
    ax.set_title(f"{panel['title']} ({kind})", fontsize=10)
    bar = ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    bar.set_label(panel["title"] + (" (reversed scale)" if distance else ""))


def heatmap_bytes(panels: Sequence[dict], fmt: str = "png", dpi: int = 120) -> bytes:
    """One heatmap panel per entry of ``panels``, side by side, as the contents of a ``fmt`` file (png, svg, pdf).

    Args:
        panels: dicts with ``title`` (str), ``values`` ((n, m) floats; NaN: blank), ``failed`` ((n, m) bools: hatched
            grey), ``best`` (``(row, column)`` cells outlined in red), ``labels`` (n row labels, also the columns'),
            ``bounds`` (indices where a new model's block starts: lines), ``kind`` (``"distance"`` reverses the colour
            scale) and ``range`` (the colour scale, or None: the data's).
        fmt: the image format.
        dpi: dots per inch.

    Returns:
        The file contents (bytes).
    """
    if fmt not in ("png", "svg", "pdf"):
        raise ValueError(f"heatmap format must be png, svg or pdf (by the file's extension), got {fmt!r}")
    plt = pyplot()
    n = max(len(p["labels"]) for p in panels)
    side = max(4.0, min(14.0, 1.5 + 0.32 * n))
    fig, axes = plt.subplots(1, len(panels), figsize=(side * len(panels) + 1.5, side + 1.0), squeeze=False)
    for ax, panel in zip(axes[0], panels):
        _draw_panel(ax, panel, plt)
    fig.tight_layout()
    return figure_bytes(fig, fmt, dpi=dpi)
