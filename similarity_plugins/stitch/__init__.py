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

from ..networks.split import SplitNetwork
from .cache import TrainingCache
from .evaluate import evaluate_stitch
from .layer import StitchLayer, StitchShapeError
from .service import TrainingSet, fitted_stitch, stitch_result, training_set
from .settings import StitchSettings
from .trainer import FittedStitch, StitchDivergedError, fit_stitch

__all__ = [
    "fit_stitch", "evaluate_stitch", "stitch_result", "fitted_stitch", "training_set", "TrainingSet", "StitchSettings",
    "StitchLayer", "StitchShapeError", "StitchDivergedError", "FittedStitch", "TrainingCache", "SplitNetwork",
]
