"""Result types: one ``SimilarityResult`` per (metric, layer), collected in a ``Report``."""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from typing import Any, Callable, Iterator, NamedTuple, Sequence

from ..utils.io import csv_text, text_table, write_text
from ..utils.readback import decode_float, expect, read_json
from ..utils.rules import split_layer_pair


class LayerPair(NamedTuple):
    """Where to cut: ``front`` is the layer of network A, ``end`` the layer of network B."""

    front: str
    end: str

    def __str__(self) -> str:
        return self.front if self.front == self.end else f"{self.front}->{self.end}"


def as_layer_pair(layer: str | Sequence[str] | LayerPair) -> LayerPair:
    """Normalise ``"layer1"``, ``"layer1->layer2"`` (or ``"layer1:layer2"``, `utils.rules.split_layer_pair`) or
    ``("layer1", "layer2")`` to a [`LayerPair`][LayerPair]."""
    if isinstance(layer, LayerPair):
        return layer
    if isinstance(layer, str):
        pair = split_layer_pair(layer)
        return LayerPair(*pair) if pair else LayerPair(layer, layer)
    if isinstance(layer, (tuple, list)) and len(layer) == 2 and all(isinstance(s, str) for s in layer):
        return LayerPair(layer[0], layer[1])
    raise TypeError(
        f"a layer is a module name or a pair (front_layer, end_layer); got {layer!r}"
    )


TEST_INTERVAL = "test_ci95"   # details key: a metric's 95% interval of its score over test samples
SEED_INTERVAL = "seed_ci95"   # details key: the 95% interval of the mean over seeds (repeats)


@dataclass
class SimilarityResult:
    """One metric's answer at one layer.

    ``score`` is a float (``None`` when the metric failed), ``details`` a JSON-serialisable dict
    (sample counts, accuracies, IRI quality, warnings, ...), ``seconds`` the wall time of the metric
    in seconds, ``error`` the error message (``None`` on success; ``"ExceptionType: message"``), ``layer``
    the cut as a string (``"layer1"`` or ``"layer1->layer2"``), ``error_type`` the class name of the
    exception behind ``error`` (``"ValueError"``, ``"MetricTimeout"``, ...; ``None`` on success or when
    unknown), set where the error was caught.

    Two ``details`` keys have a meaning for every metric: ``TEST_INTERVAL`` (``"test_ci95"``), a metric's
    own 95% interval ``[low, high]`` of its score over test samples (stitching reports a bootstrap one),
    which repeats average and reports print; and ``SEED_INTERVAL`` (``"seed_ci95"``), the interval over
    seeds that ``compare(..., repeats=k)`` adds.
    """

    metric: str
    score: float | None = None
    details: dict = field(default_factory=dict)
    seconds: float = 0.0
    error: str | None = None
    layer: str | None = None
    error_type: str | None = None

    @property
    def ok(self) -> bool:
        """True when the metric produced a score without error."""
        return self.error is None and self.score is not None

    @classmethod
    def failed(cls, metric: str, error: str, layer: Any = None, *, details: dict | None = None,
               seconds: float = 0.0, error_type: str | None = None) -> SimilarityResult:
        """The row of a metric that produced no score.

        Args:
            metric: the metric's name.
            error: what went wrong and how to fix it, as users read it (``"ExceptionType: message"``).
            layer: the cut (a `LayerPair` or its string).
            details: the row's details (a traceback, ...).
            seconds: the wall time of the call.
            error_type: the class name of the exception behind ``error``, when known.

        Returns:
            The row, without a score.
        """
        return cls(metric, None, dict(details or {}), float(seconds), str(error),
                   None if layer is None else str(layer), error_type)

    @classmethod
    def from_exception(cls, metric: str, exc: BaseException, layer: Any = None, *, details: dict | None = None,
                       seconds: float = 0.0) -> SimilarityResult:
        """The row of a metric whose call raised (or was refused with) ``exc``: the error ``"Type: message"`` and
        its ``error_type`` taken from the exception (see `failed` for the other arguments)."""
        kind = type(exc).__name__
        return cls.failed(metric, f"{kind}: {exc}", layer, details=details, seconds=seconds, error_type=kind)

    def to_dict(self) -> dict:
        """A JSON-ready dict of all fields (new containers throughout: nothing is shared with the result)."""
        return jsonable({f.name: getattr(self, f.name) for f in fields(self)})

    @classmethod
    def from_dict(cls, d: Any, where: Callable[[], str] = lambda: "a result") -> SimilarityResult:
        """The result of its `to_dict` dict ``d`` (a score may also be ``"inf"``, ``"-inf"`` or ``"nan"``), checked:
        `BadFile` (a ``ValueError``) naming ``where()`` (the file and row) when a field is missing or of the wrong type."""
        expect(isinstance(d, dict), where, f"a result must be an object, got {type(d).__name__}")
        expect(isinstance(d.get("metric"), str), where, "the result has no metric name")
        details, error, layer, error_type = d.get("details") or {}, d.get("error"), d.get("layer"), d.get("error_type")
        expect(isinstance(details, dict), where, "the result's details must be an object")
        expect(error is None or isinstance(error, str), where, "the result's error must be text or null")
        expect(error_type is None or isinstance(error_type, str), where, "the result's error_type must be text or null")
        expect(layer is None or isinstance(layer, str), where, "the result's layer must be text or null")
        seconds = d.get("seconds") or 0.0
        expect(isinstance(seconds, (int, float)) and not isinstance(seconds, bool), where, "seconds must be a number")
        return cls(d["metric"], decode_float(d.get("score"), where), dict(details), float(seconds), error, layer,
                   error_type)


