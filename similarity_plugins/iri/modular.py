"""Functional ReLUs as modules: a private copy of the traced front in which ``F.relu``, ``torch.relu`` and
``x.relu()`` (and their in-place forms) call ``nn.ReLU`` modules.

The IRI optimiser finds ReLU calls by their modules (``relu.py``): it counts them to choose the optimiser and
schedule (``optimizer="auto"``), and it changes the gradient of those calls (the straight-through and leaky
surrogates). A hand-written network that calls ReLU as a function has no such modules, so without this copy
its deep cuts would run Adam's defaults with true gradients, as if the front were shallow (and a front that
mixes modules and functions would be counted short). ``relu.trace_front`` counts the functional calls, and
``generate_iris`` makes this copy wherever there is one. The copy computes
the same values (``nn.ReLU`` runs ``torch.relu``); it shares every other module with the model and adds its
ReLU modules only to itself, so the model is not touched.
"""

from __future__ import annotations

import operator

import torch
import torch.nn.functional as F
from torch import nn

FUNCTIONS = {F.relu: False, torch.relu: False, torch.relu_: True}   # call_function target -> in place
METHODS = {"relu": False, "relu_": True}                             # call_method target -> in place
# every ReLU function a front may call, as torch's function modes see them (relu.trace_front counts them)
RELU_FUNCTIONS = frozenset([*FUNCTIONS, torch.Tensor.relu, torch.Tensor.relu_])
PREFIX = "iri_relu_"   # names of the added modules: iri_relu_0, iri_relu_1, ... (in call order)


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
    try:   # through the blocks the cut's trace kept opaque, down to torch.nn's own modules (as fold.py does)
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
