"""CKA baselines (Kornblith et al. 2019) as metric plugins: ``cka-linear``, ``cka-debiased``, ``cka-rbf``.

Each compares the front's activations at ``layer.front`` with the end's at ``layer.end`` on the
test split, flattened to (N, C*H*W) for CNN maps and (N, T*D) for tokens, in float64. Options:
``max_samples`` (use the first N test samples; default all), ``threshold`` (RBF bandwidth factor,
default 1.0), ``permutations``, ``alpha``, ``groups``, ``permute`` (a permutation test of the score and its
calibrated value, `similarity_plugins.plugins.permutations`).
CKA measures representational geometry, not function: see the stitching metrics.

Under torch.distributed each rank extracts its share of the test split. Linear and debiased CKA then
merge exact moments ([`merge`][similarity_plugins.cka.streaming.StreamingLinearCKA.merge], in rank order, so every
rank computes the same score, equal to one process to float64 rounding); RBF CKA needs the n x n Gram
matrices, so it gathers all activations on every rank (memory: the whole (N, D) arrays per rank).
"""

from __future__ import annotations

import torch

from ..host.contract import Option
from ..host.hookspecs import PluginContext, hookimpl
from ..host.plugin import MetricPlugin, declared_value
from ..host.results import LayerPair, SimilarityResult
from ..utils.value_rules import POSITIVE, SAMPLE_LIMIT
from .permutations import PERMUTATION_OPTIONS, keeps_nulls, permutation_options, with_permutation_test

MAX_SAMPLES = Option("max_samples", None, "use the first N test samples (None: all)", SAMPLE_LIMIT)
THRESHOLD = Option("threshold", 1.0, "RBF bandwidth factor: sigma = threshold x sqrt(median squared distance)",
                   POSITIVE)
#: Rows read per block when a measure streams from disk (`_CKAPlugin._streamed`): 8192 x (dx + dy) float64.
STREAM_ROWS = 8192


