"""Tracing the front pass, and surrogate ReLU gradients: straight through the last ReLU, leaky elsewhere.

At a deep layer, many units of the target activation sit in a ReLU's dead zone for the current iterate,
so their error has no gradient and plain Adam stalls well above the tolerance. The fake ReLU keeps the
forward value exact (``relu(pre)``) but passes the gradient straight through to ``pre``, as if the ReLU were
the identity: a unit that should be active but is not gets pushed up. Only gradients change, never forward
values, so the loss (and hence ``rel_error``) is always the true one.

A ReLU module can run several times per forward (torchvision's ResNet blocks reuse ``self.relu``), so the
target is a (module name, call number) pair found by tracing one front pass. For the duration of a run the
targeted calls run an out-of-place ReLU with the surrogate gradient (a custom autograd function, so no
extra tensors are kept); the module's ``forward`` is restored afterwards. A MaxPool after the ReLU is fine: the forward
value is exact, and the pool routes the gradient to one element of the window, which the straight-through
gradient then moves.

The *leaky* surrogate (``relu_leak``, used by L-BFGS) gives every other ReLU call of the front the gradient
``1`` where its input is positive and ``relu_leak`` (e.g. 0.1) where it is not, again with exact forward
values. At deep cuts the objective is piecewise quadratic with very many pieces: a dead unit anywhere in the
front hides the directions that would revive it, and L-BFGS's curvature pairs jump between pieces. A small
leak lets the search see those directions, so that per-sample L-BFGS converges at deep cuts where it stalls
without it.

A hand-written network that calls ReLU as a function (``F.relu``, ``torch.relu``, ``x.relu()``) has no ReLU
modules to count or to give a surrogate gradient; ``relu_modules`` makes a private copy of the traced front
whose functional ReLU calls run ``nn.ReLU`` modules (the same values; the model is not touched).
"""

from __future__ import annotations

import contextlib
import math
import operator
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode

FUNCTIONS = {F.relu: False, torch.relu: False, torch.relu_: True}   # call_function target -> in place
METHODS = {"relu": False, "relu_": True}                             # call_method target -> in place
# every ReLU function a front may call, as torch's function modes see them (relu.trace_front counts them)
RELU_FUNCTIONS = frozenset([*FUNCTIONS, torch.Tensor.relu, torch.Tensor.relu_])
PREFIX = "iri_relu_"   # names of the added modules: iri_relu_0, iri_relu_1, ... (in call order)


MAX_POOLS = (nn.MaxPool1d, nn.MaxPool2d, nn.MaxPool3d, nn.AdaptiveMaxPool1d, nn.AdaptiveMaxPool2d,
             nn.AdaptiveMaxPool3d)
AVG_POOLS = (nn.AvgPool1d, nn.AvgPool2d, nn.AvgPool3d, nn.AdaptiveAvgPool1d, nn.AdaptiveAvgPool2d,
             nn.AdaptiveAvgPool3d)
# leaves that may follow the last ReLU while the cut still "ends at" it: they pick, copy, reshape or pass on
# its values (eval-mode dropout is the identity), so each unit of the representation is one unit of that ReLU
# and the straight-through gradient pushes the right one up. Average pools count only where they copy (one
# value per channel in: ResNet's avgpool at 32x32, VGG's at 32x32 after its last pool); where they average,
# as a conv, BatchNorm or linear layer mixes, the straight-through gradient stalls the search (ResNet-18
# avgpool at 64x64, averaging 2x2: median 0.029 and nothing converged with it, 147 steps without)
# activations other than ReLU: a front that runs only these gets the "smooth" preset (timm's ViTs: GELU,
# EfficientNets: SiLU, MobileNets: ReLU6 / Hardswish)
OTHER_ACTIVATIONS = (nn.GELU, nn.SiLU, nn.ReLU6, nn.Hardswish, nn.Mish, nn.ELU, nn.SELU, nn.CELU, nn.Softplus,
                     nn.Tanh, nn.Sigmoid, nn.Hardtanh, nn.LeakyReLU, nn.PReLU)
PASS_THROUGH = (*MAX_POOLS, nn.Flatten, nn.Identity, nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d)


