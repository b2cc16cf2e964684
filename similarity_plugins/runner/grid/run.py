"""Running a grid's cells on ``compare``'s one metric-call path: activations first, then the cells in an order
that keeps one donor guard alive at a time, under torchrun shared out between the ranks, and (optionally)
a finished-cells file to resume from."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from typing import Any

from torch import nn

from ...host.results import LayerPair, SimilarityResult, jsonable
from ...networks.context import Context
from ...networks.data import split_digest
from ...networks.model_state import preserved
from ...networks.parallel import World, module_digest
from ...networks.wrapped import reading_digest
from ...stats.designs import is_permutation_array
from ...utils.digest import value_text
from ...utils.progress import progress_bar
from ...utils.rng import isolated_rng
from ..compare import run_metric
from ..isolation import Donors
from ..ranks import check_ranks_agree
from ..repeats import run_repeated
from .files import CellsFile
from .results import Grid, Node

DIST_BLOCK = 16   # cells per rank between two exchanges of finished cells under torchrun
CHECK_EVERY = 256  # at most this many deterministic activation-only cells between two donor checks
Cell = tuple  # (metric, front index, end index)


@dataclass
class Plan:
    """What a grid computes: ``nodes``, the ordered index ``pairs``, ``metrics`` (with ``symmetric`` flags),
    each metric's ``options`` and the ``seed``."""

    nodes: list[Node]
    pairs: list[tuple[int, int]]
    metrics: list[str]
    symmetric: dict[str, bool]
    options: dict[str, dict]
    seed: int
    refused: dict[str, str] = field(default_factory=dict)  # metric -> why it cannot run here (its cells' error)

    def cells(self) -> tuple[list[Cell], dict[Cell, Cell]]:
        """(the cells to compute, in model-pair-major order; ``{mirrored cell: the cell it copies}``).

        A symmetric metric runs once per unordered pair and is mirrored, except that with a permutation test it
        is mirrored only in a block (front model x end model) of two models whose every pair is mirrored: the
        reversed order of a cell scores the inverse permutations, so a block mixing both orders (a model's own
        block above all) would not have every cell's null under the same permutations (`Grid.best_pair`); and
        never when the permutations are given as an array (each block then scores exactly those).
        """
        asked = set(self.pairs)
        models = list(dict.fromkeys(m for m, _ in self.nodes))
        order = {m: k for k, m in enumerate(models)}
        whole = self._whole_mirror_blocks(asked)
        compute, mirrors = [], {}
        for i, j in self.pairs:
            for metric in self.metrics:
                own = self.options.get(metric, {})
                blocks_ok = not _tested(own) or (self.nodes[i][0], self.nodes[j][0]) in whole and not _given_permutations(own)
                if self.symmetric[metric] and i > j and (j, i) in asked and blocks_ok:
                    mirrors[(metric, i, j)] = (metric, j, i)
                else:
                    compute.append((metric, i, j))
        compute.sort(key=lambda c: (order[self.nodes[c[1]][0]], order[self.nodes[c[2]][0]], c[1], c[2],
                                    self.metrics.index(c[0])))
        return compute, mirrors

    def _whole_mirror_blocks(self, asked: set) -> set[tuple[str, str]]:
        """The (front model, end model) blocks of two different models in which every asked pair has its reverse
        asked (so either all of the block's cells are computed or, for a symmetric metric, all mirrored)."""
        blocks: dict[tuple[str, str], bool] = {}
        for i, j in asked:
            key = (self.nodes[i][0], self.nodes[j][0])
            blocks[key] = blocks.get(key, True) and key[0] != key[1] and (j, i) in asked
        return {key for key, ok in blocks.items() if ok}


def _tested(options: dict) -> bool:
    """True when a metric's options ask for a permutation test (a valid ``permutations`` > 0, or an array of them)."""
    k = options.get("permutations", 0)
    return _given_permutations(options) or isinstance(k, (int, float)) and not isinstance(k, bool) and k > 0


def _given_permutations(options: dict) -> bool:
    """True when a metric's options give the permutations themselves (an array: the mirrored order of a cell would
    score their inverses, not the permutations given)."""
    return is_permutation_array(options.get("permutations"))