def jsonable(value: Any) -> Any:
    """Convert numpy/torch scalars and arrays, tuples and non-finite floats to plain JSON values."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if is_dataclass(value) and not isinstance(value, type):
        return jsonable(asdict(value))
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        return jsonable(value.tolist())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


#: The most characters of one error or warning the table shows (the JSON and CSV hold the whole text).
NOTE_CHARS = 400


def _cut(text: str) -> str:
    """``text`` as at most `NOTE_CHARS` characters on one line, saying how much was left out."""
    line = " ".join(str(text).split())
    if len(line) <= NOTE_CHARS:
        return line
    return f"{line[:NOTE_CHARS]}... ({len(line) - NOTE_CHARS} more characters: the JSON and CSV hold the whole text)"


def _format_score(value: float | None) -> str:
    return "error" if value is None else f"{value:.4f}"


class Report:
    """All results of one ``compare`` call, side by side.

    ``report.results`` is the list of [`SimilarityResult`][SimilarityResult]; ``report["cka-linear"]`` is the
    metric's result (with several layers: ``report["cka-linear", "layer2"]``); ``to_json()`` and
    ``to_csv()`` return text and write it when given a path; ``str(report)`` is a table with one row
    per metric and one column per layer, where ``meta["kinds"]`` (``{metric: "similarity" | "distance" |
    None}``, as the metrics declare; without it, as the registered metrics declare) marks the distance rows.
    """

    def __init__(self, results: list[SimilarityResult] | None = None, meta: dict | None = None) -> None:
        self.results: list[SimilarityResult] = list(results or [])
        self.meta: dict = dict(meta or {})

    # -- access ----------------------------------------------------------------------------------

    @property
    def metrics(self) -> list[str]:
        """Metric names in first-seen order."""
        return list(dict.fromkeys(r.metric for r in self.results))

    @property
    def layers(self) -> list[str]:
        """Layer strings in first-seen order."""
        return list(dict.fromkeys(str(r.layer) for r in self.results))

    def __len__(self) -> int:
        return len(self.results)

    def __iter__(self) -> Iterator[SimilarityResult]:
        return iter(self.results)

    def __getitem__(self, key: str | tuple | int) -> SimilarityResult:
        if isinstance(key, int):
            return self.results[key]
        if isinstance(key, tuple):
            metric, layer = key
            layer = str(as_layer_pair(layer))
            for r in self.results:
                if r.metric == metric and r.layer == layer:
                    return r
            raise KeyError(f"no result for metric {metric!r} at layer {layer!r}; layers: {', '.join(self.layers)}")
        rows = [r for r in self.results if r.metric == key]
        if not rows:
            raise KeyError(f"no result for metric {key!r}; metrics in this report: {', '.join(self.metrics)}")
        if len(rows) > 1:
            raise KeyError(
                f"metric {key!r} has {len(rows)} results (one per layer); "
                f"ask for one with report[{key!r}, layer], layer in: {', '.join(r.layer or '' for r in rows)}"
            )
        return rows[0]

    def get(self, metric: str, layer: str | None = None) -> SimilarityResult | None:
        """The result for ``metric`` (at ``layer``), or ``None``."""
        try:
            return self[metric] if layer is None else self[metric, layer]
        except KeyError:
            return None

    # -- output ----------------------------------------------------------------------------------

    def to_dict(self) -> dict:
        """``{"meta": {...}, "results": [result dicts]}``."""
        return {"meta": jsonable(self.meta), "results": [r.to_dict() for r in self.results]}

    def to_json(self, path: str | None = None, indent: int = 2) -> str:
        """The report as JSON text; also written to ``path`` when given."""
        text = json.dumps(self.to_dict(), indent=indent)
        if path is not None:
            write_text(path, text + "\n")
        return text

    @classmethod
    def from_dict(cls, payload: Any, source: str = "the report dict") -> Report:
        """The report of its `to_dict` payload (``{"meta": {...}, "results": [...]}``), every row checked.

        Raises:
            BadFile: (a ``ValueError``) naming ``source`` and the first problem.
        """
        expect(isinstance(payload, dict) and isinstance(payload.get("results"), list), lambda: source,
               "not a similarity-plugins report (expected an object with a 'results' list)")
        meta = payload.get("meta") or {}
        expect(isinstance(meta, dict), lambda: source, "'meta' must be an object")
        rows = [SimilarityResult.from_dict(row, lambda k=k: f"{source}, result {k}")
                for k, row in enumerate(payload["results"])]
        return cls(rows, meta)

    @classmethod
    def from_json(cls, path: str | os.PathLike) -> Report:
        """Read a report written by [`to_json`][to_json]; `BadFile` (a ``ValueError``) naming the file when it is
        not valid JSON or not a report, ``FileNotFoundError`` when it does not exist."""
        return cls.from_dict(read_json(path, "report file"), f"report file {os.fspath(path)!r}")

    def to_html(self, path: str | os.PathLike | None = None, *, title: str | None = None) -> str:
        """The report as one self-contained HTML page (charts, tables, provenance; no network needed to open it).

        Args:
            path: where to write the page (whole, atomically); None: only return it.
            title: the page's title; None: made from the models and layers.

        Returns:
            The page's HTML text, drawn from [`to_dict`][to_dict] alone, so it equals the page that
                ``similarity-plugins report`` makes from the JSON file ([The HTML report](../report.md)).
        """
        from .pages import write_page

        return write_page(self, path, title=title)

    def to_csv(self, path: str | None = None) -> str:
        """One CSV row per result: metric, layer, score, seconds, error, then scalar details."""
        cells = [{**r.details, **_interval_cells(r)} for r in self.results]  # each row's merged cells, once
        keys: dict[str, None] = dict.fromkeys(k for k in INTERVAL_COLUMNS if any(k in c for c in cells))
        for r in self.results:
            keys.update((k, None) for k, v in r.details.items()
                        if isinstance(v, (int, float, str, bool)) or v is None)
        detail_keys = list(keys)
        rows = ([r.metric, r.layer, "" if r.score is None else repr(float(r.score)), f"{r.seconds:.3f}", r.error or ""]
                + ["" if (v := c.get(k)) is None else v for k in detail_keys]
                for r, c in zip(self.results, cells))
        text = csv_text(["metric", "layer", "score", "seconds", "error"] + detail_keys, rows)
        if path is not None:
            write_text(path, text)
        return text

    def __str__(self) -> str:
        rows = []
        kinds = self.meta.get("kinds") or _declared_kinds(self.metrics)
        tested = {str(r.layer) for r in self.results if _p_value(r) is not None}  # layers given a p column
        for m in self.metrics:
            cells, total = [m + (" (distance)" if kinds.get(m) == "distance" else "")], 0.0
            for layer in self.layers:
                r = next((r for r in self.results if r.metric == m and str(r.layer) == layer), None)
                cells.append("" if r is None else _format_score(r.score) + _format_interval(r)
                             + ("*" if r.details.get("warnings") else ""))
                if layer in tested:
                    cells.append("" if r is None or _p_value(r) is None else f"{_p_value(r):.3g}")
                total += r.seconds if r else 0.0
            rows.append(cells + [f"{total:.1f}"])
        headers = [h for layer in self.layers for h in ([layer, "p"] if layer in tested else [layer])]
        out = [text_table(["metric"] + headers + ["time (s)"], rows)]
        if "distance" in kinds.values():
            out.append("(distance): lower is more alike; the other rows are similarities (higher is more alike) "
                       "or undeclared")
        out += _interval_legend(self.results)
        if tested:
            ks = sorted({int(r.details.get("permutations", 0)) for r in self.results if _p_value(r) is not None})
            out.append(f"p: permutation p-value over {'/'.join(map(str, ks))} permutations of the end's rows, "
                       "(1 + #null at least as extreme) / (K + 1) (details: null_mean, null_std, p_value_analytic)")
        notes = []
        for r in self.results:
            if r.error:
                notes.append(f"  {r.metric} @ {r.layer}: error: {_cut(r.error)}")
            for w in r.details.get("warnings", []) or []:
                notes.append(f"  {r.metric} @ {r.layer}: * {_cut(str(w))}")
        if notes:
            out += ["", "notes:"] + notes
        return "\n".join(out)

    def to_pandas(self) -> Any:
        """A ``pandas.DataFrame``: one row per metric and layer with ``metric``, ``layer``, ``score``,
        ``seconds``, ``error``, the interval bounds (``test_ci95_low/high``: bootstrap over test samples;
        ``seed_ci95_low/high``: over seeds with ``repeats``), ``repeats`` and the scalar details.

        Needs pandas (``pip install pandas``); raises ``ImportError`` saying so when it is missing.
        """
        try:
            import pandas as pd
        except ImportError as exc:
            raise ImportError("Report.to_pandas() needs pandas, which is not installed; install it with "
                              "`pip install pandas` (or `pip install 'similarity-plugins[pandas]'`), "
                              "or use report.to_csv() / report.to_dict() instead") from exc
        rows = []
        for r in self.results:
            row = {"metric": r.metric, "layer": r.layer, "score": r.score, "seconds": r.seconds, "error": r.error}
            row.update({k: None for k in INTERVAL_COLUMNS})
            row.update(_interval_cells(r))
            row["repeats"] = r.details.get("repeats", 1)
            row.update({k: v for k, v in r.details.items() if k not in row and isinstance(v, (int, float, str, bool))})
            rows.append(row)
        return pd.DataFrame(rows)

    def __repr__(self) -> str:
        return f"Report({len(self.results)} results: metrics={self.metrics}, layers={self.layers})"


def _p_value(result: SimilarityResult) -> float | None:
    """The row's permutation p-value (``details["p_value"]``), or None."""
    value = result.details.get("p_value")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _declared_kinds(metrics: list[str]) -> dict[str, str | None]:
    """``{metric: kind}`` as the registered metrics declare it (for a report made without ``meta["kinds"]``)."""
    from .manager import get_plugin_manager

    info = get_plugin_manager().info
    return {m: info[m].kind if m in info else None for m in metrics}


