"""The layering rule (pyproject.toml, ``[tool.importlinter]``) holds: lower layers never import higher ones."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import tomllib

import similarity_plugins
from tests.helpers.repo import ROOT, parsed

_LINT = (
    "import sys\n"
    "from importlinter import cli  # configures import-linter's readers and renderers\n"
    "from importlinter.application.use_cases import lint_imports\n"
    "sys.exit(0 if lint_imports(config_filename='pyproject.toml', no_logo=True, cache_dir=None) else 1)\n"
)


def _layers_contract() -> dict:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = [c for c in config["contracts"] if c["type"] == "layers"]
    return contract


def test_import_contracts_are_kept():
    """Run import-linter on the source tree (in a child process, so this session's imports do not matter)."""
    done = subprocess.run([sys.executable, "-c", _LINT], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"import-linter found a layering violation:\n{done.stdout}\n{done.stderr}"


def test_every_subpackage_has_a_layer():
    """A new sub-package must be placed in the contract, or it would escape the layering rule."""
    layered = set()
    for layer in _layers_contract()["layers"]:
        layered.update(name.strip().strip("()") for name in layer.split("|"))
    subpackages = {m.name for m in pkgutil.iter_modules(similarity_plugins.__path__) if m.ispkg}
    missing = subpackages - layered
    assert not missing, f"sub-packages {sorted(missing)} are in no layer: add them to [tool.importlinter] in pyproject.toml"
    assert {"host", "runner", "networks", "cka", "stitch", "iri", "plugins", "apps", "cli"} <= subpackages & layered


def _imported_modules(path) -> set[str]:
    """The absolute module names ``path`` imports (``import a.b`` and ``from a.b import c``), at any depth."""
    import ast

    names = set()
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_the_tests_mirror_the_package_and_import_no_other_test_module():
    """Every test module sits in a folder (the package's layers and families, docs, reliability), and none
    imports another test module: what they share lives in tests/helpers/ and the conftest.py files."""
    tests = ROOT / "tests"
    modules = sorted(tests.rglob("test_*.py"))
    loose = [p.name for p in modules if p.parent == tests and p.name != "test_layers.py"]
    assert not loose, f"test modules outside a folder of tests/: {loose}"
    stems = {p.stem for p in modules}
    dotted = {".".join(p.relative_to(ROOT).with_suffix("").parts) for p in modules}
    imports = {p.relative_to(ROOT).as_posix(): sorted(n for n in _imported_modules(p) if n in dotted or n in stems)
               for p in modules}
    offending = {path: names for path, names in imports.items() if names}
    assert not offending, f"test modules importing test modules (move what they share to tests/helpers/): {offending}"
    unpackaged = [d.relative_to(ROOT).as_posix() for d in tests.rglob("*") if d.is_dir()
                  and d.name not in {"__pycache__", "data"} and not (d / "__init__.py").exists()]
    assert not unpackaged, f"test folders without __init__.py (their modules would clash by name): {unpackaged}"
