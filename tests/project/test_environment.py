"""The README's test command needs nothing but ``pip install -e ".[test]"``: every module that the tests, the
benchmarks, the lab scripts (some tests load them) and the pytest plugin import is the standard library, this
repository, or a distribution that the package or its test extra names directly (not one that some other
package happens to bring). A module that is optional for the suite is imported through ``pytest.importorskip``,
so its tests skip with the reason."""

from __future__ import annotations

import ast
import re
import sys
from importlib.metadata import packages_distributions

import tomllib

from tests.helpers.repo import ROOT, parsed
from tests.helpers.seeding import seed_of_test

SOURCES = ["tests", "benchmarks", "lab", "similarity_plugins_pytest"]
LOCAL = {"similarity_plugins", "similarity_plugins_pytest", "tests", "benchmarks", "lab"}


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared_distributions() -> set[str]:
    """The distributions ``pip install -e ".[test]"`` asks for by name: the dependencies and the test extra."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    requirements = project["dependencies"] + project["optional-dependencies"]["test"]
    return {_normal(re.split(r"[\s<>=!~;\[]", req, maxsplit=1)[0]) for req in requirements}


def imported_modules(path) -> tuple[set[str], set[str]]:
    """The top-level modules a file imports (absolute imports, at any depth), and those it imports only through
    ``pytest.importorskip`` or inside a ``try`` that handles its absence."""
    tree = parsed(path)
    imported, optional = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(_handles_missing(h.type) for h in node.handlers):
            for inner in (n for stmt in node.body for n in ast.walk(stmt)):
                if isinstance(inner, ast.Import):
                    optional.update(alias.name.split(".")[0] for alias in inner.names)
                elif isinstance(inner, ast.ImportFrom) and inner.level == 0 and inner.module:
                    optional.add(inner.module.split(".")[0])
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            imported.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "importorskip" and node.args \
                and isinstance(node.args[0], ast.Constant):
            optional.add(node.args[0].value.split(".")[0])
    return imported, optional


def _handles_missing(handler) -> bool:
    names = [handler] if not isinstance(handler, ast.Tuple) else handler.elts
    return handler is None or any(getattr(n, "id", None) in {"ImportError", "ModuleNotFoundError", "Exception"}
                                  for n in names)


def test_every_imported_module_is_installed_by_the_test_extra():
    declared = declared_distributions()
    providers = packages_distributions()
    files = [p for source in SOURCES for p in sorted((ROOT / source).rglob("*.py"))]
    siblings = {p.stem for p in files}  # benchmarks import their helper modules by name
    unexplained = {}
    for path in files:
        imported, optional = imported_modules(path)
        for module in sorted(imported - optional - LOCAL - siblings - set(sys.stdlib_module_names)):
            dists = {_normal(d) for d in providers.get(module, [])}
            if not dists & declared:
                unexplained.setdefault(module, []).append(path.relative_to(ROOT).as_posix())
    assert not unexplained, (
        "modules imported by tests or benchmarks that neither the package's dependencies nor its test extra name "
        f"(add the distribution to the `test` extra in pyproject.toml, or import it with pytest.importorskip): "
        f"{unexplained}")


def test_pages_render_with_the_markdown_extensions_of_the_test_extra():
    """The fast page checks render with mkdocs.yml's Markdown extensions; the test extra installs them."""
    declared = declared_distributions()
    assert {"markdown", "pymdown-extensions", "pyyaml", "pygments"} <= declared


def test_each_test_starts_from_its_own_seed(request):
    """tests/conftest.py seeds the global generators from the node id: a draw here is known in advance."""
    import numpy as np
    import torch

    seed = seed_of_test(request.node.nodeid)
    want_torch = torch.Generator().manual_seed(seed)
    assert torch.equal(torch.rand(3), torch.rand(3, generator=want_torch))
    assert np.random.rand() == np.random.RandomState(seed).rand()