# -- intervals (details["test_ci95"], details["seed_ci95"]) in tables, CSV and DataFrames ---------------------

INTERVAL_COLUMNS = tuple(f"{key}_{end}" for key in (TEST_INTERVAL, SEED_INTERVAL) for end in ("low", "high"))


def _interval(result: SimilarityResult | None, key: str) -> tuple[float, float] | None:
    value = None if result is None else result.details.get(key)
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(isinstance(v, (int, float)) for v in value):
        return float(value[0]), float(value[1])
    return None


def _interval_cells(result: SimilarityResult) -> dict:
    """``{"test_ci95_low": ..., "test_ci95_high": ..., "seed_ci95_low": ..., ...}`` for the intervals present."""
    cells = {}
    for key in (TEST_INTERVAL, SEED_INTERVAL):
        bounds = _interval(result, key)
        if bounds is not None:
            cells[f"{key}_low"], cells[f"{key}_high"] = bounds
    return cells


def _format_interval(result: SimilarityResult | None) -> str:
    """`` [low, high]`` for a table cell: over seeds when the row has repeats, else over test samples."""
    bounds = _interval(result, SEED_INTERVAL) or _interval(result, TEST_INTERVAL)
    return "" if bounds is None or result is None or result.score is None else f" [{bounds[0]:.2f}, {bounds[1]:.2f}]"


def _interval_legend(results: list[SimilarityResult]) -> list[str]:
    seeds = sorted({int(r.details.get("repeats", 1)) for r in results if _interval(r, SEED_INTERVAL)})
    tests = any(_interval(r, TEST_INTERVAL) and not _interval(r, SEED_INTERVAL) for r in results)
    lines = []
    if seeds:
        lines.append(f"[low, high]: 95% interval of the mean over {'/'.join(map(str, seeds))} seeds "
                     f"(details: {TEST_INTERVAL} per stitch, scores per seed)")
    if tests:
        lines.append("[low, high]: 95% bootstrap interval over test samples (one seed)")
    return lines

