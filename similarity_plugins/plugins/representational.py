"""Representational measures beside CKA as metric plugins: ``procrustes``, ``cca``, ``svcca``, ``pwcca``, ``rsa``,
``linear-regression``, ``mutual-knn``, ``cknna`` (the maths: `similarity_plugins.measures`).

Like the CKA plugins, each compares the front's activations at ``layer.front`` with the end's at ``layer.end``
on the test split, flattened to (N, C*H*W) for CNN maps and (N, T*D) for tokens, in float64, and reads them
only through ``context.activations(model, layer, split)`` (so ``score(x, y)`` can feed arrays). Option
``max_samples``: use the first N test samples (default all). ``linear-regression`` also fits on the train split.
Options ``permutations``, ``alpha``, ``groups``, ``permute``: a permutation test of the score and its calibrated value
(`similarity_plugins.plugins.permutations`, `similarity_plugins.measures.permutation`).

Each declares what its score means: ``kind``, ``range``, ``symmetric`` and ``invariances`` (vocabulary in
docs/metrics.md; for option-dependent invariances, those of the defaults).

Under torch.distributed, ``context.activations`` gathers every rank's share, so each rank holds the whole
(N, D) arrays of both layers (``linear-regression``: of both splits) and computes the same score; the
measures' own memory comes on top (RSA: about 40 N^2 bytes).
"""

from __future__ import annotations

import math

from ..host.contract import Option
from ..host.hookspecs import PluginContext, hookimpl
from ..host.plugin import MetricPlugin, declared_value
from ..host.results import LayerPair, SimilarityResult
from ..measures.cknna import MIN_TOPK
from ..measures.rsa import COMPARISONS, RDMS
from ..utils.value_rules import POSITIVE, POSITIVE_INT, SAMPLE_LIMIT, AnyOf, Each, Interval, OneOf, OrNone
from .cka import MAX_SAMPLES
from .permutations import (
    GROUPS,
    PERMUTATION_OPTIONS,
    PERMUTATIONS,
    PERMUTE,
    keeps_nulls,
    permutation_options,
    with_permutation_test,
)

_ALL_LINEAR = ("translation", "isotropic-scaling", "orthogonal", "permutation")


class _Representational(MetricPlugin):
    """One measure of `similarity_plugins.measures` on the test activations at the layer."""

    family = "representational"
    needs = ("test",)
    options: tuple[Option, ...] = (MAX_SAMPLES, *PERMUTATION_OPTIONS)
    deterministic = True  # no seed enters the score: compare(repeats=k) computes it once
    activations_only = True  # needs nothing but the two layers' activations: score(x, y) can run it
    kind = "similarity"
    range: tuple[float, float] | None = (0.0, 1.0)
    symmetric = True
    invariances: tuple[str, ...] = _ALL_LINEAR

    measure: str  # the name of the function of similarity_plugins.measures that computes the score

    def arguments(self, options: dict) -> dict:
        """The measure's keyword arguments: every declared option but ``max_samples`` and the permutation options, at
        the value given or its declared default."""
        skip = {MAX_SAMPLES.name, *(o.name for o in PERMUTATION_OPTIONS)}
        return {o.name: declared_value(self, options, o.name) for o in self.options if o.name not in skip}

    @staticmethod
    def test_activations(front, end, layer: LayerPair, options: dict, context: PluginContext) -> tuple:
        """The front's and the end's test activations at the layer, (N, Dx) and (N, Dy), cut to ``max_samples``."""
        x = context.activations(front, layer.front, "test")
        y = context.activations(end, layer.end, "test")
        limit = options.get(MAX_SAMPLES.name)
        return (x[: int(limit)], y[: int(limit)]) if limit else (x, y)

    @hookimpl
    def similarity(self, front, end, layer: LayerPair, options: dict, context: PluginContext, seed: int) -> SimilarityResult:
        from .. import measures
        from ..measures.permutation import permutation_test

        test = permutation_options(self, options)
        arguments = self.arguments(options)
        streamed = self._streamed(front, end, layer, arguments, options, context) if not test.asked else None
        if streamed is not None:
            return streamed
        if self.measure in ("rsa", "mutual_knn", "cknna"):
            from ..measures.streamed import warn_nxn

            warn_nxn(context, front, end, layer, self.measure.replace("_", "-"))
        x, y = self.test_activations(front, end, layer, options, context)
        full = len(context.activations(front, layer.front, "test"))  # the split's rows before max_samples
        if context.reuse_nodes:  # a grid: each node's part is built once, for all its cells
            result = self._from_nodes(front, end, layer, x, y, arguments, options, context)
        else:
            result = getattr(measures, self.measure)(x, y, **arguments, details=True)
        details = {"n": int(x.shape[0]), "front_dim": int(x.shape[1]), "end_dim": int(y.shape[1]), **result.details}
        with_permutation_test(details, test, lambda: permutation_test(
            self.measure, x, y, seed=seed, kind=self.kind, null_values=keeps_nulls(context), level=test.alpha,
            **test.for_rows(len(x), full), **arguments))
        return SimilarityResult("", result.score, details)


    def _streamed(self, front, end, layer: LayerPair, arguments: dict, options: dict,
                  context: PluginContext) -> SimilarityResult | None:
        """The measure from float64 moments read in blocks, when it reduces to sums over samples and both nodes' rows
        are on disk (`Context.row_source`) with moments smaller than the rows; else None."""
        from ..measures.streamed import from_moments, moments, pair_moments, streamed_sources
        from .cka import STREAM_ROWS

        if self.measure not in ("procrustes", "cca", "svcca", "pwcca"):
            return None
        limit = options.get(MAX_SAMPLES.name)
        sources = streamed_sources(context, front, end, layer, limit)
        if sources is None:
            return None
        x, y = sources
        key = (id(front), layer.front, id(end), layer.end, limit)  # procrustes and the CCA family: one pass
        m = pair_moments(context, "moments", key, lambda: moments(x, y, STREAM_ROWS, self.measure))
        result = from_moments(m, self.measure, **arguments)
        details = {"n": len(x), "front_dim": int(x.shape[1]), "end_dim": int(y.shape[1]), **result.details,
                   "streamed": True}
        return SimilarityResult("", result.score, details)

    def _from_nodes(self, front, end, layer: LayerPair, x, y, arguments: dict, options: dict, context: PluginContext):
        """The measure from each node's part (`similarity_plugins.measures.nodes`), memoised per node."""
        from ..measures.nodes import NODE_FORMS

        form = NODE_FORMS[self.measure]
        limit = options.get("max_samples")

        def part(model, name: str, acts, role: str):
            return context.derived(model, name, "test", (*form.key(role, arguments), limit),
                                   lambda: form.build(acts, role, arguments))

        return form.combine(part(front, layer.front, x, "front"), part(end, layer.end, y, "end"), arguments)


