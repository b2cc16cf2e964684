"""The paper's experiments as functions: excess agreement from an unseen predictive cue.

*Excess agreement* (PAPER.md, "Unseen predictive information"): train the stitch on data that carries a
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

from ..host.registry import metric_info
from ..host.results import LayerPair, as_layer_pair
from ..host.values import coerce_option_values
from ..networks.context import Context
from ..networks.data import Data
from ..networks.split import _check_layer
from ..utils.io import text_table

#: memo entries that depend only on the training data (shared between the with-cue and without-cue runs)
_TRAIN_ONLY_KEYS = {"split", "stitch-train", "stitch-cache", "stitch-fit", "iris"}


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


def _result(context: Context, metric: str, front: nn.Module, end: nn.Module, layer: LayerPair, options: dict):
    from ..iri.service import iri_result
    from ..stitch.service import stitch_result

    family, _, objective = metric.partition("-")
    if family == "stitch":
        return stitch_result(context, front, end, layer, objective, options)
    if family == "iri":
        return iri_result(context, front, end, layer, objective, options)
    raise ValueError(f"excess agreement needs a stitching metric (stitch-* or iri-*), got {metric!r}")


def excess_agreement(front: nn.Module, end: nn.Module, layer: "str | tuple[str, str] | Iterable", data: Data,
                     metrics: Iterable[str] = ("stitch-slm", "iri-slm"), *, strength: float = 0.5,
                     seed: int = 0, options: dict | None = None, progress: bool = False,
                     cue_options: dict | None = None) -> list[ExcessAgreement]:
    """Run the unseen-cue experiment for each metric and layer; returns one `ExcessAgreement` each.

    The stitch of every metric is trained once, on ``UnseenCue(data.train, strength=strength)`` (for
    ``iri-*``: on IRIs of those cue-carrying seeds), and evaluated on ``UnseenCue(data.test)`` and on
    ``data.test``. ``layer``: one layer, a pair, or a list of them. ``options``: as for ``compare``.
    ``cue_options``: further keyword arguments of `UnseenCue`.
    Donors are never changed.
    """
    from ..datasets import UnseenCue
    from ..runner.compare import as_layer_list

    if data.train is None or data.test is None:
        raise ValueError("excess agreement needs Data(train=..., test=...): the cue is added to both splits")
    pairs = as_layer_list(layer)
    for pair in pairs:
        _check_layer(front, pair.front)
        _check_layer(end, pair.end)
    cue_kw = {"strength": strength, **(cue_options or {})}
    cue_train = UnseenCue(data.train, seed=seed, **cue_kw)
    cue_test = UnseenCue(data.test, seed=seed + 1, **cue_kw)
    with_cue = Context(Data(train=cue_train, test=cue_test), seed=seed, options=options, progress=progress)
    without_cue = Context(Data(train=cue_train, test=data.test), seed=seed, options=options, progress=progress)
    out = []
    for pair in pairs:
        for metric in metrics:
            own = coerce_option_values(with_cue.options_for(metric), metric_info(metric).options)  # compare's rules
            a = _result(with_cue, metric, front, end, pair, own)
            without_cue.memo.update({k: v for k, v in with_cue.memo.items() if k[0] in _TRAIN_ONLY_KEYS})
            b = _result(without_cue, metric, front, end, pair, own)
            out.append(ExcessAgreement(metric, str(as_layer_pair(pair)), a.details["agreement"], b.details["agreement"],
                                       a.score, b.score, a.details.get("iri_median_error")))
    return out


def format_excess(rows: list[ExcessAgreement]) -> str:
    """A small table: metric, layer, agreement with and without the cue, excess."""
    cells = [[r.metric, r.layer, f"{r.agreement_with_cue:.4f}", f"{r.agreement_without_cue:.4f}", f"{r.excess:+.4f}"]
             for r in rows]
    return text_table(["metric", "layer", "agree (cue)", "agree (no cue)", "excess"], cells, left=2)
