"""The site's pages as a reader sees them: rendered with the site's own Markdown extensions (mkdocs.yml).

Fast checks render each user page's Markdown (README.md as the home page and every page under docs/ but the
research notes in docs/lab/, with the build hook's generated tables filled in) with python-markdown and the
``markdown_extensions`` of mkdocs.yml, and read the package's docstrings (what the API reference renders). The
checks on the built site itself (reference headings, one entry per object, search index) are slow: they build it.
"""

from __future__ import annotations

import ast
import html
import importlib.util
import json
import re
from functools import lru_cache
from pathlib import Path

import markdown
import pytest
import yaml

from tests.helpers.repo import ROOT, parsed

ROLE = re.compile(r":(?:py:)?(?:class|func|mod|data|meth|attr|exc|obj):`")
SHOWN_ROLE = re.compile(r":(?:py:)?(?:class|func|mod|data|meth|attr|exc|obj):\s*[`~\w.]")  # as a page shows it
PARAGRAPH = re.compile(r"<p>(.*?)</p>", re.S)
LIST_LINE = re.compile(r"\n\s*(?:[-*+]|\d+\.) +\S")
HREF = re.compile(r'(?:href|src)="([^"]+)"')
WORKING_NOTES = {
    "an issue number": re.compile(r"\bissues?\s*#?\d+|#\d{2,}\b", re.I),
    "a round": re.compile(r"\bround\s+\d+|\bround by round\b", re.I),
    "a date": re.compile(r"\b20\d\d-\d\d-\d\d\b|\b(?:measured|run|ran)\s+on\s+\d{1,2}\s+\w+\s+20\d\d", re.I),
    "the state of a machine": re.compile(r"\b(?:loaded|busy|idle)\s+(?:\d+-core\s+)?(?:machine|box|host|cores?)\b"
                                         r"|\bother jobs\b|\b1-minute load\b|\bnot reproduced in\b|\bseen once\b"
                                         r"|\bunder load\b|\bmachine (?:was )?quiet\b|\bquiet machine\b"
                                         r"|\b\d+-core (?:machine|box|host)\b", re.I),
}
# How a measurement's machine was doing belongs with the measurement: the benchmarking guide may say it.
MACHINE_STATE_PAGES = {"benchmarking.md"}


def user_pages(root: Path = ROOT) -> list[Path]:
    """README.md (the home page) and every page under docs/ but the research notes (docs/lab/)."""
    docs = root / "docs"
    return [root / "README.md", *sorted(p for p in docs.rglob("*.md") if p.relative_to(docs).parts[0] != "lab")]


@lru_cache(maxsize=1)
def _hook():
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _ignore_python_tags(loader, suffix, node):
    return None


@lru_cache(maxsize=1)
def _extensions() -> tuple[list, dict]:
    class Loader(yaml.SafeLoader):  # a subclass: the constructor added below stays out of yaml's own loader
        pass

    Loader.add_multi_constructor("tag:yaml.org,2002:python/", _ignore_python_tags)
    loader = Loader
    config = yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=loader)
    names, configs = [], {}
    for entry in config["markdown_extensions"]:
        name, options = next(iter(entry.items())) if isinstance(entry, dict) else (entry, None)
        names.append(name)
        if options:
            configs[name] = options
    return names, configs


@lru_cache(maxsize=None)
def render(path: Path, root: Path = ROOT) -> str:
    """The HTML of one page, as the site renders its Markdown (generated tables filled in for this checkout)."""
    text = path.read_text(encoding="utf-8")
    if root == ROOT:
        text = _hook().expand_generated(text)
    names, configs = _extensions()
    return markdown.Markdown(extensions=names, extension_configs=configs).convert(text)


def collapsed_lists(page_html: str) -> list[str]:
    """Paragraphs that hold list items: a list that Markdown ran into the paragraph before it."""
    return [p[:80] for p in PARAGRAPH.findall(page_html) if LIST_LINE.search(p)]


def raw_roles(page_html: str) -> list[str]:
    text = html.unescape(re.sub(r"<[^>]+>", "", page_html))
    return [text[max(m.start() - 20, 0):m.end() + 30] for m in SHOWN_ROLE.finditer(text)]


def working_notes(page_html: str, machine_states: bool = True) -> list[str]:
    """Phrases of working notes in a page's text: issue numbers, rounds, dates of measurement and (unless
    ``machine_states`` is false) machine states."""
    text = html.unescape(re.sub(r"<[^>]+>", "", page_html))
    return [f"{what}: {m.group(0)!r}" for what, pattern in WORKING_NOTES.items() for m in pattern.finditer(text)
            if machine_states or what != "the state of a machine"]


def lab_links(page_html: str) -> list[str]:
    return [href for href in HREF.findall(page_html) if re.search(r"(?:^|/)lab/", href)]


