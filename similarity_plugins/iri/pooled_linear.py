"""An adaptive average pool that spreads few values over many, followed by a linear layer, folded into one
linear layer of a private copy of the front: the same function in less work.

VGG's head pools its last feature map to 7x7 before ``classifier.0`` (``Linear(25088, 4096)``). At 32x32
that map is 1x1, so the pool copies each of 512 values 49 times, and every forward and backward pass of a
front cut in the classifier reads 103 M weights that act on copies (2.5x the time of the front at
``features.43`` on a CPU). Pooling and the linear layer are both linear, so ``linear(flatten(pool(x)))``
equals ``linear'(flatten(x))`` with ``W' = W B`` per channel, where ``B`` holds the pool's weights; the copy
gets that layer (``Linear(512, 4096)`` at 32x32). The values differ only by rounding. Like the cropped
taps (``crop.py``) it depends on the input's size, so it is made for the seeds of one run.
"""

from __future__ import annotations

import torch
from torch import nn

from .probe import input_shapes

POOLS = (nn.AdaptiveAvgPool1d, nn.AdaptiveAvgPool2d, nn.AdaptiveAvgPool3d)


def _is_flatten(node: torch.fx.Node, owner: torch.fx.GraphModule) -> bool:
    """True for ``torch.flatten(x, 1)``, ``x.flatten(1)`` or an ``nn.Flatten()`` (start 1, end -1)."""
    if node.op == "call_module":
        module = owner.get_submodule(node.target)
        return type(module) is nn.Flatten and module.start_dim == 1 and module.end_dim == -1
    if (node.op, node.target) in (("call_function", torch.flatten), ("call_method", "flatten")):
        start = node.args[1] if len(node.args) > 1 else node.kwargs.get("start_dim", 0)
        end = node.args[2] if len(node.args) > 2 else node.kwargs.get("end_dim", -1)
        return start == 1 and end == -1
    return False


def _only_user(node: torch.fx.Node) -> torch.fx.Node | None:
    """The node's one user, or None when it has several or none."""
    return next(iter(node.users)) if len(node.users) == 1 else None


def _pool_matrix(pool: nn.Module, spatial: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
    """(values in, values out) per channel: the weight of each input position in each pooled output."""
    n = 1
    for size in spatial:
        n *= size
    basis = torch.eye(n, dtype=like.dtype, device=like.device).reshape(n, 1, *spatial)
    with torch.no_grad():
        return pool(basis).reshape(n, -1)


def fold_pooled_linear(front: torch.fx.GraphModule, example: torch.Tensor) -> list[str]:
    """In the private traced front ``front`` (``fold.private_front``'s copy), replace each adaptive average
    pool -> flatten -> ``nn.Linear`` chain whose pool has more outputs than inputs for the input ``example``
    (1, ...) by flatten -> a linear layer on the pool's input; returns the names of the replaced linear
    layers. Afterwards ``front`` computes the same function, up to rounding, on inputs of ``example``'s
    shape (any batch size), and is only valid for those."""
    sizes = input_shapes(front, example, lambda m: type(m) in POOLS)
    folded = []
    for pool_node in [n for n in front.graph.nodes if n.op == "call_module" and n.target in sizes]:
        flat = _only_user(pool_node)
        lin = _only_user(flat) if flat is not None and _is_flatten(flat, front) else None
        if lin is None or lin.op != "call_module" or type(front.get_submodule(lin.target)) is not nn.Linear:
            continue
        seen, pool, linear = sizes[pool_node.target], front.get_submodule(pool_node.target), front.get_submodule(lin.target)
        shape = next(iter(seen))
        if len(seen) != 1 or shape is None or len(shape) != POOLS.index(type(pool)) + 3:   # (N, C, *spatial)
            continue
        spread = _pool_matrix(pool, shape[2:], linear.weight)   # (in, out)
        if spread.shape[0] >= spread.shape[1]:
            continue
        weight = linear.weight.reshape(linear.out_features, -1, spread.shape[1]) @ spread.T
        new = nn.Linear(weight.shape[1] * weight.shape[2], linear.out_features, bias=linear.bias is not None,
                        device=weight.device, dtype=weight.dtype)
        with torch.no_grad():
            new.weight.copy_(weight.reshape(linear.out_features, -1))
            if linear.bias is not None:
                new.bias.copy_(linear.bias)
        new.requires_grad_(False)
        parent, _, attr = lin.target.rpartition(".")
        setattr(front.get_submodule(parent), attr, new.train(linear.training))
        with front.graph.inserting_before(lin):
            lin.args = (front.graph.call_function(torch.flatten, (pool_node.args[0], 1)),)
        front.graph.erase_node(flat)
        front.graph.erase_node(pool_node)
        folded.append(lin.target)
    if folded:
        front.recompile()
    return folded

