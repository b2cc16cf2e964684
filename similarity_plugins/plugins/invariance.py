"""Invariance-aware stitching as metric plugins: ``iri-hlm``, ``iri-slm``, ``iri-dm``, ``iri-fula``.

Each generates identically represented inputs (IRIs) of ``Data.train`` for the front at
``layer.front`` (inputs ``x'`` with ``f(x') ~= f(x)``, started from noise), trains the stitch on the
IRIs with targets that the end model computes on the IRIs themselves (its softmax for SLM, its
activations for DM and FuLA; the seeds' labels for HLM), and evaluates on ``Data.test`` exactly as
standard stitching does: the score is the relative accuracy. The four metrics share one IRI set per
(front, layer, settings) within a ``compare`` call, and across calls through ``iri_cache_dir``.

IRI options (every stitch option of the ``stitch-*`` metrics applies too; docs/iris.md has the presets and
the tuning keys):

==========================  ===========  ================================================================
option                      default      meaning
==========================  ===========  ================================================================
``iri_steps``               1000         per-sample step budget
``iri_tol``                 1e-2         target relative error ``||f(x')-f(x)|| / ||f(x)||``
``iri_optimizer``           "auto"       "auto" (the preset for the front's structure), "adam" (the Adam
                                         preset for it) or "lbfgs"
``iri_init``                "noise"      "noise" (0.5 + N(0, 1/20^2)) or "shuffle" (another training image)
``iri_cycle_steps``         None         Adam's first restart cycle (None: the preset's; 0: one cosine)
``iri_max_seeds``           None (all)   use a seeded random subset of the training split as seeds
``iri_tuning``              None         dict of tuning values: ``{"preset": NAME}`` and/or values such as
                                         ``{"lr": 0.1, "fold_bn": false}``; each replaces only its own value
``iri_batch_size``          128          working-batch slots of the continuous batching
``iri_backend``             "auto"       "numpy", "torch", "cupy" or "auto" (CuPy on CUDA when installed)
``iri_cache_dir``           None         folder where finished IRI sets are saved and found again
``iri_compile``             False        torch.compile the front's forward+backward (opt-in; a warm-up of
                                         seconds to a minute per run; not part of the cache key)
``iri_precision``           "auto"       "auto" (bfloat16 steps far from ``iri_tol`` where the device has bfloat16
                                         units and the front is large enough to gain, then a float32 finish),
                                         "float32" (every step in float32) or "bfloat16"
==========================  ===========  ================================================================

Details add the IRI quality: ``iri_preset`` (the preset that ran), ``iri_precision`` and ``iri_memory_format``
(the precision and layout its steps ran in), ``iri_median_error``, ``iri_p95_error``,
``iri_converged_fraction``, ``iri_mean_seed_distance`` and the full ``iri`` summary. When the median error is
above ``iri_tol`` the row carries a warning (the report marks it with ``*``), ``details["unconverged"]`` is
True and ``compare`` warns once per layer: unconverged IRIs make the score meaningless.
"""

from __future__ import annotations

from ..host.hookspecs import hookimpl
from ..host.results import LayerPair, SimilarityResult
from ..iri.service import IRI_DEFAULTS, iri_options, iri_result, iri_settings, iri_training_set
from ..networks.context import Context

__all__ = ["IRI_DEFAULTS", "IRIDM", "IRIFuLA", "IRIHLM", "IRISLM", "iri_result", "iri_settings", "iri_training_set"]


class _IRIPlugin:
    objective = "hlm"
    needs = ("train", "test")
    options = iri_options()
    # What the score means, as for stitch-*: a similarity, relative accuracy (no declared range), asymmetric,
    # no exact invariance (the stitch undoes an affine map of the front's channels only as far as its
    # training finds it, and the optimiser that generates the IRIs is not exactly invariant either).
    kind = "similarity"
    range = None
    symmetric = False
    invariances = ()
    activations_only = False  # it generates inputs through the front model

    @hookimpl
    def similarity(self, front, end, layer: LayerPair, options: dict, context: Context) -> SimilarityResult:
        return iri_result(context, front, end, layer, self.objective, options)


class IRIHLM(_IRIPlugin):
    """Invariance-aware stitching, hard label matching (the seeds' labels) on IRIs."""

    description = "invariance-aware stitching: trained on IRIs with the seeds' labels (HLM); relative accuracy"
    objective = "hlm"


class IRISLM(_IRIPlugin):
    """Invariance-aware stitching, soft label matching (the end model's softmax on the IRIs)."""

    description = "invariance-aware stitching: trained on IRIs to the end's softmax on them (SLM); relative accuracy"
    objective = "slm"


class IRIDM(_IRIPlugin):
    """Invariance-aware stitching, direct matching (the end model's activation on the IRIs)."""

    description = "invariance-aware stitching: trained on IRIs to the end's activation on them (DM); relative accuracy"
    objective = "dm"


class IRIFuLA(_IRIPlugin):
    """Invariance-aware stitching, functional latent alignment (the end's later activations on the IRIs)."""

    description = "invariance-aware stitching: trained on IRIs with FuLA (the end's later activations); relative accuracy"
    objective = "fula"


@hookimpl
def register_metrics(register) -> None:
    """This family's metrics, registered as a third-party family registers its own."""
    register("iri-hlm", IRIHLM)
    register("iri-slm", IRISLM)
    register("iri-dm", IRIDM)
    register("iri-fula", IRIFuLA)
