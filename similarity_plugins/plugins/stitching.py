"""Standard model stitching as metric plugins: ``stitch-hlm``, ``stitch-slm``, ``stitch-dm``, ``stitch-fula``.

Each trains a stitch ``T`` from the front's activation at ``layer.front`` to the end's at
``layer.end`` on ``Data.train`` (both donors frozen) with its alignment objective, and scores the
stitched model ``g_{>j}(T(f_{<=i}(x)))`` on ``Data.test``: the score is the relative accuracy
(stitched accuracy / end accuracy); details add agreement with the end model, absolute accuracies,
training losses and the settings used. Options (defaults from the paper; see
``similarity_plugins.stitch.settings``): ``epochs`` (30), ``lr`` (1e-3), ``weight_decay`` (1e-4),
``batch_size`` (128), ``milestones`` ((1/3, 2/3)), ``gamma`` (0.1), ``init`` ("least-squares" |
"identity" | "random"), ``ls_samples`` (2048), ``stitch_bn`` (False), ``max_train`` (all),
``dm_loss`` ("sum" | "normalised"), ``fula_weights``, ``temperature`` (1.0), ``cache_limit_mb`` (1024),
``eval_batch_size`` (256); declared in ``options`` from [`StitchSettings`][similarity_plugins.stitch.settings.StitchSettings].
Fitted stitches are shared within one ``compare`` call, so repeating a metric never refits.

What the score means: a similarity (higher: more alike), no declared range (the stitched model can beat
the end model, so relative accuracy can exceed 1), asymmetric (front -> end), and no exact invariance
declared: the stitch (an affine 1x1 convolution or linear layer) can absorb an affine map of the front's
channels, but only as far as its training finds it (SGD with weight decay from a least-squares start),
so no transform of the flattened activations leaves the score exactly unchanged.
"""

from __future__ import annotations

from ..host.hookspecs import hookimpl
from ..host.results import LayerPair, SimilarityResult
from ..networks.context import Context
from ..stitch.settings import stitch_options


class _StitchPlugin:
    objective = "hlm"
    needs = ("train", "test")
    options = stitch_options()
    kind = "similarity"
    range = None  # relative accuracy: the stitched model can beat the end model
    symmetric = False
    invariances = ()  # see the module docstring
    activations_only = False  # it runs the end model on the stitched activations

    @hookimpl
    def similarity(self, front, end, layer: LayerPair, options: dict, context: Context) -> SimilarityResult:
        from ..stitch.service import stitch_result

        return stitch_result(context, front, end, layer, self.objective, options)


class StitchHLM(_StitchPlugin):
    """Stitching trained with hard label matching (cross-entropy to the labels); score: relative accuracy."""

    description = "model stitching, hard label matching (cross-entropy to labels); relative accuracy on test"
    objective = "hlm"


class StitchSLM(_StitchPlugin):
    """Stitching trained with soft label matching (cross-entropy to the end model's softmax)."""

    description = "model stitching, soft label matching (cross-entropy to the end model's softmax); relative accuracy"
    objective = "slm"


class StitchDM(_StitchPlugin):
    """Stitching trained with direct matching (squared L2 to the end model's activation at the cut)."""

    description = "model stitching, direct matching (squared L2 to the end's activation at the cut); relative accuracy"
    objective = "dm"


class StitchFuLA(_StitchPlugin):
    """Stitching trained with functional latent alignment (relative L2 at every later layer)."""

    description = "model stitching, functional latent alignment (FuLA: relative L2 at every later layer); relative accuracy"
    objective = "fula"


@hookimpl
def register_metrics(register) -> None:
    """This family's metrics, registered as a third-party family registers its own."""
    register("stitch-hlm", StitchHLM)
    register("stitch-slm", StitchSLM)
    register("stitch-dm", StitchDM)
    register("stitch-fula", StitchFuLA)