@dataclass
class FrontTrace:
    """What one front pass ran: module names entered (in order) and ReLU calls as (name, call number)."""

    modules: list[str] = field(default_factory=list)
    relu_calls: list[tuple[str, int]] = field(default_factory=list)
    events: list[str] = field(default_factory=list)   # "relu" / "maxpool", in call order
    input_values: int = 0    # values per sample going into the front (C*H*W of the seeds)
    output_values: int = 0   # values per sample of the representation at the cut
    input_height: int = 0    # rows of the seeds (dim 2 of (N, C, H, W)); 0 without spatial dims
    output_height: int = 0   # rows of the representation at the cut; 0 without spatial dims
    last_leaf: str = ""      # class name of the last leaf module that finished (the cut's own last step)
    batchnorm_calls: int = 0   # BatchNorm layers run (VGG-16-BN: 13 at its last pool; torchvision's vgg16: 0)
    other_activation_calls: int = 0   # calls of OTHER_ACTIVATIONS modules (GELU, SiLU, ...)
    functional_relu_calls: int = 0   # ReLU calls made as functions (F.relu, x.relu_()), not by nn.ReLU modules
    tail_values: int = 0     # fewest values per sample from the last ReLU call's output through the pass-through
    #                          leaves after it (0: no ReLU call, or a conv / BatchNorm / linear layer after it)

    @property
    def stride(self) -> int:
        """How many times fewer rows the cut has than the input, rounded to a power of two (8 at ResNet
        ``layer2`` at 32x32, 28x28 or 227x227); 0 when unknown or when the cut has more rows."""
        if not (self.input_height and self.output_height) or self.output_height > self.input_height:
            return 0
        return 2 ** round(math.log2(self.input_height / self.output_height))

    @property
    def ends_at_maxpool(self) -> bool:
        """True when the last module that ran before the cut is a max-pool (VGG's pools, SmallCNN blocks)."""
        return self.last_leaf in {cls.__name__ for cls in MAX_POOLS}

    @property
    def relus_after_last_maxpool(self) -> int:
        """ReLU calls after the front's last max-pool (all of them when it has none)."""
        tail = self.events[::-1]
        return tail.index("maxpool") if "maxpool" in tail else len(tail)

    @property
    def ends_at_relu(self) -> bool:
        """True when the representation is the last ReLU call's output, up to max-pools, copying average
        pools, flattening, identity or dropout after it (VGG's pools, ResNet blocks, ``avgpool`` at 32x32);
        False at a cut after a conv, BatchNorm, linear layer or averaging pool (``bn2``, ``conv1``, ``fc``,
        ResNet's ``avgpool`` at 224x224)."""
        return bool(self.relu_calls) and self.tail_values > 0

    @property
    def cut_values(self) -> int:
        """Values per sample the representation can hold: ``output_values``, or fewer where a pass-through
        tail after the last ReLU repeats values (VGG's ``avgpool`` at 32x32 copies the last pool's 512 values
        into 7x7 = 25,088); 0 when unknown."""
        if self.ends_at_relu and self.output_values:
            return min(self.output_values, self.tail_values)
        return self.output_values

    @property
    def last_relu(self) -> tuple[str, int] | None:
        """The last ReLU call before the cut, or None when the front has no ``nn.ReLU`` module."""
        return self.relu_calls[-1] if self.relu_calls else None