def docstring_roles(root: Path = ROOT) -> list[str]:
    """``file:line`` of every docstring in the package that holds a raw Sphinx role."""
    found = []
    for path in sorted((root / "similarity_plugins").rglob("*.py")):
        for node in ast.walk(parsed(path)):
            body = getattr(node, "body", None)
            if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                    and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str) \
                    and ROLE.search(body[0].value.value):
                found.append(f"{path.relative_to(root)}:{body[0].lineno}")
    return found


def _per_page(check) -> dict[str, list[str]]:
    found = {}
    for path in user_pages():
        hits = check(render(path))
        if hits:
            found[path.relative_to(ROOT).as_posix()] = hits
    return found


def test_no_list_runs_into_the_paragraph_before_it():
    """Markdown needs a blank line before a list; without one the items show as one run-on paragraph."""
    assert not _per_page(collapsed_lists)


def test_no_page_and_no_docstring_shows_a_raw_sphinx_role():
    assert not _per_page(raw_roles)
    assert not docstring_roles(), ("write a cross-reference ([`Name`][similarity_plugins.path.Name]) or plain code "
                                   "(`Name`) instead of a Sphinx role")


def test_no_user_page_holds_working_notes():
    """Issue numbers, rounds, dates of measurement and the mood of the machine belong in commits and docs/lab/."""
    found = {}
    for path in user_pages():
        hits = working_notes(render(path), machine_states=path.name not in MACHINE_STATE_PAGES)
        if hits:
            found[path.relative_to(ROOT).as_posix()] = hits
    assert not found


def test_no_user_page_links_into_the_research_notes():
    assert not _per_page(lab_links)


YEAR_LINE = re.compile(r"^\s*(?:1[89]|20)\d\d\.\s", re.M)  # Markdown reads "2026. " at a line's start as a list item
MATH_AS_EMPHASIS = re.compile(r"\d<(?:strong|em)>")
PAPER_MENTION = re.compile(r"\bthe paper\b|\bpaper's\b", re.I)
AUTHOR_YEAR = re.compile(r"\b(?:et al\.|Felsberg|[A-Z][a-z]+),? \(?(?:19|20)\d\d\b")
LINK_TEXT_PATH = re.compile(r'<a href="[^"]*">(?:<code>)?[\w./-]+\.(?:md|py|json|yml|toml)(?:</code>)?</a>')


def typography(page_html: str) -> list[str]:
    """Arithmetic (``2**63``) taken for emphasis, a link whose text is a file path, and "the paper" on a page that
    cites no paper with its year."""
    found = [m.group(0) for pattern in (MATH_AS_EMPHASIS, LINK_TEXT_PATH) for m in pattern.finditer(page_html)]
    text = html.unescape(re.sub(r"<[^>]+>", "", page_html))
    if PAPER_MENTION.search(text) and not AUTHOR_YEAR.search(text):
        found.append("'the paper' without an author and year")
    return found


def year_lines(path: Path) -> list[str]:
    """``page:line`` of every line outside code blocks that starts with a year and a full stop."""
    text = re.sub(r"^```.*?^```", lambda m: "\n" * m.group(0).count("\n"), path.read_text(encoding="utf-8"),
                  flags=re.M | re.S)
    return [f"{path.name}:{text[:m.start()].count(chr(10)) + 1}" for m in YEAR_LINE.finditer(text)]


def test_pages_cite_with_years_and_link_with_titles():
    assert not _per_page(typography)
    assert not [hit for path in user_pages() for hit in year_lines(path)]
    bad = markdown.markdown("In [-2**63, 2**63). As the paper says: [docs/grids.md](grids.md).")
    assert len(typography(bad)) == 3, typography(bad)
    good = markdown.markdown("- Doe, Roe (2026). *A title*.\n\nIn `[-2**63, 2**63)`, as the paper (Doe et al. 2026) "
                             "says: [Grids and zoos](grids.md).")
    assert not typography(good)


CODE_WIDTH = 100  # characters of code the page column shows on a desktop without scrolling (docs/stylesheets)


def long_code_lines(path: Path) -> list[str]:
    """``page:line`` of every line of a fenced code block longer than ``CODE_WIDTH`` characters."""
    lines, found, fence = path.read_text(encoding="utf-8").splitlines(), [], None
    for n, line in enumerate(lines, 1):
        opening = re.match(r"^\s*(`{3,}|~{3,})", line)
        if opening and fence is None:
            fence = opening.group(1)
        elif fence is not None and line.strip().startswith(fence):
            fence = None
        elif fence is not None and len(line.rstrip()) > CODE_WIDTH:
            found.append(f"{path.name}:{n}")
    return found


def test_code_blocks_fit_the_column():
    assert not [hit for path in user_pages() for hit in long_code_lines(path)]


