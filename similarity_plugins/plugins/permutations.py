"""The permutation options every activation measure declares, and the test's keys in its row.

``permutations`` (a count, or the permutations themselves), ``alpha`` (the level of the calibrated score),
``groups`` and ``permute`` (restricted permutations) are declared here once; each permutation-capable plugin
lists `PERMUTATION_OPTIONS` among its options and reads them with `permutation_options` before any work
(`similarity_plugins.stats.designs` holds their rules, `similarity_plugins.stats.calibration` the calibrated
score).
"""

from __future__ import annotations

from typing import Any, Callable

from ..host.contract import Option
from ..host.hookspecs import PluginContext
from ..host.plugin import declared_value
from ..stats.calibration import ALPHA_RULE, DEFAULT_ALPHA
from ..stats.designs import PERMUTE_RULE, PermutationOptions, read_permutation_options
from ..stats.permutation import PERMUTATION_COUNT
from ..utils.value_rules import AnyOf, Array, OrNone

PERMUTATIONS = Option("permutations", 0, "K > 0: also score K seeded permutations of the end's rows and report "
                      "p_value, null_mean, null_std, tau and calibrated (0: no test); or a (K, N) integer array of "
                      "the permutations themselves (row k pairs the front with the end's rows perms[k])",
                      AnyOf(PERMUTATION_COUNT, Array(2, "a (K, N) integer array of permutations", integers=True)))
ALPHA = Option("alpha", DEFAULT_ALPHA, "with permutations: the level of the critical value tau that the calibrated "
               "score is measured from", ALPHA_RULE)
GROUPS = Option("groups", None, "with permutations: one label per test sample; permutations keep to the groups "
                "(see permute), for samples that are not exchangeable (tokens or crops of one source)",
                OrNone(Array(1, "one label per test sample (a list or a 1-D array)"), "no groups"))
PERMUTE = Option("permute", "within", "with groups: within (samples move only inside their group) or groups "
                 "(whole groups move onto groups of the same size)", PERMUTE_RULE)
PERMUTATION_OPTIONS = (PERMUTATIONS, ALPHA, GROUPS, PERMUTE)


def permutation_options(plugin: Any, options: dict, alpha: bool = True) -> PermutationOptions:
    """The metric's permutation options, checked before any work (`read_permutation_options`); ``ValueError``
    naming the option otherwise. ``alpha=False``: the metric's own option of that name means something else
    (linear regression's ridge strength), so the level is its default."""
    level = declared_value(plugin, options, ALPHA.name) if alpha else ALPHA.default
    return read_permutation_options(declared_value(plugin, options, PERMUTATIONS.name), level,
                                    declared_value(plugin, options, GROUPS.name),
                                    declared_value(plugin, options, PERMUTE.name))


def keeps_nulls(context: PluginContext) -> bool:
    """True in a grid (``context.reuse_nodes``): each cell's test returns its null values in permutation order, so
    the grid can form the maximum and the mean over a block's cells per permutation (`Grid.best_pair`,
    `Grid.aggregate`); the grid keeps them out of the cells' details."""
    return bool(context.reuse_nodes)


def with_permutation_test(details: dict, test: PermutationOptions, run: Callable[[], dict[str, Any]]) -> dict:
    """``details`` with the permutation test's keys (``p_value``, ``null_mean``, ``null_std``, ``permutations``,
    ``alpha``, ``tau``, ``calibrated``, and ``p_value_analytic`` where the measure has one) when ``test`` asks for
    one; its cost warnings join ``warnings``."""
    if not test.asked:
        return details
    found = run()
    notes = found.pop("warnings", [])
    details.update(found)
    if notes:
        details["warnings"] = [*details.get("warnings", []), *notes]
    return details
