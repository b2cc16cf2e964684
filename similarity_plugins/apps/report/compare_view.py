"""The page of a comparison (a `Report` of ``compare`` or ``score``), and of a study that made several.

Per cut, every metric side by side with its 95% interval and p-value, one y axis per kind of score
(`meaning.AXES`), so that a similarity is never read on a distance's scale; across cuts, one line per metric;
the numbers in a table; a line of plain words per metric; the provenance.
"""

from __future__ import annotations

from typing import Any, Mapping

from ...host.results import Report
from . import charts
from .meaning import AXES, axis_domain, axis_kind, axis_title, meaning_line, metric_infos
from .page import Chart, Image, Number, Section, Table, Text
from .provenance_view import provenance_parts, provenance_section
from .rows import TABLE_HEADER, clean, result_fields, table_cells

INTERVAL_NOTE = ("One y axis per kind of score. Bars: the 95% interval of each score (over seeds when the metric was "
                 "repeated, else a bootstrap over test samples; none where the metric gives none); p: the permutation "
                 "p-value where the metric ran a test. Hover a point for its exact values and time.")


def report_infos(report: Report) -> dict[str, dict]:
    """What each metric of ``report`` declares (`meaning.metric_infos` of its ``meta``)."""
    return metric_infos(report.metrics, report.meta.get("info"), report.meta.get("kinds"))


def _rows(report: Report, panel: str | None = None) -> list[dict]:
    rows = []
    for r in report.results:
        head = {"panel": panel} if panel is not None else {}
        rows.append(clean({**head, "metric": r.metric, "cut": str(r.layer), **result_fields(r)}))
    return rows


def _by_axis(metrics: list[str], infos: Mapping[str, dict]) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {kind: [] for kind in AXES}
    for m in metrics:
        groups[axis_kind(infos.get(m, {}))].append(m)
    return {k: v for k, v in groups.items() if v}


def score_charts(report: Report, infos: Mapping[str, dict], name: str) -> list:
    """One chart per kind of score: the metrics side by side at every cut (``name`` prefixes the chart names)."""
    parts: list = []
    rows = _rows(report)
    for kind, metrics in _by_axis(report.metrics, infos).items():
        mine = [r for r in rows if r["metric"] in metrics]
        if not any("score" in r for r in mine):  # only failed rows: the table shows their errors
            continue
        parts.append(Chart(f"{name} {kind}", charts.score_panels(mine, metrics, report.layers, axis_title(kind),
                                                                  axis_domain([infos.get(m, {}) for m in metrics])),
                           f"{axis_title(kind).capitalize()}: {', '.join(metrics)}."))
    return [Text([INTERVAL_NOTE], note=True)] + parts if parts else parts


def sweep_charts(reports: Mapping[str, Report], infos: Mapping[str, dict], name: str) -> list:
    """Score against depth, one chart per kind of score, one panel per comparison (none for a single cut)."""
    cuts = list(dict.fromkeys(c for rep in reports.values() for c in rep.layers))
    if len(cuts) < 2:
        return []
    metrics = list(dict.fromkeys(m for rep in reports.values() for m in rep.metrics))
    rows = [row for panel, rep in reports.items() for row in _rows(rep, panel)]
    parts: list = []
    for kind, chosen in _by_axis(metrics, infos).items():
        mine = [r for r in rows if r["metric"] in chosen]
        if not any("score" in r for r in mine):
            continue
        parts.append(Chart(f"{name} {kind}", charts.sweep_lines(mine, chosen, cuts, list(reports), axis_title(kind),
                                                                 axis_domain([infos.get(m, {}) for m in chosen])),
                           f"{axis_title(kind).capitalize()} against depth, shallow to deep."))
    return [Text([INTERVAL_NOTE], note=True)] + parts if parts else parts


def numbers_table(report: Report, name: str) -> Table:
    """Every row of ``report``: metric, cut, then the `rows.TABLE_HEADER` columns."""
    rows = [[r.metric, str(r.layer), *table_cells(r)] for r in report.results]
    return Table(name, ["metric", "cut", *TABLE_HEADER], rows,
                 "p-value: the permutation test's (1 + #null at least as extreme) / (K + 1), where the metric ran one "
                 "(option permutations=K). Numbers are rounded here; hover one (or read its data-value) for the "
                 "value in the result.")


def meaning_text(metrics: list[str], infos: Mapping[str, dict]) -> Text:
    """One line of plain words per metric, from what it declares."""
    return Text([meaning_line(m, infos.get(m, {})) for m in metrics], items=True)


def report_sections(report: Report) -> list[Section]:
    """The sections of a comparison's page."""
    infos = report_infos(report)
    sections = [Section("Scores side by side", score_charts(report, infos, "scores"), anchor="scores")]
    sweep = sweep_charts({"all metrics": report}, infos, "depth")
    if sweep:
        sections.append(Section("Across depth", sweep, anchor="depth"))
    sections += [Section("Numbers", [numbers_table(report, "numbers")], anchor="numbers"),
                 Section("What each score means", [meaning_text(report.metrics, infos)], anchor="meaning"),
                 provenance_section(report.meta)]
    return sections


def study_sections(study: Mapping[str, Any], reports: Mapping[str, Report], images: Mapping[str, tuple[bytes, str]],
                   notes: list[str]) -> list[Section]:
    """The sections of a study's page (the demo): its reading, the donors' accuracy, the comparisons across depth
    and per cut, the IRI gallery, what each score means and the provenance.

    Args:
        study: the study's JSON payload (``meta``, ``explanation``, ``donor_accuracy``, ``pairs``).
        reports: ``{pair title: Report}`` of its comparisons.
        images: ``{file name: (png bytes, caption)}`` embedded in the page.
        notes: lines about figures the study named but that were not found.
    """
    infos: dict[str, dict] = {}
    for rep in reports.values():
        infos.update(report_infos(rep))
    metrics = list(dict.fromkeys(m for rep in reports.values() for m in rep.metrics))
    sections = []
    if study.get("explanation"):
        sections.append(Section("What this shows", [Text([str(line) for line in study["explanation"]])],
                                anchor="reading"))
    accuracy = study.get("donor_accuracy") or {}
    if accuracy:
        tests = list(dict.fromkeys(t for row in accuracy.values() for t in row))
        rows = [[donor, *(Number(row.get(t)) for t in tests)] for donor, row in accuracy.items()]
        sections.append(Section("Donors", [Table("donor accuracy", ["donor", *tests], rows, "Test accuracy of each donor.")],
                                anchor="donors"))
    sections.append(Section("Across depth", sweep_charts(reports, infos, "depth"), anchor="depth"))
    per_pair = [Section(title, [*score_charts(rep, infos, f"scores {title}"), numbers_table(rep, f"numbers {title}")])
                for title, rep in reports.items()]
    sections.append(Section("Each comparison", per_pair, anchor="pairs"))
    if images or notes:
        parts: list = [Image(name, png, caption) for name, (png, caption) in images.items()]
        sections.append(Section("Figures", parts + ([Text(notes, note=True)] if notes else []), anchor="figures"))
    sections.append(Section("What each score means", [meaning_text(metrics, infos)], anchor="meaning"))
    meta = study.get("meta") or {}
    settings = Table("study settings", ["what", "value"], [[k, str(v)] for k, v in meta.items()])
    pairs = [Section(title, provenance_parts(rep.meta, f"provenance {title}")) for title, rep in reports.items()]
    sections.append(Section("Provenance", [settings, *pairs], anchor="provenance"))
    return sections
