"""The tolerance for float32 values that two different computation paths produce.

A float32 operation rounds to about 6e-8 of its value; two paths to the same quantity (a batched matrix product
against a per-token one, a 1x1 convolution against the same map as a linear layer, a fused loss against its
formula, a kernel against its closed form) sum in another order or call another kernel, and agree only to a few
roundings times the length of their sums. For the O(1) values and sums of tens of terms in these tests that is
well under 1e-6; ``rtol=1e-5, atol=1e-6`` allows a hundred roundings and still fails on any real difference
(a wrong index, a missing term, a wrong scale). Values that are the same computation repeated (same code, same
inputs, same process) are compared with ``torch.equal`` or ``==`` instead.
"""

from __future__ import annotations

FLOAT32_PATHS = {"rtol": 1e-5, "atol": 1e-6}

#: How far a twin pair's HLM score may sit from 1. HLM trains the stitch against the ground-truth labels, not
#: against the end model's outputs, so a stitch between a model and its copy can fix or break a few borderline
#: test samples (how many depends on the CPU's rounding in training); the label-free objectives (SLM, DM, FuLA)
#: keep the identity and give exactly 1.
HLM_TWIN_SLACK = 0.02


def twin_stitch_score_ok(metric: str, score: float | None) -> bool:
    """Whether ``score`` is what a stitch between a model and its copy must give for ``metric``."""
    if score is None:
        return False
    if metric == "stitch-hlm":
        return abs(score - 1.0) <= HLM_TWIN_SLACK
    return abs(score - 1.0) <= 1e-6
