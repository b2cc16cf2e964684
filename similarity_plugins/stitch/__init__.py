"""Model stitching: the stitch layer, the four alignment objectives, training and evaluation.

Shared by the standard stitching plugins (``stitch-*``) and the invariance-aware ones (``iri-*``).
Entry points:

- [`fit_stitch`][fit_stitch] (trainer): train a stitch between two `SplitNetwork`
  halves on any inputs (a tensor), targets computed from the end model on those inputs;
- [`evaluate_stitch`][evaluate_stitch]: relative accuracy, agreement and absolute accuracies on test arrays;
- [`stitch_result`][stitch_result] / [`fitted_stitch`][fitted_stitch] (service): the memoised fit + evaluation a plugin
  calls with a [`Context`][similarity_plugins.networks.context.Context];
- [`StitchSettings`][StitchSettings]: the defaults of the paper, each overridable by an option of the same name.
"""

from .cache import ArrayStore, TrainingCache, subset_indices
from .evaluate import evaluate_stitch, stitched_logits
from .init import identity_init, initialise, least_squares_init, random_init
from .layer import StitchLayer, StitchPlan, StitchShapeError, plan_stitch, to_rows
from .objectives import NEEDS, dm_loss, fula_loss, hlm_loss, relative_sq_error, slm_loss, stitched_loss
from .service import TrainingSet, evaluation_arrays, fitted_stitch, stitch_result, training_set
from .settings import INITS, OBJECTIVES, StitchSettings, check_objective
from .trainer import FittedStitch, StitchDivergedError, check_labels, fit_stitch

__all__ = [
    "ArrayStore", "TrainingCache", "subset_indices", "evaluate_stitch", "stitched_logits", "identity_init",
    "initialise", "least_squares_init", "random_init", "StitchLayer", "StitchPlan", "StitchShapeError",
    "plan_stitch", "to_rows", "NEEDS", "dm_loss", "fula_loss", "hlm_loss", "relative_sq_error", "slm_loss",
    "stitched_loss", "TrainingSet", "evaluation_arrays", "fitted_stitch", "stitch_result", "training_set", "INITS",
    "OBJECTIVES", "StitchSettings", "check_objective", "FittedStitch", "StitchDivergedError", "check_labels",
    "fit_stitch",
]
