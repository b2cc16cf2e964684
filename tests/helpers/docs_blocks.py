"""Fenced code blocks of README.md and docs/ and their not-run markers (docs/testing.md), and the environment
a block runs in."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from tests.helpers.repo import ROOT

RUN_LANGUAGES = {"python": "python", "py": "python", "bash": "shell", "sh": "shell", "shell": "shell",
                 "console": "console"}
MARKER = re.compile(r"^\s*<!--\s*not-run:(?P<reason>.*?)-->\s*$")
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*)$")


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


def docs_env() -> dict[str, str]:
    """The environment a docs block runs in: this checkout first on PYTHONPATH, one thread, Agg, no progress."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", MPLBACKEND="Agg", SIMILARITY_PROGRESS="never")
    return env
