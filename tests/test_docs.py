"""Docs that cannot drift: every ```python / ```bash / ```sh / ```console block in README.md and docs/ is run.

A block is skipped only when the line right before its opening fence is ``<!-- not-run: REASON -->`` with a
non-empty reason (docs/testing.md). docs/lab/ (research notes, outside the site) is not checked.

- python blocks run (in the full suite; the fast suite checks that every block parses) as ``python -`` would,
  each in a fresh process in an empty temporary folder (forked from a server that has imported torch and
  similarity_plugins once: tests/docs_runner.py);
- shell blocks run with ``bash -e -o pipefail`` in an empty temporary folder, where ``python`` is this
  interpreter and ``similarity-plugins`` is ``python -m similarity_plugins``; a console block runs its
  ``$ ``-prefixed lines and ignores the output lines.

Both see this checkout first on ``PYTHONPATH``, one intra-op thread and a non-interactive matplotlib.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from docs_runner import run_python

ROOT = Path(__file__).resolve().parents[1]
RUN_LANGUAGES = {"python": "python", "py": "python", "bash": "shell", "sh": "shell", "shell": "shell",
                 "console": "console"}
MARKER = re.compile(r"^\s*<!--\s*not-run:(?P<reason>.*?)-->\s*$")
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*)$")
TIMEOUT_S = 120


@dataclass(frozen=True)
class Block:
    path: Path
    line: int          # 1-based line of the opening fence
    language: str      # the fence's info string (first word), lower case
    code: str
    marker: str | None  # the line before the fence, when it is a not-run marker

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT).as_posix()}:{self.line}"


def doc_files() -> list[Path]:
    """README.md and every Markdown file under docs/ but docs/lab/, in a stable order."""
    docs = sorted(p for p in (ROOT / "docs").rglob("*.md") if "lab" not in p.relative_to(ROOT / "docs").parts[:1])
    return [ROOT / "README.md", *docs]


def fenced_blocks(path: Path) -> list[Block]:
    """Every fenced code block of ``path`` (any language), with the not-run marker before it, if any."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks, i = [], 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        indent, fence = match["indent"], match["fence"]
        body, j = [], i + 1
        while j < len(lines) and not re.match(rf"^\s*{re.escape(fence[0])}{{{len(fence)},}}\s*$", lines[j]):
            body.append(lines[j][len(indent):] if lines[j].startswith(indent) else lines[j].lstrip())
            j += 1
        before = lines[i - 1] if i > 0 else ""
        language = (match["info"].split() or [""])[0].lower()
        blocks.append(Block(path, i + 1, language, "\n".join(body) + "\n", before if MARKER.match(before) else None))
        i = j + 1
    return blocks