def _needed_splits(plan: Plan, pm) -> dict[str, bool]:
    """The splits whose activations the grid captures up front: test for any activation-only metric, train
    for one that reads train activations too (e.g. linear regression)."""
    only = [n for n in plan.metrics if n not in pm.load_errors and pm.info[n].activations_only]
    return {"test": bool(only), "train": any("train" in (pm.info[n].needs or ()) for n in only)}


def _capture(ctx: Context, named: dict[str, nn.Module], placed: dict[str, nn.Module], plan: Plan, pm) -> dict:
    """One forward pass per model and split for all its layers; ``{(model, layer, split): (error type, error)}`` for
    what failed.

    When the pass for all layers fails, each layer is tried alone, so a layer that cannot be captured (one that
    runs twice per forward pass, one whose output is not a tensor) errors only its own cells; a forward pass
    that fails whatever the layer errors every layer of the model on that split. A split that is missing is
    left to the metrics that need it (their cells get compare's error)."""
    failed: dict[tuple[str, str, str], tuple[str, str]] = {}
    splits = [s for s, need in _needed_splits(plan, pm).items() if need and getattr(ctx.data, s, None) is not None]
    for name in named:
        layers = [layer for m, layer in plan.nodes if m == name]
        for split in splits:
            try:
                ctx.capture(placed[name], layers, split)
                continue
            except Exception as exc:  # noqa: BLE001 - the failing layers' cells get the error, the others still run
                if len(layers) == 1:
                    failed[(name, layers[0], split)] = _capture_error(name, exc)
                    continue
            for layer in layers:
                try:
                    ctx.capture(placed[name], [layer], split)
                except Exception as exc:  # noqa: BLE001 - as above, one layer at a time
                    failed[(name, layer, split)] = _capture_error(name, exc)
    return failed


def _capture_error(model: str, exc: Exception) -> tuple[str, str]:
    kind = type(exc).__name__
    return kind, f"{kind}: the forward pass of model {model!r} failed: {exc}"


def _failed_cell(metric: str, pair: LayerPair, failure: tuple[str, str]) -> SimilarityResult:
    return SimilarityResult.failed(metric, failure[1], pair, error_type=failure[0])


class _Unchecked:
    """Stands in for the `DonorGuard` during a run of deterministic activation-only cells of one
    model pair; the real guard checks once after the run (see `_Runner.run_many`)."""

    @staticmethod
    def check() -> None:
        return None


