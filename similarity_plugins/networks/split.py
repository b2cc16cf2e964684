"""Split a network at a named layer: the front ``f_{<=i}``, the end ``g_{>j}`` and native activations.

A *layer* is a module name from ``model.named_modules()``; its *activation* is that module's output.
``layer_lists.layers(model)`` lists the canonical stitchable layers of a model in forward order. Any other
module name also works as a cut when the computation after it depends on nothing computed
before it except its output (a *clean cut*: ``layer1`` of a ResNet is one, ``layer1.0.conv1`` is not,
because the residual connection skips around it).

The split is made with ``torch.fx``: the model is traced once per cut with the cut and the later
stitchable layers kept as opaque calls, so the front runs only the layers up to the cut and the end
runs only the layers after it. Models that ``torch.fx`` cannot trace still get a front (a forward
hook that stops the forward pass at the cut); their end is then unavailable and says why.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Sequence

import torch
import torch.fx
from torch import nn

from .layer_calls import AmbiguousLayer, called_often, count_calls, front_by_hook
from .layer_lists import check_layer, layers
from .model_state import as_model_input, frozen, model_dtype

# -------------------------------------------------------------------------------------- fx tracing


class _CutTracer(torch.fx.Tracer):
    """Traces only through modules that contain a target; targets and everything else stay opaque."""

    def __init__(self, targets: set[str]) -> None:
        super().__init__()
        self.targets = targets
        self.ancestors = {t.rsplit(".", i)[0] for t in targets for i in range(1, t.count(".") + 1)}

    def is_leaf_module(self, m: nn.Module, module_qualified_name: str) -> bool:
        if module_qualified_name in self.targets:
            return True
        if module_qualified_name == "" or module_qualified_name in self.ancestors:
            return False
        return True


def _concrete_defaults(model: nn.Module) -> dict:
    """Keyword arguments of ``forward`` after the first, frozen at their defaults for tracing."""
    params = list(inspect.signature(model.forward).parameters.values())
    concrete = {}
    for p in params[1:]:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.default is not p.empty:
            concrete[p.name] = p.default
    return concrete


def _nested(a: str, b: str) -> bool:
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


@dataclass
class _Traced:
    graph: torch.fx.Graph
    order: list[str]  # opaque targets in call order


def pick_logits(output: Any) -> Any:
    """The logits in a model's output: the output itself, the first item of a tuple or list (the convention of
    Hugging Face and torchvision's auxiliary heads), the ``"logits"`` entry of a dict (or its only entry, or the
    ``logits`` attribute of a ModelOutput-like object). Works alike on values and on torch.fx nodes; what it cannot
    find is returned as it is (and refused where a tensor is needed, naming the model's output type)."""
    if isinstance(output, (tuple, list)) and output:
        return output[0]
    if isinstance(output, dict):
        if "logits" in output:
            return output["logits"]
        if len(output) == 1:
            return next(iter(output.values()))
    logits = getattr(output, "logits", None) if not isinstance(output, (torch.Tensor, torch.fx.Node)) else None
    return output if logits is None else logits


def _trace(model: nn.Module, targets: set[str]) -> _Traced:
    tracer = _CutTracer(targets)
    graph = tracer.trace(model, concrete_args=_concrete_defaults(model) or None)
    output = next(n for n in graph.nodes if n.op == "output")
    logits = pick_logits(output.args[0])
    if logits is not output.args[0] and isinstance(logits, torch.fx.Node):
        # a tuple or dict output: keep the logits only, and drop what only the other entries needed (which may
        # read values from before a cut, such as a tuple of every hidden state)
        output.args = (logits,)
        owner = torch.fx.GraphModule(model, graph)
        eliminate_dead_code(owner)
        graph = owner.graph
    elif not isinstance(logits, torch.fx.Node):
        kind = "dict" if isinstance(logits, dict) else "tuple" if isinstance(logits, tuple) else type(logits).__name__
        raise TypeError(f"{type(model).__name__} returns a {kind} from which no logits tensor could be "
                        "read (the package takes a tensor, the first item of a tuple or list, or the 'logits' entry "
                        "of a dict); wrap the model so that forward returns the logits")
    order = [n.target for n in graph.nodes if n.op == "call_module" and n.target in targets]
    return _Traced(graph, order)


def _build_module(model: nn.Module, graph: torch.fx.Graph) -> torch.fx.GraphModule:
    graph.lint()
    return torch.fx.GraphModule(model, graph)


# ------------------------------------------------------------------------------------- the split


def _in_place(node: torch.fx.Node, owner: torch.fx.GraphModule) -> bool:
    """True for a call that writes into its input: ``x.relu_()``, ``F.relu(x, inplace=True)`` or a module
    with ``inplace=True`` (``nn.ReLU(inplace=True)``). Its result may be unused while its effect is not."""
    if node.op == "call_module":
        return bool(getattr(owner.get_submodule(node.target), "inplace", False))
    if node.op not in ("call_method", "call_function"):
        return False
    name = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", "")
    if name.endswith("_") and not name.startswith("_"):
        return True
    try:
        bound = inspect.signature(node.target).bind(*node.args, **node.kwargs) if callable(node.target) else None
    except (TypeError, ValueError):
        bound = None
    return bool(node.kwargs.get("inplace", False) or (bound is not None and bound.arguments.get("inplace")))


def eliminate_dead_code(graph_module: torch.fx.GraphModule) -> None:
    """Drop the nodes of ``graph_module`` that nothing live uses, and recompile it.

    Impure nodes stay; so does an in-place call whose result is unused (``x.relu_()`` on a line of its own)
    while a live node reads the tensor it wrote after it. An in-place call on a dead branch (the main
    branch of a block before a cut on its shortcut) goes with the branch."""
    nodes = list(graph_module.graph.nodes)
    order = {node: i for i, node in enumerate(nodes)}
    live: set[torch.fx.Node] = set()
    for node in reversed(nodes):   # a node's users come after it, so their liveness is known here
        written = node.args[0] if node.args and isinstance(node.args[0], torch.fx.Node) else None
        if (node.is_impure() or any(user in live for user in node.users)
                or (written is not None and _in_place(node, graph_module)
                    and any(user in live and order[user] > order[node] for user in written.users))):
            live.add(node)
    for node in reversed(nodes):
        if node not in live:
            graph_module.graph.erase_node(node)
    graph_module.recompile()


class SplitNetwork:
    """A model cut after ``layer``: ``front(x)``, ``end(h)`` and ``native(x)``.

    ``taps`` are the stitchable layers after the cut (up to the penultimate one) whose activations
    ``end_with_taps`` and ``native`` return too; FuLA compares them. By default they are the
    canonical ``layers(model)`` after the cut. All calls run the donor under [`frozen`][frozen], so the
    model's flags are restored afterwards and BatchNorm statistics never change; gradients flow to
    the inputs (for IRIs and stitches) but never into the model's parameters.
    """

    def __init__(self, model: nn.Module, layer: str, taps: Sequence[str] | None = None) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"expected a torch.nn.Module, got {type(model).__name__}")
        check_layer(model, layer)
        self.model = model
        self.layer = layer
        canonical = [n for n in layers(model) if not _nested(n, layer)]
        self._trace_error: str | None = None
        self._calls_counted = False  # the hook fallback counts the layer's calls on its first batch
        self._front_gm = self._end_gm = self._native_gm = None
        try:
            traced = _trace(model, set(canonical) | {layer} | set(taps or ()))
        except Exception as exc:  # noqa: BLE001 - any tracing failure falls back to hooks
            self._trace_error = f"{type(exc).__name__}: {exc}"
            self.taps: tuple[str, ...] = tuple(taps or ())
            return
        calls = [n for n in traced.graph.nodes if n.op == "call_module" and n.target == layer]
        if len(calls) > 1:
            raise AmbiguousLayer(called_often(model, layer, len(calls), [n for n in layers(model) if n != layer]))
        if len(calls) != 1:
            self._trace_error = f"layer {layer!r} is called {len(calls)} times in the forward pass (need exactly once)"
            self.taps = tuple(taps or ())
            return
        after = traced.order[traced.order.index(layer) + 1 :]
        if taps is None:
            taps = [t for t in after if t in canonical]
        else:
            for t in taps:
                check_layer(model, t)
                if t not in after:
                    raise ValueError(f"tap layer {t!r} does not come after the cut {layer!r}; later layers: {', '.join(after)}")
        self.taps = tuple(taps)
        self._build(traced.graph, calls[0])

    # -- construction ------------------------------------------------------------------------------

    def _build(self, graph: torch.fx.Graph, cut: torch.fx.Node) -> None:
        nodes = list(graph.nodes)
        cut_index = nodes.index(cut)
        before = set(nodes[:cut_index])
        tap_nodes = {n.target: n for n in nodes[cut_index + 1 :] if n.op == "call_module" and n.target in self.taps}
        output = next(n for n in nodes if n.op == "output")

        # front: everything up to the cut, returning the cut's output (defined at any cut, clean or not:
        # IRIs inside a residual block need only this).
        front = torch.fx.Graph()
        env: dict[torch.fx.Node, torch.fx.Node] = {}
        for node in nodes[: cut_index + 1]:
            env[node] = front.node_copy(node, lambda n: env[n])
        front.output(env[cut])
        self._front_gm = _build_module(self.model, front)
        eliminate_dead_code(self._front_gm)   # e.g. a skip branch traced before the cut

        self._trace_error = self._unclean_cut(nodes[cut_index + 1 :], before)
        if self._trace_error:
            return

        # An in-place op after the cut or a tap (``ReLU(inplace=True)``, the torchvision pattern) would overwrite
        # the activation as produced; where one follows, the graphs return (and the end reads) a copy taken at
        # the point of production.
        writes_later = _writes_after(self.model, nodes)
        kept = {cut, *tap_nodes.values()}

        # end: a placeholder for the (stitched) activation, then everything after the cut. The caller's tensor
        # is never written: the end starts from a copy of it when an in-place op follows.
        end = torch.fx.Graph()
        h = end.placeholder("h")
        env = {cut: end.call_method("clone", (h,)) if writes_later[cut] else h}
        outs: dict[torch.fx.Node, torch.fx.Node] = {}
        for node in nodes[cut_index + 1 :]:
            if node.op == "output":
                break
            env[node] = end.node_copy(node, lambda n: env[n] if n in env else _copy_attr(end, env, n))
            outs[node] = _keep(end, env[node], node in kept and writes_later[node])
        result = torch.fx.map_arg(output.args[0], lambda n: env[n])
        end.output((result, tuple(outs[tap_nodes[t]] for t in self.taps)))

        # native: the whole forward, returning the cut, the logits and the taps.
        native = torch.fx.Graph()
        env = {}
        for node in nodes:
            if node.op == "output":
                break
            env[node] = native.node_copy(node, lambda n: env[n])
            outs[node] = _keep(native, env[node], node in kept and writes_later[node])
        logits = torch.fx.map_arg(output.args[0], lambda n: env[n])
        native.output((outs[cut], logits, tuple(outs[tap_nodes[t]] for t in self.taps)))

        self._end_gm = _build_module(self.model, end)
        self._native_gm = _build_module(self.model, native)

    def _unclean_cut(self, after: list[torch.fx.Node], before: set[torch.fx.Node]) -> str | None:
        """Why the cut is not clean (a node ``after`` it reads a value computed ``before`` it, parameters
        excepted), or None for a clean cut."""
        for node in after:
            for inp in node.all_input_nodes:
                if inp in before and inp.op != "get_attr":
                    return (f"layer {self.layer!r} is not a clean cut: the computation after it also reads "
                            f"{inp.name!r}, computed before it (a skip connection around it); "
                            f"cut at a block output instead, such as one of: {', '.join(layers(self.model))}")
        return None

    # -- running -----------------------------------------------------------------------------------

    def _check_tensor(self, value: object, batch: int | None = None) -> torch.Tensor:
        others = ", ".join(n for n in layers(self.model) if n != self.layer)
        if not isinstance(value, torch.Tensor):
            raise TypeError(
                f"layer {self.layer!r} outputs a {type(value).__name__}, not a tensor; "
                f"choose a layer whose output is a tensor, such as: {others}"
            )
        if batch is not None and (value.dim() == 0 or value.shape[0] != batch):
            raise ValueError(
                f"layer {self.layer!r} outputs shape {tuple(value.shape)} for a batch of {batch} inputs: its first "
                f"dimension is not the batch (a sequence-first layer?), so its rows would not be samples; choose a "
                f"layer whose output is (batch, ...), such as: {others}"
            )
        return value

    def front(self, x: torch.Tensor) -> torch.Tensor:
        """Activation ``f_{<=i}(x)`` at the cut, running only the layers up to it.

        ``x``: a batch of inputs (N, ...) on the model's device (floating inputs are cast to the model's dtype).
        Returns (N, C, H, W) for CNNs,
        (N, T, D) for transformers. Differentiable with respect to ``x``.
        """
        batch = len(x) if x.dim() else None
        x = as_model_input(x, model_dtype(self.model))
        with frozen(self.model):
            if self._front_gm is not None:
                return self._check_tensor(self._front_gm(x), batch)
            if not self._calls_counted:
                calls = count_calls(self.model, self.layer, x)
                if calls > 1:
                    raise AmbiguousLayer(called_often(self.model, self.layer, calls,
                                                     [n for n in layers(self.model) if n != self.layer]))
                self._calls_counted = True
            return self._check_tensor(front_by_hook(self.model, self.layer, x), batch)

    @property
    def front_graph(self) -> torch.fx.GraphModule | None:
        """The traced front (runs the layers up to the cut; shares the model's modules; also at a cut inside a
        residual block, where ``end`` is not available), or None when the model is not traceable by torch.fx
        (or calls the layer more than once) and ``front`` runs the model with a hook instead."""
        return self._front_gm

    def _require_end(self) -> torch.fx.GraphModule:
        if self._end_gm is None:
            raise RuntimeError(
                f"cannot run {type(self.model).__name__} from layer {self.layer!r} on: {self._trace_error}. "
                "Stitching needs the end of the network; choose another layer, or make the model "
                "traceable by torch.fx."
            )
        return self._end_gm

    def end(self, h: torch.Tensor) -> torch.Tensor:
        """Logits ``g_{>j}(h)`` from an activation ``h`` at the cut, without recomputing earlier layers.

        ``h`` in any floating dtype: it is cast to the model's (a float32 stitch into a float16 end)."""
        return self.end_with_taps(h)[0]

    def end_with_taps(self, h: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        """Logits and the activations at ``self.taps`` when the end runs on ``h`` (the stitched path)."""
        gm = self._require_end()
        with frozen(self.model):
            logits, taps = gm(as_model_input(h, model_dtype(self.model)))
        return self._check_logits(logits), tuple(taps)

    def native(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, ...]]:
        """The model's own path on ``x``: (activation at the cut, logits, activations at ``taps``)."""
        if self._native_gm is None:
            self._require_end()
        with frozen(self.model):
            act, logits, taps = self._native_gm(as_model_input(x, model_dtype(self.model)))
        return self._check_tensor(act), self._check_logits(logits), tuple(taps)

    def _check_logits(self, logits: object) -> torch.Tensor:
        if not isinstance(logits, torch.Tensor):
            raise TypeError(f"{type(self.model).__name__} returns a {type(logits).__name__} from which no logits tensor "
                            "could be read (the package takes a tensor, the first item of a tuple or list, or the "
                            "'logits' entry of a dict); wrap the model so that forward returns the logits")
        return logits

    @property
    def can_end(self) -> bool:
        """Whether ``end`` is available (the model traced and the layer is a clean cut)."""
        return self._end_gm is not None

    def __repr__(self) -> str:
        return f"SplitNetwork({type(self.model).__name__}, layer={self.layer!r}, taps={list(self.taps)})"


def _writes_after(model: nn.Module, nodes: list[torch.fx.Node]) -> dict[torch.fx.Node, bool]:
    """For each node of a traced forward, whether an in-place op runs after it (which may write into its value,
    directly or through a view)."""
    owner = torch.fx.GraphModule(model, nodes[0].graph)
    later, seen = {}, False
    for node in reversed(nodes):
        later[node] = seen
        seen = seen or _in_place(node, owner)
    return later


def _keep(graph: torch.fx.Graph, value: torch.fx.Node, copy_it: bool) -> torch.fx.Node:
    """``value`` itself, or a copy of it taken now (before a later in-place op can overwrite it)."""
    return graph.call_method("clone", (value,)) if copy_it else value


def _copy_attr(graph: torch.fx.Graph, env: dict, node: torch.fx.Node) -> torch.fx.Node:
    """Copy a parameter/buffer access (``get_attr``) from before the cut into the end graph."""
    if node.op != "get_attr":
        raise RuntimeError(f"internal error: value {node.name!r} from before the cut used after it")
    env[node] = graph.node_copy(node)
    return env[node]