def stray_markers(path: Path) -> list[int]:
    """1-based lines of not-run markers that are not right before an opening fence."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return [n + 1 for n, text in enumerate(lines) if MARKER.match(text)
            and not (n + 1 < len(lines) and FENCE.match(lines[n + 1]))]


ALL_BLOCKS = [b for p in doc_files() for b in fenced_blocks(p)]
RUN_BLOCKS = [b for b in ALL_BLOCKS if b.language in RUN_LANGUAGES and b.marker is None]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", MPLBACKEND="Agg", SIMILARITY_PROGRESS="never")
    return env


SHELL_PRELUDE = """set -e -o pipefail
python() { "$DOCS_PYTHON" "$@"; }
similarity-plugins() { "$DOCS_PYTHON" -m similarity_plugins "$@"; }
"""


def shell_script(block: Block) -> str:
    """The bash script that runs ``block``: its text, or for a console block its ``$ `` lines."""
    code = block.code
    if block.language == "console":
        code = "\n".join(line[2:] for line in code.splitlines() if line.startswith("$ ")) + "\n"
    return SHELL_PRELUDE + code


def run_block(block: Block, cwd: Path) -> subprocess.CompletedProcess:
    """Run ``block`` in ``cwd`` as the module docstring says; returns the finished process."""
    env = _env()
    if RUN_LANGUAGES[block.language] == "python":
        code, out, err = run_python(block.code, cwd, env, TIMEOUT_S)
        return subprocess.CompletedProcess(["python", "-"], code, out, err)
    env["DOCS_PYTHON"] = sys.executable
    return subprocess.run(["bash", "-s"], input=shell_script(block), cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=TIMEOUT_S)


@pytest.mark.slow  # every block runs in the full suite (CI runs it); the fast suite checks that each one parses
@pytest.mark.parametrize("block", RUN_BLOCKS, ids=[b.id for b in RUN_BLOCKS])
def test_doc_block_runs(block, tmp_path):
    done = run_block(block, tmp_path)
    assert done.returncode == 0, (
        f"{block.id}: this {block.language} block failed (exit {done.returncode}). Fix the block or the code, or "
        f"mark it with <!-- not-run: REASON --> on the line before its fence.\n--- stdout\n{done.stdout[-3000:]}"
        f"\n--- stderr\n{done.stderr[-3000:]}")


def test_every_runnable_block_parses():
    """The fast suite's share of the docs check: each runnable block is valid Python or valid bash."""
    bad = []
    for block in RUN_BLOCKS:
        if RUN_LANGUAGES[block.language] == "python":
            try:
                compile(block.code, block.id, "exec")
            except SyntaxError as error:
                bad.append(f"{block.id}: {error}")
            continue
        done = subprocess.run(["bash", "-n"], input=shell_script(block), capture_output=True, text=True, timeout=30)
        if done.returncode != 0:
            bad.append(f"{block.id}: {done.stderr.strip()}")
    assert not bad, "blocks that do not parse:\n" + "\n".join(bad)


def test_every_not_run_marker_gives_a_reason_and_sits_on_a_fence():
    empty = [b.id for b in ALL_BLOCKS if b.marker is not None and not MARKER.match(b.marker)["reason"].strip()]
    stray = [f"{p.relative_to(ROOT).as_posix()}:{n}" for p in doc_files() for n in stray_markers(p)]
    assert not empty, f"not-run markers without a reason: {empty}"
    assert not stray, f"not-run markers not on the line right before a code fence: {stray}"


CHECKER_PAGE = ("text\n\n```python\nraise SystemExit(3)\n```\n\n<!-- not-run: needs a GPU -->\n```bash\nexit 1\n```\n"
                "<!-- not-run:   -->\n```sh\ntrue\n```\n- item\n\n  ```console\n  $ similarity-plugins list --json\n"
                "  [output]\n  ```\n<!-- not-run: stray -->\n\ntext\n")


def test_the_checker_finds_blocks_and_markers(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(CHECKER_PAGE, encoding="utf-8")
    failing, marked, empty, console = fenced_blocks(page)
    assert (failing.language, failing.marker, failing.line) == ("python", None, 3)
    assert marked.marker is not None and MARKER.match(marked.marker)["reason"].strip() == "needs a GPU"
    assert empty.marker is not None and not MARKER.match(empty.marker)["reason"].strip()
    assert console.code == "$ similarity-plugins list --json\n[output]\n"
    assert stray_markers(page) == [21]


@pytest.mark.slow  # a forked Python block and the console entry in a fresh interpreter
def test_the_checker_runs_blocks_and_reports_failures(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(CHECKER_PAGE, encoding="utf-8")
    failing, _, _, console = fenced_blocks(page)
    assert run_block(failing, tmp_path).returncode == 3
    done = run_block(console, tmp_path)
    assert done.returncode == 0 and '"cka-linear"' in done.stdout


def test_the_docs_have_runnable_blocks():
    """The README's Python API example and at least a few pages run (a vanishing check would pass vacuously)."""
    assert any(b.path.name == "README.md" and b.language == "python" for b in RUN_BLOCKS)
    assert len({b.path for b in RUN_BLOCKS}) >= 4


@pytest.mark.slow  # a few seconds: builds the whole site, API reference included
def test_the_site_builds_without_warnings(tmp_path):
    """``mkdocs build --strict`` (as .ci/run runs it): every nav page exists, every link and anchor resolves."""
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings")
    env = dict(_env(), NO_MKDOCS_2_WARNING="1")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    assert (tmp_path / "site" / "index.html").read_text(encoding="utf-8").count('href="getting-started/"') >= 1
