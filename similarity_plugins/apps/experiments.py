"""The paper's experiments as functions: excess agreement from an unseen predictive cue.

*Excess agreement* (Athanasiadis, Karmush, Felsberg, *Grounding Functional Similarity by Invariance-Aware Model
Stitching*, 2026, arXiv:2505.20142; [Studies](../../docs/studies.md), "Unseen cue"): train the stitch on data that carries a
label-correlated cue which neither donor saw in training (`UnseenCue`),
then measure the stitched model's agreement with the end model on test data *with* the cue minus its
agreement on the same test data *without* it. Standard stitching can exploit the cue to align the
donors, so its excess is positive; invariance-aware stitching, trained on IRIs of the cue-carrying
seeds, can use the cue only as far as the front represents it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from torch import nn

from ..host.registry import metric_info, select_metrics
from ..networks.context import Context
from ..networks.data import Data
from ..utils.io import text_table
from ..utils.progress import Progress, check_progress


@dataclass
class ExcessAgreement:
    """One metric's excess agreement at one layer. Agreements are fractions of the test set in [0, 1]."""

    metric: str
    layer: str
    agreement_with_cue: float
    agreement_without_cue: float
    relative_accuracy_with_cue: float
    relative_accuracy_without_cue: float
    iri_median_error: float | None = None  # iri-* only: median relative error of the IRIs the stitch was fit on

    @property
    def excess(self) -> float:
        """Agreement with B on cue-carrying test data minus agreement without the cue."""
        return self.agreement_with_cue - self.agreement_without_cue

    def to_dict(self) -> dict:
        """A JSON-ready dict with every field and ``excess``."""
        return {**self.__dict__, "excess": self.excess}


#: The metric families that train a stitch (their ``family`` attribute): excess agreement takes their metrics only.
STITCHING_FAMILIES = ("stitching", "invariance")


def _check_stitching(metrics: list[str]) -> None:
    """Excess agreement compares a stitched model's predictions, so every metric must train a stitch: its declared
    family is one of `STITCHING_FAMILIES` (names and wildcards resolve as in ``compare``)."""
    for metric in select_metrics(metrics):
        if metric_info(metric).family not in STITCHING_FAMILIES:
            raise ValueError(f"excess agreement needs a stitching metric (stitch-* or iri-*), got {metric!r}")


def excess_agreement(front: nn.Module, end: nn.Module, layer: str | tuple[str, str] | Iterable, data: Data,
                     metrics: Iterable[str] = ("stitch-slm", "iri-slm"), *, strength: float = 0.5,
                     seed: int = 0, options: dict | None = None, progress: Progress = "never",
                     cue_options: dict | None = None) -> list[ExcessAgreement]:
    """Run the unseen-cue experiment for each metric and layer; returns one `ExcessAgreement` each.

    The stitch of every metric is trained once, on ``UnseenCue(data.train, strength=strength)`` (for
    ``iri-*``: on IRIs of those cue-carrying seeds), and evaluated on ``UnseenCue(data.test)`` and on
    ``data.test``: two [`compare`][similarity_plugins.compare] calls, the second in a context made with
    [`Context.with_test`][similarity_plugins.networks.context.Context.with_test], which keeps the fitted
    stitches and IRIs. ``layer``: one layer, a pair, or a list of them. ``options``: as for ``compare``.
    ``cue_options``: further keyword arguments of `UnseenCue`. Donors are never changed.
    Raises ValueError for data without both splits or a metric that trains no stitch, RuntimeError naming the
    metric and layer when one fails.
    """
    from ..datasets import UnseenCue
    from ..runner.compare import compare

    if data.train is None or data.test is None:
        raise ValueError("excess agreement needs Data(train=..., test=...): the cue is added to both splits")
    progress = check_progress(progress)
    metrics = [metrics] if isinstance(metrics, str) else list(metrics)
    _check_stitching(metrics)
    cue_kw = {"strength": strength, **(cue_options or {})}
    cued = Data(train=UnseenCue(data.train, seed=seed, **cue_kw), test=UnseenCue(data.test, seed=seed + 1, **cue_kw))
    with_cue = Context(cued, seed=seed, options=options, progress=progress)
    run = dict(seed=seed, options=options, progress=progress)
    a = compare(front, end, layer, cued, metrics, context=with_cue, **run)
    without_cue = with_cue.with_test(data.test)
    b = compare(front, end, layer, without_cue.data, metrics, context=without_cue, **run)
    out = []
    for row_a in sorted(a, key=lambda r: a.layers.index(r.layer)):   # layer by layer, the metrics in their order
        row_b = b[row_a.metric, row_a.layer]
        for row in (row_a, row_b):
            if row.error is not None:
                raise RuntimeError(f"excess agreement: {row.metric} at layer {row.layer} failed: {row.error}")
        out.append(ExcessAgreement(row_a.metric, row_a.layer, row_a.details["agreement"], row_b.details["agreement"],
                                   row_a.score, row_b.score, row_a.details.get("iri_median_error")))
    return out


def format_excess(rows: list[ExcessAgreement]) -> str:
    """A small table: metric, layer, agreement with and without the cue, excess."""
    cells = [[r.metric, r.layer, f"{r.agreement_with_cue:.4f}", f"{r.agreement_without_cue:.4f}", f"{r.excess:+.4f}"]
             for r in rows]
    return text_table(["metric", "layer", "agree (cue)", "agree (no cue)", "excess"], cells, left=2)
