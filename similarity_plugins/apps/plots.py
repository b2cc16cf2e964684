"""Plots of layer sweeps (score against depth, one panel per model pair, one line per metric), and the one
way the apps turn a matplotlib figure into file contents (`figure_bytes`), so that a figure can be
written together with other files, all or none (`write_all`)."""

from __future__ import annotations

from typing import Mapping, Sequence

from ..host.results import Report
from ..utils.figures import figure_bytes, pyplot

PANELS_PER_ROW = 2


def sweep_figure(reports: Mapping[str, Report], *, metrics: Sequence[str] | None = None, title: str | None = None,
                 ylabel: str = "score (relative accuracy / CKA)", fmt: str = "png") -> bytes:
    """The image (``fmt``, 120 dpi) of score vs layer depth: one panel per entry of ``reports``, one line per metric.

    Panels fill rows of at most two, so that a figure stays readable at the width of a page.

    ``reports`` maps a panel title (e.g. ``"clean -> clean"``) to the [`Report`][Report] of a layer
    sweep; the x axis follows each report's layer order (shallow to deep). Failed results are left
    out of their line; error bars show each score's 95% interval (``seed_ci95`` when repeated, else
    ``test_ci95``). Returns the file contents (bytes). Uses matplotlib's Agg backend (no display needed).
    """
    plt = pyplot()

    panels = list(reports.items())
    if not panels:
        raise ValueError("sweep_figure needs at least one report")
    cols = min(len(panels), PANELS_PER_ROW)
    rows = -(-len(panels) // cols)
    fig, grid = plt.subplots(rows, cols, figsize=(5.2 * cols, 4.2 * rows), sharey=True, squeeze=False)
    axes = grid.ravel()
    for unused in axes[len(panels):]:
        unused.set_visible(False)
    styles = ["-o", "-s", "-^", "-D", "-v", "-P", "-X", "-*"]
    for ax, (name, report) in zip(axes, panels):
        layers = report.layers
        chosen = [m for m in (metrics or report.metrics) if m in report.metrics]
        for i, metric in enumerate(chosen):
            xs, ys, low, high = [], [], [], []
            for x, layer in enumerate(layers):
                result = report.get(metric, layer)
                if result is not None and result.score is not None:
                    xs.append(x)
                    ys.append(result.score)
                    bounds = result.details.get("seed_ci95") or result.details.get("test_ci95") or (result.score,) * 2
                    low.append(result.score - bounds[0])
                    high.append(bounds[1] - result.score)
            ax.errorbar(xs, ys, yerr=[low, high], fmt=styles[i % len(styles)], label=metric, linewidth=1.8, markersize=5,
                        capsize=3)
        ax.set_xticks(range(len(layers)))
        ax.set_xticklabels(layers, rotation=30, ha="right")
        ax.set_title(name)
        ax.set_xlabel("layer (shallow to deep)")
        ax.set_ylim(-0.05, 1.1)
        ax.grid(alpha=0.3)
    for row in grid:
        row[0].set_ylabel(ylabel)
    axes[len(panels) - 1].legend(loc="lower left", fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return figure_bytes(fig, fmt, dpi=120)
