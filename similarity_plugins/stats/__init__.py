"""Statistics shared by the measures and the runner: permutation nulls and their p-values (`permutation`), and
multiple-comparison corrections of p-values (`pvalues`).

It sits above ``utils`` and below every measure family and the runner (``tests/test_layers.py``): the CKA
and measure permutation tests draw and summarise their nulls here, and grids correct their p-values here.
"""

from __future__ import annotations

from .permutation import PermutationCostWarning, check_permutations, draws, summarise
from .pvalues import adjust_p_values, benjamini_hochberg, holm

__all__ = ["PermutationCostWarning", "check_permutations", "draws", "summarise", "adjust_p_values",
           "benjamini_hochberg", "holm"]
