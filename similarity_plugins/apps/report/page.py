"""The page itself: sections of charts, tables, text and images, written as one HTML file with its runtime inside.

Every chart is a ``<div data-chart="NAME">`` and every table a ``<table data-table="NAME">``: the names say what
each shows (``"heatmap cka-linear"``), so a reader's script or a test finds them. A number in a table shows
rounded, and carries the result's value unrounded in ``data-value`` and its hover title.
"""

from __future__ import annotations

import base64
import html
import json
import math
from dataclasses import dataclass, field
from typing import Any, Union


@dataclass
class Number:
    """A number in a table: ``value`` as the result holds it, shown in the format ``fmt`` (``".4f"``: scores,
    ``".3g"``: p-values, ``".2f"``: seconds)."""

    value: float | int | None
    fmt: str = ".4f"

    def text(self) -> str:
        """The rounded text shown (``"–"`` for None, a whole number or a non-finite value as it is)."""
        v = self.value
        if v is None:
            return "–"
        if isinstance(v, (bool, int)) or not math.isfinite(v):
            return str(v)
        return format(v, self.fmt)


Cell = Union[str, Number, None]


@dataclass
class Chart:
    """A Vega-Lite chart: ``name`` (what it shows, unique on the page), ``spec`` and a caption."""

    name: str
    spec: dict
    caption: str = ""


@dataclass
class Table:
    """A table: ``name`` (unique on the page), column headers, rows of cells, and a caption."""

    name: str
    header: list[str]
    rows: list[list[Cell]]
    caption: str = ""


@dataclass
class Text:
    """Paragraphs of plain text (escaped) or a list of items."""

    paragraphs: list[str]
    items: bool = False
    note: bool = False


@dataclass
class Image:
    """An image embedded in the page: PNG bytes with a caption."""

    name: str
    png: bytes
    caption: str = ""


@dataclass
class Section:
    """A titled part of the page."""

    title: str
    parts: list[Chart | Table | Text | Image | "Section"] = field(default_factory=list)
    anchor: str = ""


STYLE = """
:root { --fg: #1d2430; --muted: #5b6472; --line: #d8dde5; --band: #f4f6f9; --accent: #2f5d9e; }
* { box-sizing: border-box; }
body { font: 14px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
       color: var(--fg); margin: 0; background: #fff; }
header { padding: 18px 28px 10px; border-bottom: 1px solid var(--line); }
header h1 { font-size: 22px; margin: 0 0 4px; }
header p { margin: 2px 0; color: var(--muted); }
nav { padding: 6px 28px; background: var(--band); border-bottom: 1px solid var(--line); position: sticky; top: 0;
      z-index: 2; font-size: 13px; }
nav a { color: var(--accent); margin-right: 14px; text-decoration: none; white-space: nowrap; }
main { padding: 4px 28px 30px; max-width: 1500px; }
section { margin: 18px 0 8px; }
h2 { font-size: 18px; border-bottom: 2px solid var(--line); padding-bottom: 3px; margin: 26px 0 10px; }
h3 { font-size: 15px; margin: 18px 0 6px; }
p.note { color: var(--muted); font-size: 13px; }
figure { margin: 10px 0 16px; }
figcaption { color: var(--muted); font-size: 12.5px; margin-top: 4px; max-width: 1100px; }
.chart { overflow-x: auto; }
figure.chart-figure { display: inline-block; vertical-align: top; margin: 10px 36px 16px 0; max-width: 100%; }
figure.chart-figure figcaption { max-width: 560px; }
.table-wrap { overflow-x: auto; margin: 8px 0 14px; }
table { border-collapse: collapse; font-size: 13px; }
th, td { border: 1px solid var(--line); padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: var(--band); font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.err { color: #9b1c1c; max-width: 520px; }
td.code { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 12px; word-break: break-all; }
img { max-width: 100%; border: 1px solid var(--line); }
footer { color: var(--muted); font-size: 12px; padding: 12px 28px 24px; border-top: 1px solid var(--line); }
.vega-bindings { margin: 4px 0 8px; }
"""

SCRIPT = """
(function () {
  var specs = JSON.parse(document.getElementById("sp-specs").textContent);
  function tooltip(value, escape) {  // a row's fields, without the sort keys Vega-Lite adds to it
    if (value === null || typeof value !== "object") { return escape(String(value)); }
    return "<table>" + Object.keys(value).filter(function (key) { return !/_sort_index$/.test(key); })
      .map(function (key) {
        return "<tr><td class=\\"key\\">" + escape(key) + "</td><td class=\\"value\\">" + escape(String(value[key]))
          + "</td></tr>";
      }).join("") + "</table>";
  }
  var options = {renderer: "svg", mode: "vega-lite", tooltip: {formatTooltip: tooltip},
                 actions: {export: true, source: false, compiled: false, editor: false}};
  var jobs = Object.keys(specs).map(function (id) {
    var box = document.getElementById(id);
    return vegaEmbed(box, specs[id], options).then(function () { box.setAttribute("data-drawn", "yes"); },
      function (error) { box.textContent = "This chart could not be drawn: " + error; console.error(error); });
  });
  Promise.all(jobs).then(function () { document.body.setAttribute("data-charts", "drawn"); });
})();
"""


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _cell(cell: Cell) -> str:
    if isinstance(cell, Number):
        value = "" if cell.value is None else repr(cell.value)
        title = f' title="{_e(value)}" data-value="{_e(value)}"' if value else ""
        return f'<td class="num"{title}>{_e(cell.text())}</td>'
    return "<td></td>" if cell is None else f"<td>{_e(cell)}</td>"


