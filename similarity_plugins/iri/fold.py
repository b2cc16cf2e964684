"""A private, BatchNorm-folded copy of an eval-mode front: the same function in fewer operations.

In eval mode a BatchNorm after a convolution is an affine map per channel, so it can be folded into the
convolution's weights and bias (``torch.fx.experimental.optimization.fuse``): the forward and backward
passes skip one elementwise pass per folded layer (measured 11-15% less time per forward+backward of
ResNet-18 and VGG-16-BN at 32x32 on a CPU). The values differ from the unfolded front only by rounding
(about 1e-6 relative). The copy is private: the user's model is not touched, and its module names are the
model's, so ReLU calls traced on it match those traced on the model.
"""

from __future__ import annotations

import copy
import warnings

import torch
from torch import nn

from ..core.networks import eliminate_dead_code


def folded_front(graph: torch.fx.GraphModule | None) -> nn.Module | None:
    """An eval-mode copy of a traced front (``SplitNetwork.front_graph``, or the copy
    ``modular.relu_modules`` makes of it) with every Conv+BatchNorm pair folded, parameters without
    gradients; None when ``graph`` is None (the front is not traceable by torch.fx) or nothing could be folded.

    Call it as ``front(x)`` on a batch (N, ...) on the model's device; it returns the activation at the cut.
    """
    if graph is None:
        return None
    front = copy.deepcopy(graph)
    for module in front.modules():
        module.training = False
    before = _batchnorm_calls(front)
    try:
        from torch.fx.experimental.optimization import fuse

        front = fuse(front, inplace=True)
    except Exception as exc:  # noqa: BLE001 - folding is an optimisation: fall back to the model as it is
        warnings.warn(f"could not fold BatchNorm into the convolutions of the front ({exc}); running it unfolded",
                      stacklevel=3)
        return None
    eliminate_dead_code(front)
    if _batchnorm_calls(front) == before:
        return None
    for p in front.parameters():
        p.requires_grad_(False)
    return front.eval()


def _batchnorm_calls(graph: torch.fx.GraphModule) -> int:
    """How many BatchNorm modules the graph calls."""
    return sum(node.op == "call_module" and isinstance(graph.get_submodule(node.target), nn.modules.batchnorm._BatchNorm)
               for node in graph.graph.nodes)
