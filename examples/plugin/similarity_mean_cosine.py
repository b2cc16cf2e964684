"""Cosine similarity of the two models' mean activations at the layer (test split)."""
import torch

import similarity_plugins


@similarity_plugins.hookimpl
def similarity(front, end, layer, context):
    x = context.activations(front, layer.front, "test").mean(0)  # (D,) float32
    y = context.activations(end, layer.end, "test").mean(0)
    if x.shape != y.shape:
        raise ValueError(f"mean-cosine needs equal widths, got {x.shape[0]} and {y.shape[0]}")
    return float(torch.nn.functional.cosine_similarity(x, y, dim=0))