class _ReluFunctionCounter(TorchFunctionMode):
    """Counts calls of the ReLU functions (``RELU_FUNCTIONS``) made while active and outside every
    ``nn.ReLU`` module (``inside`` > 0 while one runs: its own ``F.relu`` is not a functional call)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0
        self.inside = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001 - torch's protocol
        if func in RELU_FUNCTIONS and not self.inside:
            self.calls += 1
        return func(*args, **(kwargs or {}))


def trace_front(model: nn.Module, front: Callable[[torch.Tensor], torch.Tensor], example: torch.Tensor) -> FrontTrace:
    """Run ``front(example)`` once (no grad) recording which modules ran and every ReLU call."""
    trace = FrontTrace()
    counts: dict[str, int] = {}
    counter = _ReluFunctionCounter()
    handles = []
    for name, module in model.named_modules():
        def pre(_m: nn.Module, _inputs: object, name: str = name) -> None:
            trace.modules.append(name)

        handles.append(module.register_forward_pre_hook(pre))
        if not any(True for _ in module.children()):
            def leaf(m: nn.Module, inputs: tuple, out: object) -> None:
                trace.last_leaf = type(m).__name__
                if not isinstance(m, nn.ReLU):   # (a ReLU call sets tail_values itself, in post below)
                    passing = _passes_through(m, inputs) and trace.tail_values
                    trace.tail_values = min(trace.tail_values, _values(out)) if passing else 0

            handles.append(module.register_forward_hook(leaf))
        if isinstance(module, nn.ReLU):
            def enter(*_: object) -> None:
                counter.inside += 1

            def leave(*_: object) -> None:
                counter.inside -= 1

            handles += [module.register_forward_pre_hook(enter), module.register_forward_hook(leave)]

            def post(_m: nn.Module, _inputs: object, out: object, name: str = name) -> None:
                counts[name] = counts.get(name, 0) + 1
                trace.relu_calls.append((name, counts[name]))
                trace.events.append("relu")
                trace.tail_values = _values(out)

            handles.append(module.register_forward_hook(post, prepend=True))
        elif isinstance(module, OTHER_ACTIVATIONS):
            def other(*_: object) -> None:
                trace.other_activation_calls += 1

            handles.append(module.register_forward_hook(other))
        elif isinstance(module, MAX_POOLS):
            handles.append(module.register_forward_hook(lambda *_: trace.events.append("maxpool")))
        elif isinstance(module, nn.modules.batchnorm._BatchNorm):
            def norm(*_: object) -> None:
                trace.batchnorm_calls += 1

            handles.append(module.register_forward_hook(norm))
    try:
        with torch.no_grad(), counter:
            out = front(example)
    finally:
        for h in handles:
            h.remove()
    trace.functional_relu_calls = counter.calls
    trace.input_values = int(example[0].numel())
    trace.output_values = _values(out)
    spatial = example.dim() == 4 and isinstance(out, torch.Tensor) and out.dim() == 4
    trace.input_height, trace.output_height = (int(example.shape[2]), int(out.shape[2])) if spatial else (0, 0)
    return trace


def _passes_through(module: nn.Module, inputs: tuple) -> bool:
    """Whether ``module`` hands on each value of its input unmixed (``PASS_THROUGH``, or an average pool
    whose input has one value per channel, so that it copies)."""
    if isinstance(module, AVG_POOLS):
        x = inputs[0] if inputs else None
        return isinstance(x, torch.Tensor) and x.dim() >= 3 and x[0, 0].numel() == 1
    return isinstance(module, PASS_THROUGH)


def _values(out: object) -> int:
    """Values per sample of a module's output (0 when it is not a batched tensor)."""
    return int(out[0].numel()) if isinstance(out, torch.Tensor) and out.dim() > 0 else 0


def front_tensors(model: nn.Module, trace: FrontTrace) -> list[tuple[str, torch.Tensor]]:
    """(name, tensor) for every parameter and buffer the front can read: the root's own, and those of
    every module that ran in the traced front pass. Used for the cache key."""
    ran = set(trace.modules) | {""}
    out = []
    for mname, module in model.named_modules():
        if mname not in ran:
            continue
        prefix = mname + "." if mname else ""
        for pname, p in module.named_parameters(recurse=False):
            out.append((prefix + pname, p))
        for bname, b in module.named_buffers(recurse=False):
            out.append((prefix + bname, b))
    return out


def surrogate_slopes(trace: FrontTrace, fake_relu: str, relu_leak: float) -> dict[tuple[str, int], float]:
    """Gradient slope below zero for each ReLU call to change: (name, call) -> 1.0 (straight through) or
    ``relu_leak``. ``fake_relu``: "none" / "last" (straight through at no call / the last call);
    ``relu_leak`` > 0 gives every call not straight through that leak. Empty: true gradients everywhere."""
    straight = {"none": [], "last": trace.relu_calls[-1:]}[fake_relu]
    slopes = {call: float(relu_leak) for call in trace.relu_calls} if relu_leak > 0 else {}
    slopes.update({call: 1.0 for call in straight})
    return slopes