class Procrustes(_Representational):
    """Orthogonal Procrustes / normalised Bures similarity of the centred activations."""

    description = "orthogonal Procrustes / normalised Bures similarity, ||Xc^T Yc||_* / (||Xc|| ||Yc||) (test split)"

    measure = "procrustes"


class CCA(_Representational):
    """Mean canonical correlation; refuses when N - 1 <= rank(front) + rank(end)."""

    description = "mean canonical correlation of the centred activations (test split; refuses degenerate N <= Dx+Dy+1)"
    invariances = (*_ALL_LINEAR, "invertible-linear")

    measure = "cca"


class SVCCA(_Representational):
    """SVCCA (Raghu et al. 2017): SVD-reduce each side to 99% of its variance (or dims), then mean CCA."""

    description = "SVCCA: each side SVD-reduced to `variance` of its variance (or `dims`), then mean CCA (Raghu 2017)"
    options = (MAX_SAMPLES, Option("variance", 0.99, "share of each side's variance its kept SVD directions reach",
                                   Interval(float, 0, 1, closed="right")),
               Option("dims", None, "SVD directions kept per side (int, or [front, end]); overrides variance",
                      OrNone(AnyOf(POSITIVE_INT, Each(POSITIVE_INT, length=2)), "keep the share `variance`")),
               *PERMUTATION_OPTIONS)

    measure = "svcca"


class PWCCA(_Representational):
    """PWCCA (Morcos et al. 2018): canonical correlations weighted by the front's projections."""

    description = "PWCCA: canonical correlations weighted by their projection on the front's neurons (Morcos 2018)"
    symmetric = False
    invariances = ("translation", "isotropic-scaling", "permutation")

    measure = "pwcca"


class RSA(_Representational):
    """RSA: correlation of the two representational dissimilarity matrices (O(N^2) memory)."""

    description = "RSA: Spearman (or pearson/kendall) correlation of the two RDMs (correlation distance by default)"
    options = (MAX_SAMPLES, Option("rdm", "correlation", "dissimilarity: correlation, euclidean or cosine (scipy pdist)",
                                   OneOf(RDMS)),
               Option("compare", "spearman", "RDM comparison: spearman, pearson or kendall (tau-b)", OneOf(COMPARISONS)),
               *PERMUTATION_OPTIONS)
    range = (-1.0, 1.0)
    invariances = ("isotropic-scaling", "permutation")

    measure = "rsa"