def test_the_checks_find_what_they_look_for():
    assert working_notes(markdown.markdown("Timed under load on a 2-core machine, then with the machine quiet."))
    assert len(working_notes(markdown.markdown("Timed under load on a 2-core machine."))) == 2
    page = ("Two kinds:\n- one\n- two\n\nMeasured on 2026-12-01 on the loaded machine (issue 32, round 4); "
            "see :class:`Report` and [notes](lab/iri_depth.md).\n")
    rendered = markdown.markdown(page)
    assert collapsed_lists(rendered) and raw_roles(rendered) and lab_links(rendered)
    assert {note.split(":")[0] for note in working_notes(rendered)} == set(WORKING_NOTES)
    fine = markdown.markdown("Two kinds:\n\n- one\n- two\n\nSee [`Report`][similarity_plugins.Report].\n")
    assert not (collapsed_lists(fine) or raw_roles(fine) or working_notes(fine) or lab_links(fine))


def test_generated_tables_list_every_registered_metric():
    import similarity_plugins as sp

    options_page = render(ROOT / "docs" / "options.md")
    metrics_page = render(ROOT / "docs" / "metrics.md")
    iris_page = render(ROOT / "docs" / "iris.md")
    names = _hook().builtin_metrics()
    assert len(names) >= 18 and set(names) <= set(sp.list_metrics())
    for name in names:
        assert f'id="{name}"' in options_page or f"<code>{name}</code>" in options_page, name
        assert f"<code>{name}</code>" in metrics_page, name
        for option in sp.metric_info(name).options:
            page = iris_page if option.startswith("iri_") else options_page  # one table for the iri_* options
            assert f"<code>{option}</code>" in page, (name, option)
    assert "<td><code>iri_precision</code></td>" not in options_page, "the IRI options table is repeated per metric"


def test_iri_page_tables_come_from_the_package():
    """The IRI options and tuning tables are generated: every option with its declared default, every tuning
    key with the value each preset gives it (no literal defaults on the page)."""
    import similarity_plugins as sp
    from similarity_plugins.iri import PRESETS
    from similarity_plugins.iri.settings import TUNING

    text = (ROOT / "docs" / "iris.md").read_text(encoding="utf-8")
    assert "<!-- generated: iri-options -->" in text and "<!-- generated: iri-tuning -->" in text
    assert "| `iri_steps` |" not in text and "| `lr` |" not in text
    page = render(ROOT / "docs" / "iris.md")
    info = sp.metric_info("iri-slm")
    for key, default in info.options.items():
        if key.startswith("iri_"):
            assert f"<td><code>{key}</code></td>\n<td><code>{'None' if default is None else default}</code></td>" in page, key
    for key in TUNING:
        assert f"<td><code>{key}</code></td>" in page, key
    lr_row = page.split("<td><code>lr</code></td>")[1].split("</tr>")[0]
    for name, preset in PRESETS.items():
        assert preset["lr"] == 0.2 or f"<code>{name}</code>" in lr_row, name


# ---- the built site (slow: builds it) ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def site(built_site) -> Path:
    out, done = built_site
    assert done.returncode == 0, done.stderr[-4000:]
    return out


HEADING_ID = re.compile(r'<h[2-6] id="([\w.]+)" class="doc doc-heading"')


def reference_headings(site_dir: Path) -> list[str]:
    """The dotted path of every object heading of the built API reference, in page order."""
    return [m for page in sorted((site_dir / "reference").rglob("index.html"))
            for m in HEADING_ID.findall(page.read_text(encoding="utf-8"))]


@pytest.mark.slow
def test_the_built_reference_is_readable(site):
    heads = reference_headings(site)
    assert len(heads) > 50
    private = [h for h in heads if re.match(r"_|[A-Z][A-Z0-9_]*$", h.split(".")[-1])]
    assert not private, private
    names = [h.split(".")[-1] for h in heads]
    twice = sorted({n for n in names if names.count(n) > 1 and n[0].isupper()})
    assert not twice, twice
    pages = [p.read_text(encoding="utf-8") for p in (site / "reference").rglob("index.html")]
    assert not [r for page in pages for r in raw_roles(page)]
    assert all('class="doc-signature' in page for page in pages)


@pytest.mark.slow
def test_the_built_site_keeps_the_research_notes_out(site):
    index = json.loads((site / "search" / "search_index.json").read_text(encoding="utf-8"))
    assert not [d["location"] for d in index["docs"] if d["location"].startswith("lab/")]
    assert "<loc>" in (site / "sitemap.xml").read_text(encoding="utf-8")
    config = yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=yaml.SafeLoader)
    base = "/" + config["site_url"].split("://", 1)[1].split("/", 1)[1]  # the site's path under its host
    assert f'href="{base}assets/stylesheets/' in (site / "404.html").read_text(encoding="utf-8")
    for page in site.rglob("*.html"):
        assert not lab_links(page.read_text(encoding="utf-8")), page


def test_the_speed_table_is_the_saved_run():
    run = json.loads((ROOT / "docs" / "results" / "bench-small.json").read_text(encoding="utf-8"))
    page = render(ROOT / "docs" / "results" / "speed.md")
    assert "<!-- generated" not in page
    for bench in run["benchmarks"]:
        median = f"{bench['stats']['median']:.3f}"
        assert re.search(rf"<code>{re.escape(bench['extra_info']['metric'])}</code>.*?{re.escape(median)}", page, re.S), bench
