"""The architecture page names every module of the package, each in the entry of its own package."""

from __future__ import annotations

import re

from tests.helpers.repo import ROOT

PACKAGE = ROOT / "similarity_plugins"


def package_entries(text: str) -> dict[str, str]:
    """``{"store/": entry text}`` of the page's bullets that open with a package in bold (``- **`store/`**:``)."""
    entries = re.split(r"^- ", text, flags=re.M)
    return {m.group(1): entry for entry in entries if (m := re.match(r"\*\*`([\w/]+/)`\*\*", entry))}


def unnamed_modules(text: str) -> list[str]:
    """The modules (``store/writing.py``) that the entry of their package does not name in backticks (``writing``
    or ``writing.py``); the package's own modules (``functional.py``) anywhere on the page."""
    entries = package_entries(text)
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        if path.name == "__init__.py" or "__pycache__" in relative.parts:
            continue
        folder = "/".join(relative.parts[:-1]) + "/" if len(relative.parts) > 1 else ""
        where = entries.get(folder, "") if folder else text
        if not re.search(rf"`{re.escape(path.stem)}(\.py)?`", where):
            missing.append(relative.as_posix())
    return missing


def test_the_check_finds_a_module_its_package_entry_leaves_out():
    page = "- **`store/`**: `store`, `paths.py`.\n- **`cli/`**: `writing`.\n`functional.py`\n"
    missing = unnamed_modules(page)
    assert "store/writing.py" in missing and "store/store.py" not in missing and "store/paths.py" not in missing
    assert "functional.py" not in missing and "__main__.py" in missing


def test_the_architecture_page_names_every_module():
    assert not unnamed_modules((ROOT / "docs" / "architecture.md").read_text(encoding="utf-8"))