class LinearRegression(_Representational):
    """Variance-weighted R^2 on the test split of a ridge map front -> end fitted on the train split."""

    description = "linear (ridge) regression front -> end: variance-weighted R^2 on test, fitted on train"
    needs = ("train", "test")
    options = (Option("max_samples", None, "use the first N test samples (None: all; fitting uses the whole train split)",
                      SAMPLE_LIMIT),
               Option("alpha", 1e-3, "ridge strength relative to the mean eigenvalue of the front's covariance (with "
                      "permutations, the calibrated score's level is therefore 0.05)", POSITIVE),
               PERMUTATIONS, GROUPS, PERMUTE)
    range = (-math.inf, 1.0)  # at most 1; unbounded below (worse than predicting the mean)
    symmetric = False

    @hookimpl
    def similarity(self, front, end, layer: LayerPair, options: dict, context: PluginContext, seed: int) -> SimilarityResult:
        from ..measures import linear_regression
        from ..measures.permutation import permutation_test

        test = permutation_options(self, options, alpha=False)
        alpha = declared_value(self, options, "alpha")
        streamed = self._streamed_fit(front, end, layer, options, context, alpha) if not test.asked else None
        if streamed is not None:
            return streamed
        x, y = self.test_activations(front, end, layer, options, context)
        x_train = context.activations(front, layer.front, "train")
        y_train = context.activations(end, layer.end, "train")
        if context.reuse_nodes:  # a grid: the front's factorisation serves every end
            from ..measures.regression import linear_regression_from_front, ridge_front

            fit = context.derived(front, layer.front, "train", ("ridge", alpha), lambda: ridge_front(x_train, alpha))
            result = linear_regression_from_front(fit, y_train, x, y, details=True)
        else:
            result = linear_regression(x_train, y_train, alpha, X_test=x, Y_test=y, details=True)
        details = {"front_dim": int(x.shape[1]), "end_dim": int(y.shape[1]), **result.details}
        details["split"] = "fitted on the train split, scored on the test split"
        with_permutation_test(details, test, lambda: permutation_test(
            "linear_regression", x_train, y_train, seed=seed, kind=self.kind, alpha=alpha, X_test=x, Y_test=y,
            null_values=keeps_nulls(context), **test.for_rows(len(x_train))))
        return SimilarityResult("", result.score, details)


    @staticmethod
    def _streamed_fit(front, end, layer: LayerPair, options: dict, context: PluginContext, alpha) -> SimilarityResult | None:
        """The regression from the train rows' moments and a pass over the test rows, when all four are on disk
        (``score`` on store entries) and the moments are smaller than the rows; else None."""
        from ..measures.streamed import streamed_regression, streamed_sources
        from .cka import STREAM_ROWS

        train = streamed_sources(context, front, end, layer, split="train")
        test = streamed_sources(context, front, end, layer, options.get(MAX_SAMPLES.name))
        if train is None or test is None:
            return None
        result = streamed_regression(*train, *test, rows=STREAM_ROWS, alpha=alpha)
        details = {"front_dim": int(test[0].shape[1]), "end_dim": int(test[1].shape[1]), **result.details,
                   "split": "fitted on the train split, scored on the test split", "streamed": True}
        return SimilarityResult("", result.score, details)


class MutualKNN(_Representational):
    """Mutual k-nearest-neighbour alignment of L2-normalised rows (Huh et al. 2024)."""

    description = "mutual k-NN alignment: shared share of each sample's topk cosine neighbours (Huh et al. 2024)"
    options = (MAX_SAMPLES, Option("topk", 10, "neighbours per sample (other samples; needs N > topk + 1)", POSITIVE_INT),
               *PERMUTATION_OPTIONS)
    invariances = ("isotropic-scaling", "orthogonal", "permutation")

    measure = "mutual_knn"


class CKNNA(_Representational):
    """CKNNA (Huh et al. 2024): CKA of the inner-product kernels over the pairs of mutual nearest neighbours."""

    description = "CKNNA: unbiased CKA of the inner products over mutual topk neighbours (Huh et al. 2024)"
    options = (MAX_SAMPLES, Option("topk", 10, "neighbours per sample by inner product (2 <= topk <= N - 1)",
                                   Interval(int, MIN_TOPK)),
               *PERMUTATION_OPTIONS)
    range = None  # usually within [-1, 1], but the neighbour masks are not symmetric: no bound holds
    symmetric = False
    invariances = ("isotropic-scaling", "orthogonal", "permutation")

    measure = "cknna"


@hookimpl
def register_metrics(register) -> None:
    """This family's metrics, registered as a third-party family registers its own."""
    register("procrustes", Procrustes)
    register("cca", CCA)
    register("svcca", SVCCA)
    register("pwcca", PWCCA)
    register("rsa", RSA)
    register("linear-regression", LinearRegression)
    register("mutual-knn", MutualKNN)
    register("cknna", CKNNA)
