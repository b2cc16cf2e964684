"""Docs that cannot drift: every ```python / ```bash / ```sh / ```console block in README.md and docs/ is run.

A block is skipped only when the line right before its opening fence is ``<!-- not-run: REASON -->`` with a
non-empty reason (docs/testing.md). docs/lab/ (research notes, outside the site) is not checked.

- python blocks run (in the full suite; the fast suite checks that every block parses) as ``python -`` would,
  each in a fresh process in an empty temporary folder (forked from a server that has imported torch and
  similarity_plugins once: tests/helpers/docs_runner.py);
- shell blocks run with ``bash -e -o pipefail`` in an empty temporary folder, where ``python`` is this
  interpreter and ``similarity-plugins`` is ``python -m similarity_plugins``; a console block runs its
  ``$ ``-prefixed lines and ignores the output lines.

Both see this checkout first on ``PYTHONPATH``, one intra-op thread and a non-interactive matplotlib.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.docs_blocks import MARKER, RUN_LANGUAGES, Block, doc_files, docs_env, fenced_blocks, stray_markers
from tests.helpers.docs_runner import run_python
from tests.helpers.repo import ROOT

TIMEOUT_S = 120
ALL_BLOCKS = [b for p in doc_files() for b in fenced_blocks(p)]
RUN_BLOCKS = [b for b in ALL_BLOCKS if b.language in RUN_LANGUAGES and b.marker is None]


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
    env = docs_env()
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


@pytest.mark.slow  # a few seconds: builds the whole site, API reference included (once a session: built_site)
def test_the_site_builds_without_warnings(built_site):
    """``mkdocs build --strict`` (as .ci/run runs it): every nav page exists, every link and anchor resolves."""
    site, done = built_site
    assert done.returncode == 0, done.stderr[-4000:]
    assert (site / "index.html").read_text(encoding="utf-8").count('href="getting-started/"') >= 1
