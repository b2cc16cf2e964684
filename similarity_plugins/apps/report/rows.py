"""A result row as the page's charts and tables read it: its score, interval, p-value, calibrated score, seconds
and error under the words the page shows, each value as the result holds it."""

from __future__ import annotations

import math
from typing import Any

from ...host.results import SEED_INTERVAL, TEST_INTERVAL, SimilarityResult
from .page import Number


def interval_of(result: SimilarityResult) -> tuple[float, float, str] | None:
    """``(low, high, over)``: the row's 95% interval, over seeds when it was repeated, else over test samples."""
    for key, over in ((SEED_INTERVAL, "seeds"), (TEST_INTERVAL, "test samples (bootstrap)")):
        value = result.details.get(key)
        if isinstance(value, (list, tuple)) and len(value) == 2 and all(_number(v) for v in value):
            if key == SEED_INTERVAL:
                over = f"{result.details.get('repeats', '?')} seeds"
            return float(value[0]), float(value[1]), over
    return None


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _detail(result: SimilarityResult, key: str) -> Any:
    value = result.details.get(key)
    return value if _number(value) else None


def result_fields(result: SimilarityResult) -> dict[str, Any]:
    """The row's values under the page's words (a value the row does not have is left out): ``score``, ``interval
    low``/``high``/``over``, ``p-value``, ``permutations``, ``null mean``, ``null std``, ``calibrated``, ``tau``,
    ``seconds``, ``error``."""
    out: dict[str, Any] = {"score": result.score}
    bounds = interval_of(result)
    if bounds is not None and result.score is not None:
        out["interval low"], out["interval high"], out["interval over"] = bounds
    for key, word in (("p_value", "p-value"), ("permutations", "permutations"), ("null_mean", "null mean"),
                      ("null_std", "null std"), ("calibrated", "calibrated"), ("tau", "tau")):
        out[word] = _detail(result, key)
    out["seconds"] = result.seconds
    out["error"] = result.error
    warnings = result.details.get("warnings")
    if warnings:
        out["warnings"] = "; ".join(str(w) for w in warnings)
    return out


def clean(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` for a chart's data: None left out, and a value that is not a finite number moved to ``"KEY (not
    finite)"`` as text, so that no axis meets it and the tooltip still shows it."""
    out = {}
    for key, value in row.items():
        if value is None:
            continue
        if isinstance(value, float) and not math.isfinite(value):
            out[f"{key} (not finite)"] = str(value)
        else:
            out[key] = value
    return out


#: the columns of `table_cells`
TABLE_HEADER = ["score", "95% low", "95% high", "interval over", "p-value", "calibrated", "seconds", "error or warnings"]


def table_cells(result: SimilarityResult) -> list:
    """The cells of a table row for ``result``, in `TABLE_HEADER` order."""
    fields = result_fields(result)
    return [Number(result.score), Number(fields.get("interval low")), Number(fields.get("interval high")),
            fields.get("interval over"), Number(fields.get("p-value"), ".3g"), Number(fields.get("calibrated")),
            Number(result.seconds, ".2f"), result.error or fields.get("warnings")]
