"""A family of two metrics from one entry point: the distance and the norm ratio of the mean activations."""
import torch

import similarity_plugins


def _means(front, end, layer, context) -> tuple[torch.Tensor, torch.Tensor]:
    x = context.activations(front, layer.front, "test").double().mean(0)  # (D,)
    y = context.activations(end, layer.end, "test").double().mean(0)
    if x.shape != y.shape:
        raise ValueError(f"needs equal widths, got {x.shape[0]} and {y.shape[0]}")
    return x, y


class MeanEuclidean:
    """Euclidean distance between the two models' mean activations at the layer (test split)."""

    kind = "distance"  # lower: more alike
    range = (0.0, float("inf"))
    symmetric = True
    invariances = ()  # a transform of one side moves its mean
    activations_only = True  # reads only context.activations: also runs in similarity_plugins.score
    needs = ("test",)

    @similarity_plugins.hookimpl
    def similarity(self, front, end, layer, context):
        x, y = _means(front, end, layer, context)
        return float((x - y).norm())


class MeanNormRatio:
    """Smaller over larger Euclidean norm of the two mean activations (1: equal norms)."""

    kind = "similarity"
    range = (0.0, 1.0)
    symmetric = True
    invariances = ("orthogonal", "permutation")  # neither changes a vector's norm
    activations_only = True
    needs = ("test",)

    @similarity_plugins.hookimpl
    def similarity(self, front, end, layer, context):
        x, y = _means(front, end, layer, context)
        a, b = float(x.norm()), float(y.norm())
        if max(a, b) == 0.0:
            raise ValueError("both mean activations are zero")
        return {"score": min(a, b) / max(a, b), "details": {"front_norm": a, "end_norm": b}}


@similarity_plugins.hookimpl
def register_metrics(register):
    register("mean-euclidean", MeanEuclidean)
    register("mean-norm-ratio", MeanNormRatio)
