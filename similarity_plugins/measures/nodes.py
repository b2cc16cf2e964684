"""Each representational measure split into the work on one representation and the work on a pair, for grids.

In a grid every node (one model's activations at one layer) is in many cells. What a measure derives from one
side alone (a whitened basis, an RDM, neighbour lists, centred rows) is built once per node and reused by every
cell that node is in; each cell then does only the pair's part. `NODE_FORMS` maps a measure's name in
[`similarity_plugins.measures`][measures] to its `NodeForm`; ``form.combine(form.build(x, "front", kw),
form.build(y, "end", kw), kw)`` equals ``measure(x, y, **kw, details=True)`` to float64 rounding.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Hashable

from .cca import cca_from_nodes, cca_node, pwcca_from_nodes, svcca_from_nodes
from .cknna import cknna_from_nodes, cknna_node
from .common import Measured
from .knn import knn_node, mutual_knn_from_nodes
from .procrustes import procrustes_from_nodes, procrustes_node
from .rsa import rsa_from_vectors, rsa_vector

_NAME = {"front": "X", "end": "Y"}  # the argument each role has in the measures' errors


@dataclass(frozen=True)
class NodeForm:
    """A measure as per-node work and per-pair work.

    ``build(x, role, kw)``: the node's quantity from its (n, d) activations, ``role`` ``"front"`` or ``"end"``;
    ``key(role, kw)``: what the quantity depends on besides the node (equal keys share one quantity);
    ``combine(a, b, kw)``: the pair's [`Measured`][common.Measured] from the front's and the end's quantities.
    ``kw`` holds the measure's keyword arguments.
    """

    build: Callable[[Any, str, dict], Any]
    key: Callable[[str, dict], Hashable]
    combine: Callable[[Any, Any, dict], Measured]


def _rsa_combine(a, b, kw: dict) -> Measured:
    n = int(round((1 + (1 + 8 * a.shape[0]) ** 0.5) / 2))
    score = rsa_from_vectors(a, b, kw["compare"])
    return Measured(score, {"n": n, "pairs": int(a.shape[0]), "rdm": kw["rdm"], "compare": kw["compare"]})


NODE_FORMS: dict[str, NodeForm] = {
    "procrustes": NodeForm(lambda x, role, kw: procrustes_node(x, _NAME[role]),
                           lambda role, kw: ("procrustes",),
                           lambda a, b, kw: procrustes_from_nodes(a, b, details=True)),
    "cca": NodeForm(lambda x, role, kw: cca_node(x, _NAME[role], "CCA"),
                    lambda role, kw: ("whitened", True),
                    lambda a, b, kw: cca_from_nodes(a, b, details=True)),
    "svcca": NodeForm(lambda x, role, kw: cca_node(x, _NAME[role], "SVCCA"),
                      lambda role, kw: ("whitened", True),
                      lambda a, b, kw: svcca_from_nodes(a, b, kw["variance"], kw["dims"], details=True)),
    "pwcca": NodeForm(lambda x, role, kw: cca_node(x, _NAME[role], "PWCCA", compress=role == "end"),
                      lambda role, kw: ("whitened", role == "end"),  # the front keeps its neurons (the weights)
                      lambda a, b, kw: pwcca_from_nodes(a, b, details=True)),
    "rsa": NodeForm(lambda x, role, kw: rsa_vector(x, kw["rdm"], kw["compare"], name=_NAME[role]),
                    lambda role, kw: ("rsa", kw["rdm"], kw["compare"]),
                    _rsa_combine),
    "mutual_knn": NodeForm(lambda x, role, kw: knn_node(x, kw["topk"], _NAME[role]),
                           lambda role, kw: ("knn", kw["topk"]),
                           lambda a, b, kw: mutual_knn_from_nodes(a, b, details=True)),
    "cknna": NodeForm(lambda x, role, kw: cknna_node(x, kw["topk"], _NAME[role]),
                      lambda role, kw: ("cknna", kw["topk"]),
                      lambda a, b, kw: cknna_from_nodes(a, b, details=True)),
}
