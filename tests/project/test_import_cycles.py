"""No import cycle between the modules of one package (a layer, a family, the CLI): read statically with ``ast``,
so an import inside a function (a lazy import, the usual way a cycle is hidden) counts as much as one at the top.

Import-linter's layers contract (tests/test_layers.py) keeps arrows between packages pointing down; this test
covers the arrows inside each package, which that contract does not see."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.helpers.repo import ROOT, parsed

PACKAGE = ROOT / "similarity_plugins"


def _module_name(path: Path, top: Path) -> str:
    """``TOP/similarity_plugins/cli/compare.py`` -> ``similarity_plugins.cli.compare`` (a package: its own name)."""
    parts = path.relative_to(top).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules(root: Path, top: Path) -> dict[str, Path]:
    """Every module of the tree under ``root``, by dotted name (from the import root ``top``)."""
    return {_module_name(path, top): path for path in sorted(root.rglob("*.py")) if "__pycache__" not in path.parts}


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules of ``known`` that ``path`` (module ``name``) imports anywhere in its body: ``import a.b``,
    ``from a import b`` (the submodule ``a.b`` when there is one, else ``a``) and relative imports."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            source = node.module if not node.level else ".".join(p for p in (base, node.module) if p)
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                found.add(submodule if submodule in known else source)
    return {module for module in found if module in known and module != name}


def import_cycles(root: Path = PACKAGE, top: Path = ROOT) -> list[list[str]]:
    """The import cycles among sibling modules (the modules directly inside one package) under ``root``, a
    package importable from ``top``: each as the list of its modules, sorted; an empty list when there is none.
    Edges to other packages are left out: those are the layers contract's business."""
    modules = _modules(root, top)
    known = set(modules)
    parent = {name: name if path.name == "__init__.py" else name.rpartition(".")[0] for name, path in modules.items()}
    graph = {name: sorted(m for m in _imports(name, path, known) if parent[m] == parent[name])
             for name, path in modules.items()}
    return [sorted(component) for component in _strongly_connected(graph) if len(component) > 1]


def _strongly_connected(graph: dict[str, list[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of ``graph`` (iterative: no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(graph[nxt])))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    components.append(component)
    return components


def test_no_import_cycle_inside_a_package():
    cycles = import_cycles()
    assert not cycles, ("modules of one package that import each other (lazy imports included); move what both "
                        f"need into a third module: {cycles}")


@pytest.mark.parametrize("files,expected", [
    ({"a.py": "from . import b\n", "b.py": "def f():\n    from .a import g\n"}, [["pkg.a", "pkg.b"]]),
    ({"a.py": "import pkg.b\n", "b.py": "from .c import x\n", "c.py": "from pkg import a\n"},
     [["pkg.a", "pkg.b", "pkg.c"]]),
    ({"a.py": "from .b import x\n", "b.py": "from .c import y\n", "c.py": "import os\n"}, []),
    ({"a.py": "from .sub.m import x\n", "sub/__init__.py": "", "sub/m.py": "from ..a import y\n"}, []),
])
def test_the_cycle_finder_sees_lazy_and_relative_imports(tmp_path, files, expected):
    """The finder itself: a cycle through a lazy import, one through absolute and relative spellings, none in a
    chain, and an arrow between a package and a sub-package (not siblings: the layers contract's business)."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    for name, text in files.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(text)
    assert import_cycles(package, tmp_path) == expected
