"""Cosine similarity of the two models' mean activations at the layer (test split)."""
import torch

import similarity_plugins


@similarity_plugins.hookimpl
def similarity(front, end, layer, context):
    x = context.activations(front, layer.front, "test").double().mean(0)  # (D,) float64: a cosine of 1 stays 1
    y = context.activations(end, layer.end, "test").double().mean(0)
    if x.shape != y.shape:
        raise ValueError(f"mean-cosine needs equal widths, got {x.shape[0]} and {y.shape[0]}")
    cosine = float(torch.nn.functional.cosine_similarity(x, y, dim=0))
    return min(max(cosine, -1.0), 1.0)  # in [-1, 1] whatever the rounding