class _CKAPlugin(MetricPlugin):
    family = "cka"
    kernel = "linear"
    debiased = False
    needs = ("test",)
    options = (MAX_SAMPLES, *PERMUTATION_OPTIONS)
    deterministic = True  # no seed enters the score: compare(repeats=k) computes it once
    activations_only = True  # needs nothing but the two layers' activations: score(x, y) can run it
    kind = "similarity"
    range: tuple[float, float] | None = (0.0, 1.0)
    symmetric = True
    invariances: tuple[str, ...] = ("translation", "isotropic-scaling", "orthogonal", "permutation")

    @hookimpl
    def similarity(self, front, end, layer: LayerPair, options: dict, context: PluginContext, seed: int) -> SimilarityResult:
        from ..cka import cka
        from ..cka.permutation import cka_permutation_test

        test = permutation_options(self, options)
        streamed = self._streamed(front, end, layer, options, context) \
            if self.kernel == "linear" and not test.asked else None  # a test needs every row in memory
        if streamed is not None:
            return streamed
        if context.world.distributed and self.kernel == "linear" and not test.asked:  # a test needs every row
            return self._sharded_linear(front, end, layer, options, context)
        if self.kernel == "rbf":
            from ..measures.streamed import warn_nxn

            warn_nxn(context, front, end, layer, "cka-rbf")
        x = context.activations(front, layer.front, "test")
        y = context.activations(end, layer.end, "test")
        full, limit = len(x), options.get("max_samples")
        if limit:
            x, y = x[: int(limit)], y[: int(limit)]
        kwargs = {"kernel": self.kernel, "debiased": self.debiased}
        if self.kernel == "rbf":
            kwargs["threshold"] = float(declared_value(self, options, THRESHOLD.name))
        per_node = context.reuse_nodes  # a grid: each node's Gram matrix serves many cells
        score = self._per_node(front, end, layer, x, y, kwargs, limit, context) if per_node else None
        if score is None:
            score = cka(x, y, **kwargs)
        details = {"n": int(x.shape[0]), "front_dim": int(x.shape[1]), "end_dim": int(y.shape[1]), **kwargs}
        block = self._block_test(front, end, layer, len(x), full, kwargs, limit, test, seed, context) \
            if per_node and test.asked else None
        with_permutation_test(details, test, block or (lambda: cka_permutation_test(
            x, y, **kwargs, seed=seed, null_values=keeps_nulls(context), alpha=test.alpha,
            **test.for_rows(len(x), full))))
        return SimilarityResult("", float(score), details)

    def _streamed(self, front, end, layer: LayerPair, options: dict, context: PluginContext) -> SimilarityResult | None:
        """Linear CKA from moments read in blocks, when both nodes' rows are on disk (`Context.row_source`: a grid
        from an activation store, ``score`` on store entries) and the moments are smaller than the rows; else None."""
        from ..cka.streaming import StreamingLinearCKA
        from ..measures.streamed import pair_moments, streamed_sources
        from ..utils.arrays import paired_blocks

        limit = options.get(MAX_SAMPLES.name)
        sources = streamed_sources(context, front, end, layer, limit)
        if sources is None:
            return None
        x, y = sources

        def accumulate() -> StreamingLinearCKA:
            acc = StreamingLinearCKA(self.debiased)
            for xb, yb in paired_blocks(x, y, STREAM_ROWS, "CKA"):
                acc.update(xb, yb)
            return acc

        acc = pair_moments(context, "cka", (id(front), layer.front, id(end), layer.end, limit), accumulate)
        details = {"n": len(x), "front_dim": int(x.shape[1]), "end_dim": int(y.shape[1]), "kernel": self.kernel,
                   "debiased": self.debiased, "streamed": True}  # both estimators from one pass over the pair
        return SimilarityResult("", float(acc.compute(self.debiased)), details)

    def _node_gram(self, model, name: str, acts, threshold: float, limit, context: PluginContext, side: str = "X"):
        """The node's centred Gram matrix, built once per node (`context.derived`) for both estimators; a node that
        cannot be built raises naming it as ``side`` (``"X"``: the cell's front, ``"Y"``: its end), as `cka` does."""
        from ..cka.nodes import node_gram

        return context.derived(model, name, "test", ("cka-gram", self.kernel, threshold, limit),
                               lambda: node_gram(acts, self.kernel, threshold, name=side))

    def _block_test(self, front, end, layer: LayerPair, n: int, full: int, kwargs: dict, limit, test,
                    seed: int, context: PluginContext):
        """In a grid: the cell's permutation test cut from its whole block's (`cka.block`), which every cell of the
        block shares (`context.remember`); None when the grid's layers are unknown or the block's n x n matrices
        would not fit in a quarter of the free memory (then the cell's own test). The block leaves out nodes
        whose Gram matrix cannot be built (their cells fail on their own)."""
        from ..stats.blocks import block_bytes
        from ..utils.arrays import available_bytes
        from ..utils.digest import value_text

        fronts, ends = context.grid_layers.get(id(front)), context.grid_layers.get(id(end))
        if not fronts or not ends or layer.front not in fronts or layer.end not in ends:
            return None
        if block_bytes(n, len(fronts), len(ends)) * 2 > available_bytes() / 4:
            return None
        threshold = kwargs.get("threshold", THRESHOLD.default)
        key = ("cka-block-test", id(front), id(end), tuple(fronts), tuple(ends), self.kernel, self.debiased,
               threshold, limit, seed, value_text(test))

        def compute() -> tuple:
            from ..cka.block import cka_block_nulls
            from ..stats.designs import plan_permutations
            from ..stats.permutation import GATHER_COST, check_cost

            plan = plan_permutations(n=n, seed=seed, **test.for_rows(n, full))
            sides = [self._usable_nodes(model, names, threshold, limit, context)
                     for model, names in ((front, fronts), (end, ends))]
            observed, null = cka_block_nulls(list(sides[0].values()), list(sides[1].values()), plan, self.debiased)
            work = 0.5 * n * n * (GATHER_COST + len(sides[0])) * len(sides[1])
            note = check_cost(plan.k, work, "CKA permutation test of a grid block", 0.0, None, n, plan.distinct())
            return plan, list(sides[0]), list(sides[1]), observed, null, note

        def run() -> dict:
            from ..cka.permutation import cka_range
            from ..stats.permutation import summarise

            plan, rows, cols, observed, null, note = context.remember(key, compute)
            i, j = rows.index(layer.front), cols.index(layer.end)
            out = summarise(float(observed[i, j]), torch.from_numpy(null[:, i, j]), "similarity",
                            keep_null=keeps_nulls(context), alpha=test.alpha, bounds=cka_range(self.debiased))
            out.update(plan.details())
            return {**out, "warnings": [note]} if note else out

        return run

    def _usable_nodes(self, model, names: list[str], threshold: float, limit, context: PluginContext) -> dict:
        """``{layer: NodeGram}`` of the model's grid layers whose Gram matrix can be built (in layer order)."""
        out = {}
        for name in names:
            acts = context.activations(model, name, "test")
            try:
                out[name] = self._node_gram(model, name, acts[: int(limit)] if limit else acts, threshold, limit, context)
            except ValueError:  # a constant or non-finite layer: its own cells say so
                continue
        return out

    def _per_node(self, front, end, layer: LayerPair, x, y, kwargs: dict, limit, context: PluginContext) -> float | None:
        """CKA from each node's centred Gram matrix, built once per node and shared by every cell it is in (a grid);
        None (then `cka`) when a linear cell costs less in feature space (few features: no n x n matrix is held),
        the n x n matrices would not fit in memory or a product under/overflowed."""
        from ..cka.nodes import cka_from_node_grams
        from ..utils.arrays import available_bytes

        n = int(x.shape[0])
        if len(y) != n or n < 4 or 8 * n * n * 3 > available_bytes():
            return None
        if self.kernel == "linear" and _feature_space_pays(n, int(x.shape[1]), int(y.shape[1])):
            return None
        threshold = kwargs.get("threshold", THRESHOLD.default)  # linear kernels ignore it

        a = self._node_gram(front, layer.front, x, threshold, limit, context, "X")
        b = self._node_gram(end, layer.end, y, threshold, limit, context, "Y")
        return cka_from_node_grams(a, b, self.debiased)

    def _sharded_linear(self, front, end, layer: LayerPair, options: dict, context: PluginContext) -> SimilarityResult:
        """Linear CKA from every rank's moments of its share of the test split (exact merge, rank order)."""
        from ..cka.streaming import StreamingLinearCKA
        from ..networks.activations import flatten

        dims: list[int] = []

        def local_state() -> dict:
            x, _, rows = context.local_activations(front, layer.front, "test")
            y, _, _ = context.local_activations(end, layer.end, "test")
            x, y = flatten(x), flatten(y)
            limit = options.get("max_samples")
            if limit and rows is not None:  # keep the global rows below the limit
                keep = max(0, min(len(rows), int(limit) - rows.start))
                x, y = x[:keep], y[:keep]
            dims[:] = [int(x.shape[1]), int(y.shape[1])]
            acc = StreamingLinearCKA(self.debiased)
            if len(x):
                acc.update(x, y)
            return acc.state_dict()

        states = context.world.exchange(local_state, "CKA moments")
        total = StreamingLinearCKA.merged(states, self.debiased)
        score = total.compute()
        details = {"n": int(total.n), "front_dim": dims[0], "end_dim": dims[1], "kernel": self.kernel,
                   "debiased": self.debiased}
        return SimilarityResult("", float(score), details)