def _table(t: Table) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in t.header)
    body = "".join("<tr>" + "".join(_cell(c) for c in row) + "</tr>" for row in t.rows)
    caption = f"<figcaption>{_e(t.caption)}</figcaption>" if t.caption else ""
    return (f'<figure><div class="table-wrap"><table data-table="{_e(t.name)}"><thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table></div>{caption}</figure>")


def _text(t: Text) -> str:
    css = ' class="note"' if t.note else ""
    if t.items:
        return "<ul>" + "".join(f"<li>{_e(p)}</li>" for p in t.paragraphs) + "</ul>"
    return "".join(f"<p{css}>{_e(p)}</p>" for p in t.paragraphs)


def _image(i: Image) -> str:
    data = base64.b64encode(i.png).decode("ascii")
    caption = f"<figcaption>{_e(i.caption)}</figcaption>" if i.caption else ""
    return f'<figure data-image="{_e(i.name)}"><img alt="{_e(i.caption or i.name)}" src="data:image/png;base64,{data}">' \
           f"{caption}</figure>"


def _parts(parts: list, specs: dict[str, dict], schema: str, depth: int) -> str:
    out = []
    for part in parts:
        if isinstance(part, Chart):
            box = f"chart-{len(specs)}"
            specs[box] = {"$schema": schema, **part.spec}
            caption = f"<figcaption>{_e(part.caption)}</figcaption>" if part.caption else ""
            out.append(f'<figure class="chart-figure"><div class="chart" id="{box}" data-chart="{_e(part.name)}"></div>'
                       f"{caption}</figure>")
        elif isinstance(part, Table):
            out.append(_table(part))
        elif isinstance(part, Text):
            out.append(_text(part))
        elif isinstance(part, Image):
            out.append(_image(part))
        elif isinstance(part, Section):
            out.append(_section(part, specs, schema, depth + 1))
    return "".join(out)


def _section(s: Section, specs: dict, schema: str, depth: int) -> str:
    tag = "h2" if depth == 0 else "h3"
    anchor = f' id="{_e(s.anchor)}"' if s.anchor else ""
    return f"<section{anchor}><{tag}>{_e(s.title)}</{tag}>{_parts(s.parts, specs, schema, depth)}</section>"


def _json_in_script(payload: Any) -> str:
    """JSON text that cannot end its ``<script>`` element early (``<`` written as ``\\u003c``)."""
    return json.dumps(payload, separators=(",", ":"), allow_nan=False).replace("<", "\\u003c")


def page_html(title: str, lines: list[str], sections: list[Section], runtime: str, versions: dict[str, str],
              footer: str) -> str:
    """The whole page as HTML text.

    Args:
        title: the page's title (also its heading).
        lines: short lines under the heading (what was compared).
        sections: the page's sections in order (each with an ``anchor`` is linked from the bar at the top).
        runtime: the charts' JavaScript runtime (`runtime.vega_runtime`), inlined once.
        versions: ``{"vega", "vega-lite", "vega-embed"}`` versions of the runtime.
        footer: a line for the foot of the page (the package and its version).

    Returns:
        The HTML text: scripts, styles, data and images inside, nothing loaded from elsewhere.
    """
    specs: dict[str, dict] = {}
    schema = f"https://vega.github.io/schema/vega-lite/v{versions['vega-lite'].split('.')[0]}.json"
    body = "".join(_section(s, specs, schema, 0) for s in sections)
    links = "".join(f'<a href="#{_e(s.anchor)}">{_e(s.title)}</a>' for s in sections if s.anchor)
    made = (f"{footer} Charts: Vega {versions['vega']}, Vega-Lite {versions['vega-lite']}, vega-embed "
            f"{versions['vega-embed']} (BSD-3-Clause), inlined: this file opens without a network.")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{_e(title)}</title><style>{STYLE}</style>"
            f"<script>{runtime}</script></head><body>"
            f"<header><h1>{_e(title)}</h1>{''.join(f'<p>{_e(line)}</p>' for line in lines)}</header>"
            f"<nav>{links}</nav><main>{body}</main><footer>{_e(made)}</footer>"
            f'<script type="application/json" id="sp-specs">{_json_in_script(specs)}</script>'
            f"<script>{SCRIPT}</script></body></html>\n")
