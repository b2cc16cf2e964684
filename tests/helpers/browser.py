"""A real browser for the HTML report's checks: Debian's Chromium (``/usr/bin/chromium``, or ``$SP_CHROMIUM``), driven
headless through Playwright's Python package with its own driver and no browser download.

`visit` opens a page from a file with the network flags off and an empty profile, waits until every chart is drawn
(the page sets ``body[data-charts=drawn]``) and returns what a reader's browser saw: console messages, script errors,
requests, the charts drawn, the tables and images present, the time it took and a screenshot. Without Chromium or
Playwright the calling test is skipped, saying which is missing, or fails where ``SP_REQUIRE_BROWSER=1`` (CI sets it
and installs both: .ci/run, the test extra).
"""

from __future__ import annotations

import io
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field

import pytest

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def chromium() -> str:
    """The Chromium executable; skips the test (saying why) when it or Playwright is missing."""
    path = os.environ.get("SP_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    missing = pytest.fail if os.environ.get("SP_REQUIRE_BROWSER") == "1" else pytest.skip  # CI sets it (.ci/run)
    if not os.path.exists(path):
        missing(f"no Chromium at {path}: install Debian's chromium (apt-get install chromium) to run the browser "
                "checks of the HTML report; CI installs it (.ci/run)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing("the browser checks drive Chromium with Playwright, which is not installed (pip install -e '.[test]')")
    return path


@dataclass
class Visit:
    """What the browser saw of one page."""

    seconds: float                  # from the start of loading until every chart was drawn
    console: list[tuple[str, str]]  # (type, text) of every console message
    errors: list[str]               # uncaught script errors
    requests: list[str]             # every URL the page asked for
    charts: dict[str, bool]         # chart name -> drawn (an <svg> inside it)
    tables: list[str]
    images: list[str]
    screenshot: bytes = field(repr=False, default=b"")


_CHARTS = "els => els.map(e => [e.dataset.chart, e.dataset.drawn === 'yes' && !!e.querySelector('svg')])"


def visit(path: str | os.PathLike, *, loads: int = 1, width: int = 1400, height: int = 1000) -> Visit:
    """Open the page at ``path`` in headless Chromium ``loads`` times (the fastest load's time is kept) and report.

    Args:
        path: an HTML file.
        loads: how many times to load it (timings on a shared machine vary); messages, errors and requests are
            those of the last load.
        width: the window's width in pixels.
        height: the window's height (the screenshot's size).

    Returns:
        A `Visit`.
    """
    from playwright.sync_api import sync_playwright

    executable = chromium()
    url = "file://" + os.path.abspath(os.fspath(path))
    with sync_playwright() as p, tempfile.TemporaryDirectory() as profile:
        context = p.chromium.launch_persistent_context(profile, executable_path=executable, headless=True, args=FLAGS,
                                                       viewport={"width": width, "height": height})
        try:
            page = context.new_page()
            best = float("inf")
            for _ in range(loads):
                console, errors, requests = [], [], []
                page.on("console", lambda m, out=console: out.append((m.type, m.text)))
                page.on("pageerror", lambda e, out=errors: out.append(str(e)))
                page.on("request", lambda r, out=requests: out.append(r.url))
                began = time.perf_counter()
                page.goto(url)
                page.wait_for_selector("body[data-charts=drawn]", timeout=60_000)
                best = min(best, time.perf_counter() - began)
            charts = dict(page.eval_on_selector_all("[data-chart]", _CHARTS))
            tables = page.eval_on_selector_all("table[data-table]", "els => els.map(e => e.dataset.table)")
            images = page.eval_on_selector_all("figure[data-image] img", "els => els.map(e => e.parentNode.dataset.image)")
            shot = page.screenshot()
        finally:
            context.close()
    return Visit(best, console, errors, requests, charts, tables, images, shot)


def first_tooltip(path: str | os.PathLike, chart: str) -> str:
    """The text of the tooltip shown when the pointer rests on the first mark of the chart named ``chart``."""
    from playwright.sync_api import sync_playwright

    executable = chromium()
    with sync_playwright() as p, tempfile.TemporaryDirectory() as profile:
        context = p.chromium.launch_persistent_context(profile, executable_path=executable, headless=True, args=FLAGS,
                                                       viewport={"width": 1400, "height": 1000})
        try:
            page = context.new_page()
            page.goto("file://" + os.path.abspath(os.fspath(path)))
            page.wait_for_selector("body[data-charts=drawn]", timeout=60_000)
            mark = page.query_selector(f'[data-chart="{chart}"] svg .mark-rect path')
            mark.scroll_into_view_if_needed()
            box = mark.bounding_box()
            page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
            page.wait_for_selector("#vg-tooltip-element.visible", timeout=10_000)
            return page.inner_text("#vg-tooltip-element")
        finally:
            context.close()


def blank(png: bytes) -> bool:
    """Whether a screenshot is blank: fewer than 16 distinct colours (a page with text and charts has hundreds)."""
    from PIL import Image

    colours = Image.open(io.BytesIO(png)).convert("RGB").getcolors(maxcolors=1 << 20)  # None: more than that
    return colours is not None and len(colours) < 16
