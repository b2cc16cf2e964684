"""What ``compare`` does differently under torch.distributed: check that the ranks agree, agree on results.

Used by `compare` only when [`distributed`][similarity_plugins.networks.parallel.World.distributed] is true; in one
process nothing here runs.
"""

from __future__ import annotations

from torch import nn

from ..host.results import SimilarityResult
from ..networks.data import Data, split_size
from ..networks.parallel import CollectiveError, World, module_digest
from ..utils.digest import value_text


def check_ranks_agree(world: World, front: nn.Module, end: nn.Module, data: Data, settings: object) -> None:
    """Raise the same [`CollectiveError`][CollectiveError] on every rank unless all ranks have the same front and end
    weights (a digest of every parameter and buffer), the same split sizes and the same call settings."""
    world.check_same("front/end weights", (module_digest([front]), module_digest([end])))
    world.check_same("data split sizes (train, test)", (split_size(data.train), split_size(data.test)))
    world.check_same("compare settings (layers, metrics, seed, options)", value_text(settings))


def agree_on_result(world: World, result: SimilarityResult,
                    error: BaseException | None) -> tuple[SimilarityResult, tuple[str, ...]]:
    """Every rank returns rank 0's result for one metric; a failure on any rank becomes the same error row.

    ``error``: the exception this rank's metric raised, if any. A [`CollectiveError`][CollectiveError] was raised on
    every rank at once and needs no further exchange; any other outcome is exchanged once (this is also
    how a plugin that fails on one rank only, outside the services' collectives, reaches the others).
    Returns the row and the class names of the failed ranks' exceptions (`CollectiveError.error_types`; empty
    when no rank failed), the same on every rank.
    """
    if isinstance(error, CollectiveError):
        result.details = {}  # tracebacks differ by rank; the message names the failing rank
        return result, error.error_types

    def outcome() -> SimilarityResult:
        if error is not None:
            raise error
        return result

    try:
        results = world.exchange(outcome, f"metric {result.metric}")
    except CollectiveError as exc:
        return SimilarityResult.from_exception(result.metric, exc, result.layer, seconds=result.seconds), exc.error_types
    chosen = results[0]
    scores = [r.score for r in results]
    if any(s != scores[0] for s in scores):
        chosen.details.setdefault("warnings", []).append(
            f"the ranks computed different scores {scores}; reporting rank 0's (a plugin that computes on its "
            "own must be deterministic to give the same score on every rank)")
    return chosen, ()
