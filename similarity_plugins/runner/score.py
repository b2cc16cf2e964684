"""``score``: arrays in, a report out. The metrics that read only activations, run on two given arrays.

A metric plugin that declares ``activations_only = True`` reads its inputs solely through
``context.activations(front, layer.front, split)`` and ``context.activations(end, layer.end, split)``.
[`score`][score] runs such metrics through the same machinery as ``compare`` (selection, option checks,
error rows, the [`Report`][similarity_plugins.Report]) with an `ArrayContext` whose ``activations`` returns
rows of the given arrays: ``front`` stands for ``x``, ``end`` for ``y``, and the row's layer is
``"x->y"``. Which rows a split holds:

- ``split={"train": rows, "test": rows}`` (1-D integer index arrays): every metric reads these rows
  (``details["split"]`` says so); a metric that needs a split the dict lacks gets an error row.
- ``split=None``: a metric that needs the train split (``needs`` includes ``"train"``: it fits on train
  and scores on test) uses a seeded 80/20 split of the rows, the same for every such metric: the first
  ``max(1, round(N / 5))`` entries of ``torch.randperm(N, generator=torch.Generator().manual_seed(seed))``
  are the test rows, the others the train rows, both kept in their original order
  (``details["split"]`` says so, after the metric's own text there if it wrote one). Every other metric
  reads all N rows as its test split.
"""

from __future__ import annotations

import time
from typing import Any, Iterable, Mapping

import numpy as np
import torch

from ..host.manager import get_plugin_manager
from ..host.registry import declared_meanings, options_for_metrics, select_metrics
from ..host.results import LayerPair, Report, SimilarityResult
from ..networks.activations import flatten
from ..networks.context import Context
from ..networks.data import Data
from ..networks.parallel import World
from ..store.rows import AlignedRows
from ..utils.arrays import unmasked
from ..utils.progress import Progress, check_progress, progress_bar
from ..utils.rng import check_seed, drawn_split, isolated_rng, seed_all
from .call import METRIC_ERRORS, error_row, hook_call, interrupted_row, refusal, to_row
from .process import note_restored, outside_inference_mode, process_state, restore_process_state
from .provenance import provenance
from .score_store import row_view, rows_of, stored_identity, stored_sides

PAIR = LayerPair("x", "y")


class _Side:
    """What a metric receives as ``front`` (``x``) or ``end`` (``y``) in [`score`][score]: a name, no model."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<the {self.name} array of similarity_plugins.score: activations only, no model>"


class ArrayContext(Context):
    """A [`Context`][Context] whose `activations` are rows of given arrays, for ``score``.

    ``arrays``: ``{side object: tensor (N, ...)}``; ``rows``: ``{"train"/"test": index tensor or None}``.
    Services that need a model (``split``, ``outputs``, ``run_sharded``) raise ``TypeError``.
    """

    def __init__(self, arrays: Mapping[Any, torch.Tensor], rows: Mapping[str, torch.Tensor | None], *, seed: int,
                 device: torch.device, options: dict | None) -> None:
        data = Data()  # the splits stand for row indices here, not datasets (so they skip Data's checks)
        data.train, data.test = rows.get("train"), rows.get("test")
        super().__init__(data, seed=seed, device=device, options=options, world=World())
        self.arrays = dict(arrays)
        self.rows = dict(rows)

    def activations(self, model: Any, layer: str, split: str = "test", *, flat: bool = True) -> torch.Tensor:
        """Rows ``split`` of the array standing for ``model``: (n, prod(...)) when ``flat``, else (n, ...).

        Dtype and device are the array's (floating point; integers were made float64)."""
        if not any(model is side for side in self.arrays):
            raise TypeError(f"score() has activations for its own x and y only, not for {model!r}")
        rows = self.rows.get(split) if split in ("train", "test") else self.data.split(split)
        if rows is None:
            raise ValueError(f"this metric reads the {split} rows, but score() gave it none: a metric that reads the "
                             f"train split must declare needs = ('train', 'test'), or pass split={{'train': ..., "
                             f"'test': ...}} to score()")
        array = self.arrays[model]
        read = (lambda: rows_of(array, rows)) if isinstance(array, AlignedRows) else (lambda: _take(array, rows))
        acts = self.remember(("array rows", id(model), split), read)
        return flatten(acts) if flat else acts

    def row_source(self, model: Any, layer: str, split: str = "test") -> AlignedRows | None:
        """The rows ``split`` of a side that is a store entry, read in blocks; None for an array, or a split the
        metrics already read whole."""
        array, rows = self.arrays.get(model), self.rows.get(split) if split in ("train", "test") else None
        if not isinstance(array, AlignedRows) or rows is None or ("array rows", id(model), split) in self.memo:
            return None
        return row_view(array, rows)

    def local_activations(self, model: Any, layer: str, split: str = "test") -> tuple[torch.Tensor, None, None]:
        """All of `activations` (one process holds every row), no labels."""
        return self.activations(model, layer, split, flat=False), None, None

    def _needs_models(self, *_: Any, **__: Any) -> Any:
        raise TypeError("this metric needs the models (score() has only their activations); "
                        "use similarity_plugins.compare(front, end, layer, data)")

    split = outputs = run_sharded = _needs_models


