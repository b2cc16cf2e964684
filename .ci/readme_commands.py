"""Print one of the README's two quick-start commands, exactly as README.md writes it.

``python .ci/readme_commands.py demo`` prints the command that installs the package and runs the demo;
``python .ci/readme_commands.py test`` the one that installs the test extra and runs the fast suite. `.ci/run`
runs what this prints, so a change to the README's quick start changes what CI runs, and a README whose quick
start no longer holds exactly these two one-line commands stops CI here with the reason.

Standard library only: CI calls it before any virtual environment exists.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
SECTION = "## Quick start"
FENCE = re.compile(r"^```bash\n(.*?)^```", re.S | re.M)
# Which block is which: the demo's block names the console command, the tests' block runs pytest.
KINDS = {"demo": "similarity-plugins demo", "test": "-m pytest"}


def quick_start_commands(readme: Path = README) -> dict[str, str]:
    """The quick start's commands by kind (``demo``, ``test``), each the one line of its ``bash`` block."""
    text = readme.read_text(encoding="utf-8")
    if SECTION not in text:
        raise SystemExit(f"{readme}: no '{SECTION}' section; CI runs the commands written there")
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    blocks = [block.strip() for block in FENCE.findall(section)]
    found: dict[str, str] = {}
    for block in blocks:
        lines = [line for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#")]
        kinds = [kind for kind, marker in KINDS.items() if marker in block]
        if len(lines) != 1 or len(kinds) != 1 or kinds[0] in found:
            raise SystemExit(f"{readme}: each bash block of '{SECTION}' must be one command, the demo's or the "
                             f"tests' ({', '.join(KINDS)}), each once; got {block!r}")
        found[kinds[0]] = lines[0].strip()
    missing = sorted(set(KINDS) - set(found))
    if missing:
        raise SystemExit(f"{readme}: '{SECTION}' lacks the {' and '.join(missing)} command")
    return found


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in KINDS:
        print(f"usage: python .ci/readme_commands.py {{{','.join(KINDS)}}}", file=sys.stderr)
        return 2
    print(quick_start_commands()[argv[0]])
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
