"""The HTML report: one self-contained page for a comparison, a grid or a zoo, or a study (the demo).

`write_html` draws a [`Report`][similarity_plugins.Report], a [`Grid`][similarity_plugins.Grid] or a study's
``report.json`` payload as one HTML file: charts (Vega-Lite, its runtime inlined: `runtime`), tables, the plain-words
meaning of every metric and the provenance, with nothing loaded from elsewhere. It draws from the result's JSON form
alone, so ``Report.to_html``, ``Grid.to_html`` and ``similarity-plugins report RESULT.json`` give the same page.
`read_result` reads such a file back. The page's parts: `compare_view`, `grid_view`, `zoo_view`,
`provenance_view`; its charts `charts`; its HTML `page`.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

from ...host.results import Report
from ...runner.grid.files import GRID_FORMAT, grid_parts
from ...runner.grid.results import Grid
from ...runner.provenance import package_version
from ...utils.io import write_text
from ...utils.readback import BadFile, read_json
from .compare_view import report_sections, study_sections
from .grid_view import grid_lines, grid_sections
from .page import Section, page_html
from .provenance_view import provenance_section
from .runtime import runtime_versions, vega_runtime

__all__ = ["write_html", "page_parts", "read_result"]


def _report_page(report: Report, title: str | None) -> tuple[str, list[str], list]:
    meta = report.meta
    if "x" in meta and "front" not in meta:
        pair = f"x {tuple(meta['x'])} vs y {tuple(meta.get('y') or ())}"
    else:
        pair = f"front {meta.get('front', '?')} vs end {meta.get('end', '?')}"
    lines = [f"{pair}; cuts: {', '.join(report.layers)}", f"metrics: {', '.join(report.metrics)}"]
    date = (meta.get("provenance") or {}).get("date")
    if date:
        lines.append(f"computed {date} (UTC)")
    return title or f"Comparison: {pair}", lines, report_sections(report)


def _grid_page(grid: Grid, title: str | None) -> tuple[str, list[str], list]:
    kind = "Zoo" if len(grid.models) >= 3 else "Grid"
    sections = grid_sections(grid) + [provenance_section(grid.meta)]
    return title or f"{kind}: {', '.join(grid.models)}", grid_lines(grid), sections


def _study_page(study: Mapping[str, Any], title: str | None, images: Mapping[str, tuple[bytes, str]],
                notes: list[str]) -> tuple[str, list[str], list]:
    reports = {name: Report.from_dict(payload, f"the study's pair {name!r}") for name, payload in study["pairs"].items()}
    meta = study.get("meta") or {}
    name = meta.get("study", "study")
    lines = [f"comparisons: {', '.join(reports)}", f"data: {meta.get('data', '?')}; seed {meta.get('seed', '?')}"]
    return title or f"The {name} study", lines, study_sections(study, reports, images, notes)


def page_parts(result: Report | Grid | Mapping[str, Any], *, title: str | None = None,
               images: Mapping[str, tuple[bytes, str]] | None = None,
               notes: list[str] | None = None) -> tuple[str, list[str], list[Section]]:
    """What the page of ``result`` shows: its title, the lines under it and its sections (see `write_html`).

    Returns:
        ``(title, lines, sections)``, drawn from the result's JSON form (`Report.to_dict`, `Grid.to_dict`).

    Raises:
        TypeError: ``result`` is not a `Report`, a `Grid` or a study's payload.
    """
    if isinstance(result, (Report, Grid)):  # its JSON form, read back by its own class (a subclass keeps its methods)
        copy = type(result).from_dict(result.to_dict())
        return _report_page(copy, title) if isinstance(copy, Report) else _grid_page(copy, title)
    if isinstance(result, Mapping) and isinstance(result.get("pairs"), Mapping):
        return _study_page(result, title, images or {}, list(notes or []))
    raise TypeError(f"an HTML report draws a Report, a Grid or a study's payload, not {type(result).__name__}")


def write_html(result: Report | Grid | Mapping[str, Any], path: str | os.PathLike | None = None, *,
               title: str | None = None, images: Mapping[str, tuple[bytes, str]] | None = None,
               notes: list[str] | None = None) -> str:
    """Draw ``result`` as one self-contained HTML page.

    Args:
        result: a `Report` (of ``compare`` or ``score``), a `Grid`, or a study's ``report.json`` payload (a dict
            with ``"pairs"``: ``{title: report dict}``, as the demo writes it).
        path: where to write the page (whole, atomically; parent folders created); None: only return it.
        title: the page's title; None: made from the result.
        images: ``{name: (png bytes, caption)}`` to embed (a study's IRI gallery).
        notes: lines to show under the images (a figure named by the study but not found).

    Returns:
        The page's HTML text (about 0.9 MB of it the inlined chart runtime).

    Raises:
        MissingExtra: the chart runtime (vl-convert-python) is not installed; the message names the install
            (`similarity_plugins.utils.extras`).
        TypeError: ``result`` is none of the above.
    """
    parts = page_parts(result, title=title, images=images, notes=notes)
    text = page_html(*parts, runtime=vega_runtime(), versions=runtime_versions(),
                     footer=f"Made by similarity-plugins {package_version()}.")
    if path is not None:
        write_text(path, text)
    return text


def read_result(path: str | os.PathLike) -> tuple[Report | Grid | dict, dict[str, tuple[bytes, str]], list[str]]:
    """A result file the package wrote, read back for `write_html`: ``(result, images, notes)``.

    Args:
        path: a report's JSON (``compare --out``, ``Report.to_json``), a grid's (``grid --out``, ``Grid.to_json``)
            or a study's ``report.json`` (``demo``, ``study``).

    Returns:
        The `Report`, `Grid` or study payload; for a study, the figures its ``meta["figures"]`` names that are
            found next to the file (``{name: (png bytes, caption)}``), and a note for each one that is not.

    Raises:
        BadFile: (a ``ValueError``) naming the file, when it is not valid JSON or none of these results.
        FileNotFoundError: the file does not exist.
    """
    source = f"result file {os.fspath(path)!r}"
    payload = read_json(path, "result file")
    if isinstance(payload, dict) and payload.get("format") == GRID_FORMAT:
        return Grid(*grid_parts(payload, source)), {}, []
    if isinstance(payload, dict) and isinstance(payload.get("results"), list):
        return Report.from_dict(payload, source), {}, []
    if isinstance(payload, dict) and isinstance(payload.get("pairs"), dict):
        for name, pair in payload["pairs"].items():
            Report.from_dict(pair, f"{source}, pair {name!r}")
        images, notes = {}, []
        folder = os.path.dirname(os.path.abspath(os.fspath(path)))
        for name, caption in ((payload.get("meta") or {}).get("figures") or {}).items():
            file = os.path.join(folder, os.path.basename(str(name)))
            try:
                with open(file, "rb") as fh:
                    images[str(name)] = (fh.read(), str(caption))
            except OSError as exc:
                notes.append(f"{name} ({caption}) is not shown: {exc.strerror or exc} ({file})")
        return payload, images, notes
    raise BadFile(f"{source} is not a result of similarity-plugins: expected a report (compare --out, "
                  "Report.to_json), a grid (grid --out, Grid.to_json) or a study's report.json (demo, study)")
