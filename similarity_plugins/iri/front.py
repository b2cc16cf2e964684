"""The optimiser's private copy of the front: the same function as the model's front in less work.

``private_front`` copies the traced front (the user's model is never touched; the copy keeps the model's
module names, so ReLU calls traced on it match those traced on the model) and rewrites it for the seeds' size:

- BatchNorm after a convolution is, in eval mode, an affine map per channel, folded into the convolution's
  weights and bias (``torch.fx.experimental.optimization.fuse``): one elementwise pass less per folded layer;
- convolution taps that only ever read padding are cut (at 32x32 ResNet ``layer4`` sees 1x1 maps, so eight
  of nine taps of its 3x3 convolutions multiply zeros);
- an adaptive average pool that spreads few values over many, followed by a linear layer, is folded into one
  linear layer (VGG's head at 32x32 copies each of 512 values 49 times into ``Linear(25088, 4096)``).

Each rewrite changes values only by rounding (about 1e-6 relative). The crop and the pooled linear layer
depend on the input's size, so the copy is made for the seeds of one run.
"""

from __future__ import annotations

import copy
import warnings
from typing import Callable

import torch
from torch import nn

from ..networks.split import eliminate_dead_code


def folded_front(graph: torch.fx.GraphModule | None) -> nn.Module | None:
    """An eval-mode copy of a traced front (``SplitNetwork.front_graph``, or the copy
    ``relu.relu_modules`` makes of it) with every Conv+BatchNorm pair folded, parameters without
    gradients; None when ``graph`` is None (the front is not traceable by torch.fx) or nothing could be folded.

    Call it as ``front(x)`` on a batch (N, ...) on the model's device; it returns the activation at the cut.
    """
    if graph is None:
        return None
    front = _frozen_copy(graph)
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
    return front


def private_front(graph: torch.fx.GraphModule | None, example: torch.Tensor) -> tuple[nn.Module | None, dict]:
    """The copy of the traced front ``graph`` that the IRI optimiser runs when ``fold_bn`` is on: BatchNorm
    folded (`folded_front`), convolution taps that only read padding cut (`crop_dead_taps`) and
    an average pool that spreads values folded into the linear layer after it
    (``pooled_linear.fold_pooled_linear``), the last two for inputs of ``example``'s shape (1, ...).

    Returns (the copy, or None when ``graph`` is None or none of the three applies; ``{"bn_folded": bool,
    "convs_cropped": [names], "linears_folded": [names]}``). The copy computes the front's function up to
    rounding on a batch (N, ...) of ``example``'s shape and shares nothing with the model."""
    changes: dict = {"bn_folded": False, "convs_cropped": [], "linears_folded": []}
    if graph is None:
        return None, changes
    folded = folded_front(graph)
    front = folded if folded is not None else _frozen_copy(graph)
    changes.update(bn_folded=folded is not None, convs_cropped=crop_dead_taps(front, example),
                   linears_folded=fold_pooled_linear(front, example))
    return (front if any(changes.values()) else None), changes


