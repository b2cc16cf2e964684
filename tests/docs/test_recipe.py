"""The recipe page (docs/own-models.md) prints what it shows: its example is run and its output compared.

The example block is marked not-run for tests/docs/test_docs.py: it runs once, here, with the slow tests (as the
other docs blocks do; a few seconds of training, stitching and IRIs). It runs as ``python -`` would, in an
empty folder (it saves and loads its own weights), and its output is compared with the ``text`` block that
follows it on the page: the same lines and words, numbers within 0.03 (float rounding differs across CPUs and
libraries), the time column left out.
"""

from __future__ import annotations

import re

import pytest

from tests.helpers.docs_blocks import docs_env, fenced_blocks
from tests.helpers.docs_runner import run_python
from tests.helpers.repo import ROOT

PAGE = ROOT / "docs" / "own-models.md"
NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def example_and_output() -> tuple[str, str]:
    """The page's tested example (the block whose marker names this file) and the text block after it."""
    blocks = fenced_blocks(PAGE)
    i = next(n for n, b in enumerate(blocks) if b.marker and "tests/docs/test_recipe.py" in b.marker)
    assert blocks[i + 1].language == "text"
    return blocks[i].code, blocks[i + 1].code


def comparable(output: str) -> list[list[str | float]]:
    """Each line as words and numbers, the last column of the report's rows (seconds) dropped."""
    lines, timed = [], False
    for line in output.strip().splitlines():
        timed = timed or line.rstrip().endswith("time (s)")
        words = line.split()
        if timed and words and words[0] in {"cka-linear", "procrustes", "svcca", "stitch-slm", "iri-slm"}:
            words = words[:-1]
        lines.append([float(w) if NUMBER.fullmatch(w.strip("[],")) else w for w in
                      (t.strip("[],") if NUMBER.fullmatch(t.strip("[],")) else t for t in words)])
    return lines


def same(shown: list, printed: list) -> bool:
    if len(shown) != len(printed):
        return False
    for a, b in zip(shown, printed):
        if len(a) != len(b):
            return False
        for x, y in zip(a, b):
            if isinstance(x, float) and isinstance(y, float):
                if abs(x - y) > 0.03:
                    return False
            elif x != y:
                return False
    return True


def test_the_comparison_helpers_see_a_difference():
    shown = "metric  block2  time (s)\ncka-linear  0.9040  0.3\n"
    assert same(comparable(shown), comparable("metric  block2  time (s)\ncka-linear  0.9100  12.0\n"))
    assert not same(comparable(shown), comparable("metric  block2  time (s)\ncka-linear  0.8000  0.3\n"))
    assert not same(comparable(shown), comparable("metric  block2  time (s)\ncka-rbf  0.9040  0.3\n"))


@pytest.mark.slow  # trains two small CNNs, fits a stitch and generates IRIs: about 10 s of CPU
def test_the_recipe_prints_the_report_it_shows(tmp_path):
    code, shown = example_and_output()
    status, out, err = run_python(code, tmp_path, docs_env(), timeout=300)
    assert status == 0, err[-3000:]
    assert (tmp_path / "a.pt").exists() and (tmp_path / "report.json").exists()
    assert same(comparable(shown), comparable(out)), f"the page shows:\n{shown}\nthe example printed:\n{out}"
