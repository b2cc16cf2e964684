"""The package's surface is what it says it is: every name an ``__all__`` lists exists, and a name with a leading
underscore stays inside its module (what another module needs is public inside the package, not imported
behind an underscore)."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import similarity_plugins
from tests.helpers.repo import ROOT, parsed

PACKAGE = ROOT / "similarity_plugins"


def _imported_module(path: Path, node: ast.ImportFrom) -> str:
    """The dotted module an ``ImportFrom`` in ``path`` (a file of the package) reads from."""
    if node.level == 0:
        return node.module or ""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)  # a package's __init__ counts as a module in it
    base = parts[: len(parts) - node.level]
    return ".".join(base + ([node.module] if node.module else []))


def private_imports(path: Path, source: str | None = None) -> list[str]:
    """``"file:line module.name"`` for every underscore name that ``path`` imports from a module of the package
    (dunder names such as ``__version__`` are public by convention)."""
    tree = ast.parse(source) if source is not None else parsed(path)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        module = _imported_module(path, node)
        if not module.startswith("similarity_plugins"):
            continue
        for alias in node.names:
            if alias.name.startswith("_") and not alias.name.startswith("__"):
                found.append(f"{path.relative_to(ROOT).as_posix()}:{node.lineno} {module}.{alias.name}")
    return found


def test_the_check_finds_an_underscore_import_in_any_spelling():
    path = PACKAGE / "cka" / "nodes.py"
    source = ("from .inputs import _as_rows, check\nfrom ..utils.text import _close\n"
              "from similarity_plugins.host import _x as x\nfrom numpy import _private\nfrom . import __version__\n")
    assert private_imports(path, source) == [
        "similarity_plugins/cka/nodes.py:1 similarity_plugins.cka.inputs._as_rows",
        "similarity_plugins/cka/nodes.py:2 similarity_plugins.utils.text._close",
        "similarity_plugins/cka/nodes.py:3 similarity_plugins.host._x",
    ]


def test_no_underscore_name_is_imported_across_modules():
    found = [hit for path in sorted(PACKAGE.rglob("*.py")) for hit in private_imports(path)]
    assert not found, ("underscore names imported from another module (make the name public inside its package, "
                       f"without adding it to __all__, or move the code to the module that uses it): {found}")


def test_every_name_in_every_all_exists():
    missing = []
    for info in pkgutil.walk_packages(similarity_plugins.__path__, "similarity_plugins."):
        if info.name.endswith(".__main__"):  # runs the command line on import
            continue
        module = importlib.import_module(info.name)
        missing += [f"{info.name}.{name}" for name in getattr(module, "__all__", ()) if not hasattr(module, name)]
    missing += [f"similarity_plugins.{name}" for name in similarity_plugins.__all__
                if not hasattr(similarity_plugins, name)]
    assert not missing, f"names listed in __all__ that the module does not define: {missing}"