@contextlib.contextmanager
def straight_through_relu(model: nn.Module, targets: Iterable[tuple[str, int]] | tuple[str, int] | None
                          | dict[tuple[str, int], float]) -> Iterator[Callable[[], None]]:
    """Change the gradient of the given ReLU calls (forward values unchanged).

    ``targets``: (module name, call number) pairs (call numbers start at 1) or a single pair, each made
    straight through (gradient 1 everywhere); or a dict pair -> slope, giving the gradient 1 where the
    ReLU's input is positive and ``slope`` where it is not (1.0: straight through, e.g. 0.1: leaky); or None
    (nothing changes). Yields ``reset()``, which must be called before every forward pass (it restarts
    the call counts). The ReLU modules' ``forward`` is replaced for the duration (a targeted call runs an
    out-of-place ReLU with that gradient, every other call the module's own forward) and restored on exit,
    leaving the model as it was.
    """
    if targets is None or (isinstance(targets, dict) and not targets):
        yield lambda: None
        return
    if isinstance(targets, tuple) and len(targets) == 2 and isinstance(targets[0], str):
        targets = [targets]
    slopes = dict(targets) if isinstance(targets, dict) else {tuple(t): 1.0 for t in targets}
    calls: dict[str, dict[int, float]] = {}
    for (name, call), slope in slopes.items():
        calls.setdefault(name, {})[int(call)] = float(slope)
    modules = dict(model.named_modules())
    counts: dict[str, int] = {}

    def reset() -> None:
        counts.clear()

    patched = []
    for name, wanted in calls.items():
        module = modules[name]
        own = module.__dict__.get("forward")      # an instance-level forward the user set, restored on exit
        original = module.forward

        def forward(x: torch.Tensor, name: str = name, wanted: dict = wanted, original: Callable = original
                    ) -> torch.Tensor:
            counts[name] = counts.get(name, 0) + 1
            slope = wanted.get(counts[name])
            if slope is None or not torch.is_grad_enabled() or not x.requires_grad:
                return original(x)
            return _SurrogateReLU.apply(x, slope)

        module.forward = forward
        patched.append((module, own))
    try:
        yield reset
    finally:
        for module, own in patched:
            if own is None:
                del module.forward
            else:
                module.forward = own


class _SurrogateReLU(torch.autograd.Function):
    """``relu(x)`` (out of place) whose gradient is 1 where ``x > 0`` and ``slope`` elsewhere."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, slope: float) -> torch.Tensor:  # noqa: ANN001 - autograd's ctx
        y = torch.relu(x)
        ctx.slope = slope
        if slope != 1.0:
            ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:  # noqa: ANN001 - autograd's ctx
        if ctx.slope == 1.0:    # straight through
            return grad, None
        (y,) = ctx.saved_tensors
        return torch.ops.aten.leaky_relu_backward(grad, y, ctx.slope, True), None   # one fused kernel


def functional_relu(node: torch.fx.Node) -> bool | None:
    """For an fx node: None when it is not a functional ReLU call, else whether it works in place."""
    if node.op == "call_function" and node.target in FUNCTIONS:
        inplace = node.kwargs.get("inplace", node.args[1] if len(node.args) > 1 else False)
        return bool(inplace) or FUNCTIONS[node.target]
    if node.op == "call_method" and node.target in METHODS:
        return METHODS[node.target]
    return None


def relu_modules(graph: torch.fx.GraphModule | None) -> torch.fx.GraphModule | None:
    """A copy of the traced front ``graph``, traced again through its blocks, whose functional ReLU calls
    call ``nn.ReLU`` modules named ``iri_relu_<k>`` (k = 0, 1, ... in call order); None when ``graph`` is
    None, cannot be traced through, or has no such call.

    The copy computes the same function on a batch (N, ...) and shares the model's modules."""
    if graph is None:
        return None
    try:   # through the blocks the cut's trace kept opaque, down to torch.nn's own modules (as front.private_front does)
        graph = torch.fx.symbolic_trace(graph)
    except Exception:  # noqa: BLE001 - an optional rewrite: without it the front runs as it is
        return None
    if not any(functional_relu(n) is not None for n in graph.graph.nodes):
        return None
    new = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    added: dict[str, nn.Module] = {}
    for node in graph.graph.nodes:
        inplace = functional_relu(node)
        if inplace is None:
            env[node] = new.node_copy(node, lambda n: env[n])
            continue
        name = f"{PREFIX}{len(added)}"
        while hasattr(graph, name):   # a model attribute of that name: keep clear of it
            name = "_" + name
        added[name] = nn.ReLU(inplace=inplace)
        env[node] = new.call_module(name, (env[node.args[0]],))
    owners = {n.target: added[n.target] if n.target in added else operator.attrgetter(n.target)(graph)
              for n in new.nodes if n.op in ("call_module", "get_attr")}
    return torch.fx.GraphModule(owners, new).eval()