class _Runner:
    """Runs cells, keeping the `Donors` of the current model pair.

    The donor guard compares every parameter and buffer bit for bit (milliseconds per ResNet), which would cost
    more than a CKA cell itself. Consecutive cells of one model pair whose metrics are deterministic and read
    only activations therefore run with one check after the run instead of one per cell; when that check finds
    a changed donor it restores it, drops what was cached during the run, and runs the cells again one by one
    with a check after each, so the rows are those of checking every cell (the metric that changed the donor
    gets the error row, every other cell its value).
    """

    def __init__(self, plan: Plan, placed: dict[str, nn.Module], ctx: Context, pm,
                 failed: dict[tuple[str, str, str], tuple[str, str]]) -> None:
        self.plan, self.placed, self.ctx, self.pm, self.failed = plan, placed, ctx, pm, failed
        self._pair: tuple[str, str] | None = None
        self._donors: Donors | None = None

    def donors(self, front: str, end: str) -> Donors:
        if self._pair != (front, end):
            self._donors = Donors(self.placed[front], self.placed[end], self.ctx)
            self._pair = (front, end)
        return self._donors

    def _cheap(self, cell: Cell) -> bool:
        info = self.pm.info.get(cell[0])
        return bool(info is not None and info.error is None and info.activations_only and info.deterministic)

    def run_many(self, cells: list[Cell], cuda_rng: bool, on_done=None) -> list[SimilarityResult]:
        """The results of ``cells`` in order (see the class docstring for when the guard checks); ``on_done(cell,
        result)`` is called for each as soon as it is final."""
        out: list[SimilarityResult] = []
        k = 0
        while k < len(cells):
            models = self._models(cells[k])
            cheap = self._cheap(cells[k]) and not any(m in models for m, _, _ in self.failed)
            group = [cells[k]]
            while (cheap and len(group) < CHECK_EVERY and k + len(group) < len(cells)
                   and self._models(cells[k + len(group)]) == models and self._cheap(cells[k + len(group)])):
                group.append(cells[k + len(group)])
            done = self._run_unchecked(group, cuda_rng) if len(group) > 1 else [self(group[0], cuda_rng)]
            for cell, result in zip(group, done):
                if on_done is not None:
                    on_done(cell, result)
            out += done
            k += len(group)
        return out

    def _models(self, cell: Cell) -> tuple[str, str]:
        return self.plan.nodes[cell[1]][0], self.plan.nodes[cell[2]][0]

    def _run_unchecked(self, group: list[Cell], cuda_rng: bool) -> list[SimilarityResult]:
        donors = self.donors(*self._models(group[0]))
        real, memo_before = donors.guard, set(self.ctx.memo)
        donors.guard = _Unchecked()
        try:
            results = [self(cell, cuda_rng) for cell in group]
        except BaseException:
            donors.guard = real
            real.check()  # restore the donors before the interruption travels on
            raise
        donors.guard = real
        if real.check() is None:
            return results
        for key in [k for k in self.ctx.memo if k not in memo_before]:  # possibly computed from a changed donor
            del self.ctx.memo[key]
        return [self(cell, cuda_rng) for cell in group]

    def _capture_failure(self, metric: str, model: str, layer: str) -> tuple[str, str] | None:
        """Why the activations of ``(model, layer)`` that ``metric`` reads could not be captured, or None: a
        test-split failure concerns every metric, a train-split one those that read the train split."""
        needs = () if metric in self.pm.load_errors else (self.pm.info[metric].needs or ())
        return self.failed.get((model, layer, "test")) or (self.failed.get((model, layer, "train"))
                                                           if "train" in needs else None)

    def __call__(self, cell: Cell, cuda_rng: bool) -> SimilarityResult:
        metric, i, j = cell
        (fm, fl), (em, el) = self.plan.nodes[i], self.plan.nodes[j]
        pair = LayerPair(fl, el)
        refused = self.plan.refused.get(metric)
        bad = (("ValueError", refused) if refused
               else self._capture_failure(metric, fm, fl) or self._capture_failure(metric, em, el))
        if bad:
            result = _failed_cell(metric, pair, bad)
        else:
            donors = self.donors(fm, em)
            pm = self.pm

            def run(s: int) -> SimilarityResult:
                return run_metric(pm, metric, pair, donors, self.ctx.data, self.plan.options[metric], s,
                                   self.ctx.device, cuda_rng)

            result = run_repeated(run, self.plan.seed, 1, deterministic=pm.info[metric].deterministic, context=self.ctx)
        result.details["front_model"], result.details["end_model"] = fm, em
        return result


def _mirror(result: SimilarityResult, nodes: list[Node], cell: Cell) -> SimilarityResult:
    """The copy of a symmetric metric's cell for the other order of its nodes; its error and warnings name the
    sides of this order (`other_sides`)."""
    _, i, j = cell
    details = {**result.details, "front_model": nodes[i][0], "end_model": nodes[j][0], "mirrored": True}
    if isinstance(details.get("warnings"), list):
        details["warnings"] = [other_sides(w) if isinstance(w, str) else w for w in details["warnings"]]
    error = other_sides(result.error) if result.error is not None else None
    return replace(result, details=details, seconds=0.0, layer=str(LayerPair(nodes[i][1], nodes[j][1])), error=error)


def other_sides(text: str) -> str:
    """``text`` with the measures' names of the two sides exchanged: ``X`` (the front's activations) for ``Y`` (the
    end's) and back, as whole words, so that a message from one order of a symmetric metric reads right in the
    other."""
    return re.sub(r"\b[XY]\b", lambda m: "Y" if m.group() == "X" else "X", text)