def _take(array: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """A new tensor holding ``array[rows]`` (a copy also of every row, so that a metric that writes into what it
    is given changes neither the caller's array nor what the next metric reads)."""
    if len(rows) == len(array) and bool((rows == torch.arange(len(array))).all()):
        return array.clone()
    return array[rows.to(array.device)]


def as_activations(value: Any, name: str) -> torch.Tensor:
    """``value`` (NumPy array, torch tensor or array-like, (N, ...)) as a tensor: floating dtypes kept
    (float16/bfloat16 as float32), integers and bools as float64; on its own device. ``TypeError`` or
    ``ValueError`` naming ``name`` for a non-numeric or complex array, fewer than 2 dimensions, no
    features, or non-finite values."""
    value = unmasked(value, name)
    if isinstance(value, torch.Tensor):
        if value.device.type == "meta":
            raise TypeError(f"{name} is a tensor on the meta device: it has a shape but no values; pass real values")
        tensor = value.detach()
        if tensor.layout != torch.strided:  # sparse COO/CSR: the same values, dense
            tensor = tensor.to_dense()
    else:
        _refuse_batches(value, name)
        try:
            array = np.asarray(value)
        except Exception as exc:  # noqa: BLE001 - whatever NumPy says, the user needs the name
            raise TypeError(f"{name} must be a NumPy array or a torch tensor (N, ...), got {type(value).__name__}: "
                            f"{exc}") from None
        if array.dtype.kind not in "biuf":
            raise TypeError(f"{name} must hold real numbers, got dtype {array.dtype} ({type(value).__name__})")
        if not array.dtype.isnative or not array.flags.writeable or any(st < 0 for st in array.strides):
            # a copy torch can share: torch refuses non-native byte order, read-only memory and the negative
            # strides of a reversed view (``a[::-1]``)
            array = np.ascontiguousarray(array.astype(array.dtype.newbyteorder("=")))
        tensor = torch.from_numpy(array)
    if tensor.is_complex():
        raise TypeError(f"{name} must hold real numbers, got dtype {tensor.dtype}")
    if not tensor.is_floating_point():
        tensor = tensor.double()
    elif tensor.dtype in (torch.float16, torch.bfloat16):
        tensor = tensor.float()
    if tensor.dim() < 2:
        raise ValueError(f"{name} has shape {tuple(tensor.shape)}; score() needs (N, ...) with at least 2 "
                         f"dimensions, rows as samples (one feature per sample: {name}[:, None])")
    if tensor.shape[1:].numel() == 0:
        raise ValueError(f"{name} has shape {tuple(tensor.shape)}: no features per sample")
    bad = ~torch.isfinite(flatten(tensor)).all(dim=1)
    if bool(bad.any()):
        first = int(bad.nonzero()[0])
        raise ValueError(f"{name} has non-finite values (NaN or inf) in {int(bad.sum())} of its {len(tensor)} rows "
                         f"(the first: row {first}); remove or fix those rows")
    return tensor


def _refuse_batches(value: Any, name: str) -> None:
    """Refuse a list or tuple of arrays of 2 or more dimensions: most likely batches (K, (B, D)) that NumPy would
    stack into K samples of B*D features; a list of per-sample arrays of that shape must be stacked explicitly."""
    if not isinstance(value, (list, tuple)) or not value:
        return
    first = value[0]
    if isinstance(first, (np.ndarray, torch.Tensor)) and first.ndim >= 2:
        raise ValueError(f"{name} is a {type(value).__name__} of {len(value)} arrays of shape {tuple(first.shape)}: "
                         f"if they are batches, join their rows (np.concatenate or torch.cat) into (N, ...); if each "
                         f"is one sample, stack them (np.stack) so that the rows are explicit")


def check_split(split: Any, n: int) -> dict[str, torch.Tensor] | None:
    """``split`` (``None`` or ``{"train": rows, "test": rows}``, 1-D integer index arrays in [0, n) without
    repeats) as ``{name: int64 CPU tensor}``; ``TypeError``/``ValueError`` naming the problem."""
    if split is None:
        return None
    if not isinstance(split, Mapping):
        raise TypeError(f"split must be a dict {{'train': rows, 'test': rows}} of index arrays, got {type(split).__name__}")
    unknown = sorted(set(split) - {"train", "test"})
    if unknown or "test" not in split:
        raise ValueError(f"split takes the keys 'train' and 'test' (test required), got {sorted(split, key=str)}")
    return {key: _index_rows(split[key], n, key) for key in ("train", "test") if key in split}


def _index_rows(value: Any, n: int, key: str) -> torch.Tensor:
    rows = value.detach().cpu() if isinstance(value, torch.Tensor) else torch.as_tensor(np.asarray(value))
    if rows.dtype == torch.bool:
        raise TypeError(f"split[{key!r}] is a boolean mask; pass the row indices (np.flatnonzero(mask))")
    if rows.numel() == 0:
        raise ValueError(f"split[{key!r}] is empty")
    if rows.dim() != 1 or rows.is_floating_point() or rows.is_complex():
        raise TypeError(f"split[{key!r}] must be a 1-D array of integer row indices, got {rows.dtype} of shape "
                        f"{tuple(rows.shape)}")
    rows = rows.long()
    if int(rows.min()) < 0 or int(rows.max()) >= n:
        raise ValueError(f"split[{key!r}] has row indices outside [0, {n}) (the arrays have {n} rows)")
    if len(torch.unique(rows)) != len(rows):
        raise ValueError(f"split[{key!r}] repeats row indices")
    return rows


def select_score_metrics(metrics: str | Iterable[str] | None) -> list[str]:
    """The metric names ``score`` runs: ``metrics`` resolved as in ``compare``, or, for ``None``, every
    registered metric that declares ``activations_only``. Raises ``ValueError`` when there is none."""
    if metrics is not None:
        return select_metrics(metrics)
    pm = get_plugin_manager()
    names = [n for n in select_metrics(None) if pm.info[n].activations_only]
    if not names:
        raise ValueError("no registered metric reads only activations (activations_only = True); "
                         "`similarity-plugins list` shows the metrics")
    return names


def score(x: np.ndarray | torch.Tensor, y: np.ndarray | torch.Tensor, metrics: str | Iterable[str] | None = None,
          options: dict | None = None, split: Mapping[str, Any] | None = None, seed: int = 0,
          progress: Progress = "never", shared_samples: bool = False) -> Report:
    """Score two arrays of activations with every selected metric that reads only activations.

    Args:
        x: the front's activations, a NumPy array or torch tensor (N, ...), one row per input; each row is
            flattened as the CKA plugins flatten, (N, ...) -> (N, prod(...)). Floating dtypes are kept, on
            the array's device. Or an activation store entry (``Store.load``).
        y: the end's activations on the same N inputs, (N, ...). Two store entries are paired by sample id before
            any work (the same samples in another order are read in one order; other samples or other data are
            refused, naming both), read from disk as the metrics need them: the measures that reduce to sums over
            samples (linear CKA, Procrustes, the CCA family, ridge regression) in blocks when that holds less.
        metrics: names or wildcards as in ``compare``; ``None``: every registered metric with
            ``activations_only`` (a selected metric that needs models gets an error row saying so).
        options: as in ``compare`` (global options and per-metric dicts), checked the same way.
        split: ``{"train": rows, "test": rows}`` index arrays, or ``None``: metrics that need train then use a
            seeded 80/20 split of the rows, the others all rows.
        seed: the metrics' seed and the seed of that split.
        progress: ``"never"`` (default) no bar, ``"auto"`` a bar over the metrics when stderr is a terminal,
            ``"always"`` one even into a file or pipe.
        shared_samples: for two store entries whose sample ids differ, keep the samples both hold (a warning and
            ``report.meta["samples"]`` say how many each loses) instead of refusing them.

    Returns:
        The [`Report`][similarity_plugins.Report] that ``compare`` returns (one row per metric, layer
            ``"x->y"``).

    Raises:
        ValueError: arrays with different N or fewer than 2 rows, a bad split, unknown metrics or options.
        TypeError: an input that is not an array or tensor.
    """
    progress = check_progress(progress)
    seed = check_seed(seed)
    stored = stored_sides(x, y, shared_samples)
    xs, ys = stored[:2] if stored else (as_activations(x, "x"), as_activations(y, "y"))
    if len(xs) != len(ys):
        raise ValueError(f"x and y must have the same rows (samples): x has {len(xs)}, y has {len(ys)}")
    if len(xs) < 2:
        raise ValueError(f"score() needs at least 2 rows (samples), got {len(xs)}")
    given = check_split(split, len(xs))
    pm = get_plugin_manager()
    names = select_score_metrics(metrics)
    metric_options = options_for_metrics(names, options)
    sides = {_Side("x"): xs, _Side("y"): ys}
    front, end = sides
    results: list[SimilarityResult] = []
    device = getattr(xs, "device", torch.device("cpu"))
    meta = {"x": list(xs.shape), "y": list(ys.shape), "dtype": [str(xs.dtype), str(ys.dtype)], "metrics": names,
            "kinds": {n: pm.info[n].kind for n in names}, "seed": seed, "split": "given" if given else None,
            "device": str(device), "torch": torch.__version__, "info": declared_meanings(names),
            "provenance": _provenance(xs, ys, stored, options, device), **({"samples": stored[2]} if stored else {})}
    try:
        with isolated_rng(device) as cuda_rng:
            for name in progress_bar(names, progress=progress, desc="score", leave=False):
                results.append(_score_one(pm, name, front, end, sides, given, metric_options[name], seed, cuda_rng))
    except KeyboardInterrupt as exc:  # the finished rows travel with the exception, as in compare
        exc.report = Report(results + [interrupted_row(n, str(PAIR)) for n in names[len(results):]],
                            {**meta, "interrupted": True})
        raise
    return Report(results, meta)


def _provenance(xs: Any, ys: Any, stored: Any, options: Any, device: torch.device) -> dict:
    """The run's provenance; two store entries are identified by their entry and samples, not read again."""
    record = provenance({}, {} if stored else {"x": xs, "y": ys}, options=options, device=device)
    if stored:
        record["data"] = {"x": stored_identity(xs), "y": stored_identity(ys)}
    return record


def _score_one(pm, name: str, front: _Side, end: _Side, sides: dict, given: dict | None, options: dict, seed: int,
               cuda_rng: bool) -> SimilarityResult:
    info = pm.info[name]
    if name not in pm.load_errors and not info.activations_only:
        return SimilarityResult.from_exception(name, ValueError(
            f"{name} needs the models, not only their activations (it does not declare activations_only); use "
            f"similarity_plugins.compare(front, end, layer, data) or `similarity-plugins compare`"), PAIR)
    n = len(sides[front])
    if given is not None and "train" in (info.needs or ()) and "train" not in given:
        return SimilarityResult.from_exception(name, ValueError(
            f"{name} fits on train rows and scores on test rows, but split has no 'train'; pass "
            f"split={{'train': rows, 'test': rows}}, or split=None for a seeded 80/20 split"), PAIR)
    if given is not None:
        rows = given if info.needs is None or "train" in info.needs else {"test": given["test"]}
        note = "given: " + " / ".join(f"{len(r)} {k}" for k, r in rows.items()) + " rows"
    elif "train" in (info.needs or ()):
        rows = drawn_split(n, seed)
        note = (f"drawn: seeded 80/20 permutation of the rows (seed {seed}): "
                f"{len(rows['train'])} train / {len(rows['test'])} test rows")
    else:
        rows, note = {"test": torch.arange(n)}, None
    ctx = ArrayContext(sides, rows, seed=seed, device=getattr(sides[front], "device", torch.device("cpu")),
                       options=options)
    result = _call_metric(pm, name, front, end, ctx, options, seed, cuda_rng)
    if note and name not in pm.load_errors:
        own = result.details.get("split")  # a metric may describe its own use of the splits: keep it, add ours
        result.details["split"] = note if own in (None, "", note) else f"{own}; {note}"
        overlap = _overlap(rows)
        if overlap and "train" in (info.needs or ()):
            result.details.setdefault("warnings", []).append(f"train and test share {overlap} rows")
    return result


def _call_metric(pm, name: str, front: _Side, end: _Side, ctx: ArrayContext, options: dict, seed: int,
                 cuda_rng: bool) -> SimilarityResult:
    """One metric's row, as ``compare`` makes it (load error, missing split, return forms, error rows, the process
    settings restored after the call), without the donor guards: there are no models to guard."""
    layer = str(PAIR)
    refused, options = refusal(pm, name, ctx.data, options, layer)
    if refused is not None:
        return refused
    call = hook_call(pm, name, {"front": front, "end": end, "layer": PAIR, "data": ctx.data, "options": options,
                                "context": ctx, "seed": seed, "device": ctx.device})
    start, saved = time.perf_counter(), process_state()
    try:
        seed_all(seed, cuda=cuda_rng)
        with outside_inference_mode():  # as in compare: tensors a metric makes stay usable outside the call
            result = to_row(call(), name, layer, pm.info[name].range)
    except METRIC_ERRORS as exc:  # one metric's failure (even sys.exit) must not stop the others
        result = error_row(exc, name, layer)
    except KeyboardInterrupt:
        restore_process_state(saved)
        raise
    note_restored(result, name, restore_process_state(saved))
    result.seconds = time.perf_counter() - start
    return result


def _overlap(rows: Mapping[str, torch.Tensor]) -> int:
    if "train" not in rows:
        return 0
    return int(np.intersect1d(rows["train"].numpy(), rows["test"].numpy()).size)
