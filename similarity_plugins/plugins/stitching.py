"""Standard model stitching as metric plugins: ``stitch-hlm``, ``stitch-slm``, ``stitch-dm``, ``stitch-fula``.

Each trains a stitch ``T`` from the front's activation at ``layer.front`` to the end's at
``layer.end`` on ``Data.train`` (both donors frozen) with its alignment objective, and scores the
stitched model ``g_{>j}(T(f_{<=i}(x)))`` on ``Data.test``: the score is the relative accuracy
(stitched accuracy / end accuracy); details add agreement with the end model, absolute accuracies,
training losses and the settings used. The options are the fields of
[`StitchSettings`][similarity_plugins.stitch.settings.StitchSettings], with its defaults and docs
(`stitch_options`; ``similarity-plugins info stitch-slm`` lists them). Fitted stitches are shared within one
``compare`` call, so repeating a metric never refits.

What the score means: a similarity (higher: more alike), no declared range (the stitched model can beat
the end model, so relative accuracy can exceed 1), asymmetric (front -> end), and no exact invariance
declared: the stitch (an affine 1x1 convolution or linear layer) can absorb an affine map of the front's
channels, but only as far as its training finds it (SGD with weight decay from a least-squares start),
so no transform of the flattened activations leaves the score exactly unchanged.
"""

from __future__ import annotations

from ..host.hookspecs import PluginContext, hookimpl
from ..host.plugin import MetricPlugin
from ..host.results import LayerPair, SimilarityResult
from ..stitch.settings import stitch_options

#: Each stitching objective of `similarity_plugins.stitch.objectives` and its metric's one-line description.
DESCRIPTIONS: dict[str, str] = {
    "hlm": "model stitching, hard label matching (cross-entropy to labels); relative accuracy on test",
    "slm": "model stitching, soft label matching (cross-entropy to the end model's softmax); relative accuracy",
    "dm": "model stitching, direct matching (squared L2 to the end's activation at the cut); relative accuracy",
    "fula": "model stitching, functional latent alignment (FuLA: relative L2 at every later layer); relative accuracy",
}


class StitchMetric(MetricPlugin):
    """A stitching metric: a stitch trained with one ``objective``; score: relative accuracy on the test split.

    Args:
        objective: ``"hlm"``, ``"slm"``, ``"dm"`` or ``"fula"`` (`similarity_plugins.stitch.objectives`).
        description: the metric's line for ``similarity-plugins list``.
    """

    family = "stitching"
    needs = ("train", "test")
    options = stitch_options()
    kind = "similarity"
    range = None  # relative accuracy: the stitched model can beat the end model
    symmetric = False
    invariances = ()  # see the module docstring
    activations_only = False  # it runs the end model on the stitched activations

    def __init__(self, objective: str, description: str) -> None:
        self.objective = objective
        self.description = description

    def result(self, front, end, layer: LayerPair, options: dict, context: PluginContext) -> SimilarityResult:
        """The row of one call: the stitching service's result for this metric's objective."""
        from ..stitch.service import stitch_result

        return stitch_result(context, front, end, layer, self.objective, options)

    @hookimpl
    def similarity(self, front, end, layer: LayerPair, options: dict, context: PluginContext) -> SimilarityResult:
        return self.result(front, end, layer, options, context)


def register_family(register, prefix: str, metric: type[StitchMetric], descriptions: dict[str, str]) -> None:
    """Register one ``metric`` per objective of ``descriptions``, named ``{prefix}-{objective}``."""
    for objective, description in descriptions.items():
        register(f"{prefix}-{objective}", metric(objective, description))


@hookimpl
def register_metrics(register) -> None:
    """This family's metrics, registered as a third-party family registers its own."""
    register_family(register, "stitch", StitchMetric, DESCRIPTIONS)