def _frozen_copy(graph: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A deep copy of ``graph`` in eval mode whose parameters need no gradient."""
    front = copy.deepcopy(graph).eval()
    for p in front.parameters():
        p.requires_grad_(False)
    return front


def _batchnorm_calls(graph: torch.fx.GraphModule) -> int:
    """How many BatchNorm modules the graph calls."""
    return sum(node.op == "call_module" and isinstance(graph.get_submodule(node.target), nn.modules.batchnorm._BatchNorm)
               for node in graph.graph.nodes)


def input_shapes(front: nn.Module, example: torch.Tensor,
                 wanted: Callable[[nn.Module], bool]) -> dict[str, set[tuple[int, ...] | None]]:
    """Run ``front(example)`` once without gradients and return, for every submodule for which ``wanted``
    is true and that ran, the set of shapes of its input tensor (positional or the keyword ``input``; None
    when it was not a tensor), one entry per distinct shape, keyed by the module's name."""
    shapes: dict[str, set[tuple[int, ...] | None]] = {}

    def record(args: tuple, kwargs: dict, name: str) -> None:
        x = args[0] if args else kwargs.get("input")
        shapes.setdefault(name, set()).add(tuple(x.shape) if isinstance(x, torch.Tensor) else None)

    hooks = [module.register_forward_pre_hook(lambda m, a, k, name=name: record(a, k, name), with_kwargs=True)
             for name, module in front.named_modules() if wanted(module)]
    try:
        with torch.no_grad():
            front(example)
    finally:
        for hook in hooks:
            hook.remove()
    return shapes


CONVS = (nn.Conv1d, nn.Conv2d, nn.Conv3d)


def live_taps(size: int, kernel: int, stride: int, padding: int, dilation: int) -> tuple[int, int]:
    """The first and last kernel tap (0-based) that reads an input position (not padding) for at least one
    output position, along one spatial axis of ``size`` input positions; (0, kernel - 1) when every tap does
    or when no output exists."""
    outputs = (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1
    live = [tap for tap in range(kernel)
            if any(0 <= o * stride - padding + tap * dilation < size for o in range(max(outputs, 0)))]
    return (live[0], live[-1]) if live else (0, kernel - 1)


def cropped_conv(conv: nn.Module, spatial: tuple[int, ...]) -> nn.Module | None:
    """A convolution equal to ``conv`` (``nn.Conv1d/2d/3d``, zero padding) on inputs of spatial size
    ``spatial`` (e.g. (H, W)) whose kernel keeps only the taps that read input, with the padding reduced to
    match; None when every tap reads input somewhere, when the crop would not keep the output's size, or
    when ``conv`` is a subclass or has hooks (its forward may use the whole kernel: weight standardisation,
    dynamic 'same' padding, weight norm), which are left as they are.

    The new module's weights are copies (same device and dtype) and need no gradient."""
    if type(conv) not in CONVS or conv.padding_mode != "zeros" or isinstance(conv.padding, str):
        return None
    if conv._forward_pre_hooks or conv._forward_hooks:
        return None
    kernel, padding = list(conv.kernel_size), list(conv.padding)
    crop = []
    for axis, size in enumerate(spatial):
        lo, hi = live_taps(size, conv.kernel_size[axis], conv.stride[axis], conv.padding[axis], conv.dilation[axis])
        new_padding = conv.padding[axis] - lo * conv.dilation[axis]
        new_kernel = hi - lo + 1
        before = (size + 2 * conv.padding[axis] - conv.dilation[axis] * (conv.kernel_size[axis] - 1) - 1)
        after = (size + 2 * new_padding - conv.dilation[axis] * (new_kernel - 1) - 1)
        if new_padding < 0 or before // conv.stride[axis] != after // conv.stride[axis]:
            return None
        kernel[axis], padding[axis] = new_kernel, new_padding
        crop.append(slice(lo, hi + 1))
    if tuple(kernel) == tuple(conv.kernel_size):
        return None
    new = type(conv)(conv.in_channels, conv.out_channels, tuple(kernel), stride=conv.stride, padding=tuple(padding),
                     dilation=conv.dilation, groups=conv.groups, bias=conv.bias is not None,
                     device=conv.weight.device, dtype=conv.weight.dtype)
    with torch.no_grad():
        new.weight.copy_(conv.weight[(slice(None), slice(None), *crop)])
        if conv.bias is not None:
            new.bias.copy_(conv.bias)
    new.requires_grad_(False)
    return new.train(conv.training)


def crop_dead_taps(front: nn.Module, example: torch.Tensor) -> list[str]:
    """Replace, in place, every convolution of ``front`` (a private copy: `private_front`) that reads
    padding with some taps for the input ``example`` (1, ...) by its cropped equivalent (``cropped_conv``);
    returns the names of the replaced modules. A module called on inputs of different sizes is left alone.

    Afterwards ``front`` computes the same function, up to rounding, on inputs of ``example``'s shape
    (any batch size), and is only valid for those."""
    replaced = []
    for name, seen in input_shapes(front, example, lambda m: isinstance(m, CONVS)).items():
        shape, conv = next(iter(seen)), front.get_submodule(name)
        spatial = conv.weight.dim() - 2   # (N, C, *spatial) or unbatched (C, *spatial)
        new = cropped_conv(conv, shape[-spatial:]) if len(seen) == 1 and shape is not None else None
        if new is not None:
            parent, _, attr = name.rpartition(".")
            setattr(front.get_submodule(parent), attr, new)
            replaced.append(name)
    return replaced


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
    """In the private traced front ``front`` (`private_front`'s copy), replace each adaptive average
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
