"""The files a grid reads back, validated: the grid's JSON (`Grid.from_json`) and the finished-cells file of
``compare_grid(resume=path)``.

Both go through the one validated reader (`utils.readback`): a damaged, edited or foreign file raises
`BadFile` naming the file (and line) and what is wrong. Scores keep their value through the file, ``+inf``
and NaN included (`encode_float`).
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable

from ...host.results import SimilarityResult
from ...utils.readback import BadFile, encode_float, expect, line_digest, parse_json_line, read_json

GRID_FORMAT = "similarity-plugins grid"
CELLS_FORMAT = "similarity-plugins grid cells"
CELLS_VERSION = 3  # 3: fast_hash fingerprints, what each model reads with
Cell = tuple  # (metric, front index, end index)


def cell_result_dict(result: SimilarityResult) -> dict:
    """``result.to_dict()`` with a non-finite score kept (as ``"inf"``, ``"-inf"`` or ``"nan"``)."""
    return {**result.to_dict(), "score": encode_float(result.score)}


def grid_parts(payload: Any, source: str) -> tuple[list, list, dict, dict, dict, dict, dict, dict]:
    """``(nodes, metrics, cells, info, meta, block_nulls, cell_nulls, block_means)`` of a grid's `to_dict` payload,
    every part checked; `BadFile` naming ``source`` (the file, or "the grid dict") and the first problem."""
    def at(place: str = "") -> Callable[[], str]:
        return lambda: f"{source}{place}"

    expect(isinstance(payload, dict) and payload.get("format") == GRID_FORMAT, at(),
           f"not a similarity-plugins grid (expected format {GRID_FORMAT!r})")
    nodes, metrics, cells = payload.get("nodes"), payload.get("metrics"), payload.get("cells")
    expect(isinstance(nodes, list) and all(isinstance(n, list) and len(n) == 2 and all(isinstance(s, str) for s in n)
                                           for n in nodes), at(), "'nodes' must be a list of [model, layer] names")
    expect(len({tuple(n) for n in nodes}) == len(nodes), at(), "'nodes' lists a node twice")
    expect(isinstance(metrics, list) and all(isinstance(m, str) for m in metrics) and len(set(metrics)) == len(metrics),
           at(), "'metrics' must be a list of distinct metric names")
    expect(isinstance(cells, list), at(), "'cells' must be a list")
    out: dict[Cell, SimilarityResult] = {}
    for k, c in enumerate(cells):
        where = at(f", cell {k}")
        expect(isinstance(c, dict) and c.get("metric") in metrics, where, "the cell names no metric of the grid")
        i, j = c.get("front"), c.get("end")
        expect(all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < len(nodes) for v in (i, j)), where,
               f"front and end must be node indices 0..{len(nodes) - 1}, got {i!r} and {j!r}")
        expect((c["metric"], i, j) not in out, where, "the cell appears twice")
        result = SimilarityResult.from_dict(c.get("result"), where)
        expect(result.metric == c["metric"], where, f"the result is of metric {result.metric!r}, the cell of "
               f"{c['metric']!r}")
        out[(c["metric"], i, j)] = result
    info, meta = payload.get("info") or {}, payload.get("meta") or {}
    expect(isinstance(info, dict) and all(isinstance(v, dict) for v in info.values()), at(), "'info' must be an object")
    expect(isinstance(meta, dict), at(), "'meta' must be an object")
    expect(all(v.get("range") is None or (isinstance(v["range"], list) and len(v["range"]) == 2) for v in info.values()),
           at(), "a metric's 'range' in 'info' must be [low, high] or null")
    info = {m: {**v, "range": tuple(v["range"]) if v.get("range") else None} for m, v in info.items()}
    named = lambda v: isinstance(v, str)  # noqa: E731
    blocks = _nulls(payload.get("block_nulls") or [], metrics, at, "block_nulls", named, "model names")
    index = lambda v: isinstance(v, int) and not isinstance(v, bool) and 0 <= v < len(nodes)  # noqa: E731
    cell_nulls = _nulls(payload.get("cell_nulls") or [], metrics, at, "cell_nulls", index, "node indices")
    means = _nulls(payload.get("block_means") or [], metrics, at, "block_means", named, "model names")
    return [tuple(n) for n in nodes], metrics, out, info, meta, blocks, cell_nulls, means


def _nulls(entries: Any, metrics: list, at: Callable, field: str, ends: Callable[[Any], bool], names: str) -> dict:
    """Null values the grid keeps (`best.take_nulls`), checked: ``{(metric, front, end): [float, ...]}``.

    ``field``: ``"block_nulls"`` (each block's best null value per permutation, ``front`` and ``end`` model names),
    ``"block_means"`` (each block's mean null value per permutation, model names; a grid written before they were
    kept has none) or ``"cell_nulls"`` (a block's best cell's own null values, ``front`` and ``end`` node indices); ``ends``
    tells whether a front or end value is valid, ``names`` says what they must be."""
    expect(isinstance(entries, list), at(), f"'{field}' must be a list")
    nulls = {}
    for k, b in enumerate(entries):
        where = at(f", {field} {k}")
        expect(isinstance(b, dict) and b.get("metric") in metrics and ends(b.get("front")) and ends(b.get("end"))
               and isinstance(b.get("null"), list), where,
               f"an entry of '{field}' needs a metric of the grid, front and end {names} and a list of values")
        try:
            nulls[(b["metric"], b["front"], b["end"])] = [float(v) for v in b["null"]]
        except (TypeError, ValueError):
            expect(False, where, "the null values must be numbers")
    return nulls


def read_grid_file(path: str | os.PathLike) -> tuple[list, list, dict, dict, dict, dict, dict, dict]:
    """`grid_parts` of the grid JSON file ``path``."""
    return grid_parts(read_json(path, "grid file"), f"grid file {os.fspath(path)!r}")


class CellsFile:
    """The finished-cells file of ``compare_grid(resume=path)``: a header line (format, version, fingerprint and,
    for models that record it, where each came from: ``sources``, provenance outside the fingerprint), then one
    JSON line per finished cell carrying the SHA-256 of its contents and of the header's fingerprint (a header
    edited to match other models or data leaves every line unmatched).

    Reading: a last line cut short by an interruption (no final newline) is dropped, and cut from the file before
    anything is appended, so the next finished cell is a line of its own. Any other line that is not JSON, not a
    cell or does not match its digest raises `BadFile` naming the file and the line. Only cells of ``wanted``
    (the cells this call computes) are read back: a file written for more pairs or metrics serves the ones asked
    for and nothing else. Failed cells are computed again.
    """

    def __init__(self, path: str | os.PathLike, fingerprint: dict, nodes: list, wanted: set, write: bool,
                 sources: dict | None = None) -> None:
        self.path, self.fingerprint, self.nodes, self.write = os.fspath(path), fingerprint, nodes, write
        self.done: dict[Cell, SimilarityResult] = {}
        if os.path.exists(self.path):
            self._read(wanted)
        elif write:
            from ...utils.io import write_text

            header = {"format": CELLS_FORMAT, "version": CELLS_VERSION, "fingerprint": fingerprint}
            write_text(self.path, json.dumps({**header, **({"sources": sources} if sources else {})}) + "\n")

    def _where(self, number: int) -> Callable[[], str]:
        return lambda: f"resume file {self.path!r}, line {number}"

    def _read(self, wanted: set) -> None:
        try:
            with open(self.path, "rb") as fh:
                raw = fh.read()
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BadFile(f"resume file {self.path!r} is not a text file ({exc.reason} at byte {exc.start})") from None
        whole = text[:text.rfind("\n") + 1]  # a last line without its newline was cut short: dropped
        if self.write and len(whole) != len(text):
            with open(self.path, "r+b") as fh:
                fh.truncate(len(whole.encode("utf-8")))
        lines = whole.splitlines()
        expect(bool(lines), self._where(1), "the file is empty or its header was cut short; delete it to start again")
        header = parse_json_line(lines[0], self.path, 1, "resume file")
        expect(isinstance(header, dict) and header.get("format") == CELLS_FORMAT, self._where(1),
               "not a grid's finished-cells file")
        expect(header.get("version") == CELLS_VERSION, self._where(1),
               f"written by another version of the format ({header.get('version')!r}); delete it to start again")
        differ = self._differs(header.get("fingerprint"))
        if differ:
            raise ValueError(f"resume file {self.path!r} was written for other {', '.join(differ)}; "
                             "use another path or delete it to start again")
        index = {tuple(n): k for k, n in enumerate(self.nodes)}
        for number, line in enumerate(lines[1:], start=2):
            row = parse_json_line(line, self.path, number, "resume file")
            where = self._where(number)
            expect(isinstance(row, dict) and isinstance(row.get("cell"), dict), where, "not a finished cell")
            expect(row.get("digest") == line_digest({"fingerprint": header["fingerprint"], "cell": row["cell"]}), where,
                   "the line does not match its digest (changed after it was written); delete the file to start again")
            cell = row["cell"]
            front, end = cell.get("front"), cell.get("end")
            expect(all(isinstance(n, list) and len(n) == 2 for n in (front, end)), where, "front and end must be "
                   "[model, layer] pairs")
            result = SimilarityResult.from_dict(cell.get("result"), where)
            key = (cell.get("metric"), index.get(tuple(front)), index.get(tuple(end)))
            if key in wanted and result.error is None and result.metric == key[0]:
                self.done[key] = result

    def _differs(self, theirs: Any) -> list[str]:
        """What of this call's fingerprint the file's differs in; a metric the file has no options for has no
        cells there, so only the options of metrics both name must agree."""
        theirs = theirs if isinstance(theirs, dict) else {}
        differ = [k for k in self.fingerprint if k != "options" and theirs.get(k) != self.fingerprint[k]]
        mine, their_options = self.fingerprint.get("options", {}), theirs.get("options")
        if not isinstance(their_options, dict):
            return differ + ["options"]
        return differ + [f"options of {m}" for m in mine if m in their_options and their_options[m] != mine[m]]

    def add(self, cell: Cell, result: SimilarityResult) -> None:
        """Append ``result`` of ``cell`` as one line (flushed and synced)."""
        if not self.write:
            return
        metric, i, j = cell
        payload = {"metric": metric, "front": list(self.nodes[i]), "end": list(self.nodes[j]),
                   "result": cell_result_dict(result)}
        digest = line_digest({"fingerprint": self.fingerprint, "cell": payload})  # binds the line to its header
        line = json.dumps({"cell": payload, "digest": digest}, allow_nan=False)
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")
            fh.flush()
            os.fsync(fh.fileno())
