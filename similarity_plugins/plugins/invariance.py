"""Invariance-aware stitching as metric plugins: ``iri-hlm``, ``iri-slm``, ``iri-dm``, ``iri-fula``.

Each generates identically represented inputs (IRIs) of ``Data.train`` for the front at
``layer.front`` (inputs ``x'`` with ``f(x') ~= f(x)``, started from noise), trains the stitch on the
IRIs with targets that the end model computes on the IRIs themselves (its softmax for SLM, its
activations for DM and FuLA; the seeds' labels for HLM), and evaluates on ``Data.test`` exactly as
standard stitching does: the score is the relative accuracy. The four metrics share one IRI set per
(front, layer, settings) within a ``compare`` call, and across calls through ``iri_cache_dir``.

The options are every stitch option of the ``stitch-*`` metrics, then the IRI options: the keys of
[`IRI_DEFAULTS`][similarity_plugins.iri.service.IRI_DEFAULTS] with their defaults and the docs of
``IRI_DOCS`` (`iri_options`; ``similarity-plugins info iri-slm`` lists them, docs/iris.md has the presets and
the tuning keys).

Details add the IRI quality: ``iri_preset`` (the preset that ran), ``iri_precision`` and ``iri_memory_format``
(the precision and layout its steps ran in), ``iri_median_error``, ``iri_p95_error``,
``iri_converged_fraction``, ``iri_mean_seed_distance`` and the full ``iri`` summary. When the median error is
above ``iri_tol`` the row carries a warning (the report marks it with ``*``), ``details["unconverged"]`` is
True and ``compare`` warns once per layer: unconverged IRIs make the score meaningless.
"""

from __future__ import annotations

from ..host.hookspecs import PluginContext, hookimpl
from ..host.results import LayerPair, SimilarityResult
from ..iri.service import iri_options, iri_result
from .stitching import StitchMetric, register_family

#: Each stitching objective and its IRI metric's one-line description.
DESCRIPTIONS: dict[str, str] = {
    "hlm": "invariance-aware stitching: trained on IRIs with the seeds' labels (HLM); relative accuracy",
    "slm": "invariance-aware stitching: trained on IRIs to the end's softmax on them (SLM); relative accuracy",
    "dm": "invariance-aware stitching: trained on IRIs to the end's activation on them (DM); relative accuracy",
    "fula": "invariance-aware stitching: trained on IRIs with FuLA (the end's later activations); relative accuracy",
}


class IRIMetric(StitchMetric):
    """An invariance-aware stitching metric: a stitch trained on IRIs with one ``objective``.

    What the score means is declared as for `StitchMetric`: a similarity, relative accuracy (no declared range),
    asymmetric, no exact invariance (the stitch undoes an affine map of the front's channels only as far as its
    training finds it, and the optimiser that generates the IRIs is not exactly invariant either); it
    generates inputs through the front model, so it needs the models, not only activations.
    """

    family = "invariance"
    options = iri_options()

    def result(self, front, end, layer: LayerPair, options: dict, context: PluginContext) -> SimilarityResult:
        """The row of one call: the IRI service's result for this metric's objective."""
        return iri_result(context, front, end, layer, self.objective, options)


@hookimpl
def register_metrics(register) -> None:
    """This family's metrics, registered as a third-party family registers its own."""
    register_family(register, "iri", IRIMetric, DESCRIPTIONS)