def _fingerprint(named: dict[str, nn.Module], ctx: Context, plan: Plan, weights: dict[str, str] | None) -> dict:
    """What a resume file's cells depend on: the models' tensors and configuration (``weights``: their
    `module_digest` when the caller has it), what each reads with (`reading_digest`: tokenizer, processor,
    pooling), the seed, each metric's options and the content of both data splits (`split_digest`: every input
    and label, not only their number)."""
    weights = weights or {}
    return jsonable({"models": {m: weights.get(m) or module_digest([model]) for m, model in named.items()},
                     "reading": {m: reading_digest(model) for m, model in named.items()}, "seed": plan.seed,
                      "options": {metric: value_text(sorted(opts.items(), key=repr)) for metric, opts in plan.options.items()},
                      "data": [split_digest(ctx.data.train, ctx.batch_size, "the train split"),
                               split_digest(ctx.data.test, ctx.batch_size, "the test split")]})


def _local_context(ctx: Context) -> Context:
    """A one-process context over the activations every rank already holds, for cells a rank runs on its own."""
    return ctx.derive(keep=lambda key: isinstance(key, tuple) and bool(key) and key[0] == "activations",
                      progress="never", world=World())


def run_grid(plan: Plan, named: dict[str, nn.Module], placed: dict[str, nn.Module], ctx: Context, pm,
             info: dict, meta: dict, resume: str | os.PathLike | None = None,
             weights: dict[str, str] | None = None) -> dict[Cell, SimilarityResult]:
    """Every cell of ``plan`` (see [`compare_grid`][grid.compare_grid]): ``{(metric, front index, end index): result}``;
    ``weights``: the models' `module_digest` when the caller computed them (each weight is hashed once)."""
    world = ctx.world
    if world.distributed:
        for model in named.values():
            check_ranks_agree(world, model, model, ctx.data, (plan.nodes, plan.pairs, plan.metrics, plan.seed,
                                                              sorted(plan.options.items(), key=str)))
    compute, mirrors = plan.cells()
    store = (CellsFile(resume, _fingerprint(named, ctx, plan, weights), plan.nodes, set(compute), world.is_main,
                       meta.get("sources"))
             if resume else None)
    results: dict[Cell, SimilarityResult] = dict(store.done) if store else {}
    if store is not None and world.distributed:  # rank 0's file decides, so every rank plans the same cells
        results = world.exchange(lambda: results, "resume file")[0]
    todo = [c for c in compute if c not in results]
    with preserved(*named.values(), *placed.values()), isolated_rng(ctx.device) as cuda_rng:
        failed = _capture(ctx, named, placed, plan, pm) if todo else {}
        run_ctx = _local_context(ctx) if world.distributed else ctx
        runner = _Runner(plan, placed, run_ctx, pm, failed)
        bar = progress_bar(total=len(todo), progress=ctx.progress if world.is_main else False, desc="grid", unit="cell")

        def record(cell: Cell, result: SimilarityResult) -> None:
            results[cell] = result
            if store is not None:
                store.add(cell, result)
            bar.update(1)

        try:
            if not world.distributed:
                runner.run_many(todo, cuda_rng, record)
            for start in range(0, len(todo) if world.distributed else 0, world.size * DIST_BLOCK):
                block = todo[start:start + world.size * DIST_BLOCK]
                mine = runner.run_many(block[world.rank::world.size], cuda_rng)
                for result in mine:
                    result.details["rank"] = world.rank  # which rank computed the cell
                shares = world.exchange(lambda: mine, "grid cells")
                for rank, share in enumerate(shares):
                    for cell, result in zip(block[rank::world.size], share):
                        record(cell, result)
        except KeyboardInterrupt as exc:  # the finished cells travel with the exception
            exc.grid = Grid(plan.nodes, plan.metrics, _with_mirrors(results, mirrors, plan.nodes), info,
                            {**meta, "interrupted": True})
            raise
        finally:
            bar.close()
    return _with_mirrors(results, mirrors, plan.nodes)


def _with_mirrors(results: dict[Cell, SimilarityResult], mirrors: dict[Cell, Cell], nodes: list[Node]) -> dict:
    out: dict[Cell, Any] = dict(results)
    for cell, source in mirrors.items():
        if source in results:
            out[cell] = _mirror(results[source], nodes, cell)
    return out
