"""CKA baselines (Kornblith et al. 2019) as metric plugins: ``cka-linear``, ``cka-debiased``, ``cka-rbf``.

Each compares the front's activations at ``layer.front`` with the end's at ``layer.end`` on the
test split, flattened to (N, C*H*W) for CNN maps and (N, T*D) for tokens, in float64. Options:
``max_samples`` (use the first N test samples; default all), ``threshold`` (RBF bandwidth factor,
default 1.0). CKA measures representational geometry, not function: see the stitching metrics.
"""

from __future__ import annotations

from ..core.context import Context
from ..core.hookspecs import hookimpl
from ..core.results import LayerPair, SimilarityResult


class _CKAPlugin:
    kernel = "linear"
    debiased = False
    needs = ("test",)
    deterministic = True  # no seed enters the score: compare(repeats=k) computes it once

    @hookimpl
    def similarity(self, front, end, layer: LayerPair, options: dict, context: Context) -> SimilarityResult:
        from ..cka import cka

        x = context.activations(front, layer.front, "test")
        y = context.activations(end, layer.end, "test")
        limit = options.get("max_samples")
        if limit:
            x, y = x[: int(limit)], y[: int(limit)]
        kwargs = {"kernel": self.kernel, "debiased": self.debiased}
        if self.kernel == "rbf":
            kwargs["threshold"] = float(options.get("threshold", 1.0))
        score = cka(x, y, **kwargs)
        details = {"n": int(x.shape[0]), "front_dim": int(x.shape[1]), "end_dim": int(y.shape[1]), **{k: v for k, v in kwargs.items()}}
        return SimilarityResult("", float(score), details)


class LinearCKA(_CKAPlugin):
    """Linear CKA between the flattened activations at the layer (test split)."""

    description = "linear CKA of the activations at the layer (test split; Kornblith et al. 2019)"


class DebiasedCKA(_CKAPlugin):
    """Linear CKA with the unbiased HSIC estimator (needs at least 4 samples)."""

    description = "linear CKA with the unbiased (U-statistic) HSIC estimator"
    debiased = True


class RBFCKA(_CKAPlugin):
    """RBF-kernel CKA; bandwidth = threshold x median squared distance. Needs n x n Gram matrices."""

    description = "RBF-kernel CKA (bandwidth: threshold x median squared distance; O(n^2) memory)"
    kernel = "rbf"