class LinearCKA(_CKAPlugin):
    """Linear CKA between the flattened activations at the layer (test split)."""

    description = "linear CKA of the activations at the layer (test split; Kornblith et al. 2019)"


class DebiasedCKA(_CKAPlugin):
    """Linear CKA with the unbiased HSIC estimator (needs at least 4 samples)."""

    description = "linear CKA with the unbiased (U-statistic) HSIC estimator"
    debiased = True
    range = (-1.0, 1.0)  # a cosine between U-centred Gram matrices: can be slightly negative


class RBFCKA(_CKAPlugin):
    """RBF-kernel CKA; bandwidth = threshold x median squared distance. Needs n x n Gram matrices."""

    description = "RBF-kernel CKA (bandwidth: threshold x median squared distance; O(n^2) memory)"
    kernel = "rbf"
    options = (MAX_SAMPLES, THRESHOLD, *PERMUTATION_OPTIONS)


@hookimpl
def register_metrics(register) -> None:
    """This family's metrics, registered as a third-party family registers its own."""
    register("cka-linear", LinearCKA)
    register("cka-debiased", DebiasedCKA)
    register("cka-rbf", RBFCKA)


def _feature_space_pays(n: int, d1: int, d2: int) -> bool:
    """Whether a grid's linear CKA cell is better scored in feature space than from the two nodes' Gram matrices:
    when those are large (over 1 MiB each; smaller ones cost nothing worth saving and serve many cells) and one
    cell in feature space (``n (d1^2 + d2^2) / 2 + n d1 d2`` flops, d x d matrices) costs less than the memory-bound
    passes over ``n^2`` entries of a cell from Grams (weighted ``GRAM_PASS_FLOPS``), which also hold ``8 n^2``
    bytes per node. True where d^2 is below about 20 n, as for the pooled rows of a small language model (64
    features of 2,048 texts)."""
    from ..cka.inputs import GRAM_PASS_FLOPS

    return 8 * n * n > _SMALL_GRAM_BYTES and n * (d1 * d1 + d2 * d2) / 2 + n * d1 * d2 <= GRAM_PASS_FLOPS * n * n


_SMALL_GRAM_BYTES = 1 << 20
