"""The lab stays out of the product tree and keeps up with the package: research scripts live in ``lab/`` (not
packaged), ``scripts/`` holds the developer tools only, ``benchmarks/`` pytest-benchmark files and their helpers
only, and every name a lab script imports from the package exists (a renamed or removed module or function
shows here, not the next time someone reruns a study)."""

from __future__ import annotations

import ast
import importlib

import tomllib

from tests.helpers.repo import ROOT, parsed

DEVELOPER_TOOLS = {"code_size.py", "iri_identity.py"}
BENCHMARK_HELPERS = {"conftest.py", "ratios.py"}


def package_imports(path) -> list[tuple[int, str, str | None]]:
    """``(line, module, name)`` of every absolute import from ``similarity_plugins`` in ``path`` (name None for
    ``import similarity_plugins.x``)."""
    found = []
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("similarity_plugins"):
            found += [(node.lineno, node.module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, None) for alias in node.names
                      if alias.name.startswith("similarity_plugins")]
    return found


def test_scripts_holds_the_developer_tools_only():
    assert {p.name for p in (ROOT / "scripts").glob("*.py")} == DEVELOPER_TOOLS


def test_benchmarks_holds_benchmark_files_and_their_helpers_only():
    names = {p.name for p in (ROOT / "benchmarks").glob("*.py")}
    assert names - BENCHMARK_HELPERS and all(n.startswith("bench_") for n in names - BENCHMARK_HELPERS), names


def test_the_lab_is_not_packaged_and_docs_keep_no_scripts():
    find = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["packages"]
    assert find["find"]["include"] == ["similarity_plugins*"]
    assert {p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.py")} <= {"hooks.py"}  # mkdocs


def test_every_package_name_a_lab_script_imports_exists():
    missing = []
    scripts = sorted((ROOT / "lab").glob("*.py"))
    assert scripts
    for path in scripts:
        for line, module, name in package_imports(path):
            try:
                imported = importlib.import_module(module)
            except ImportError as exc:
                missing.append(f"{path.name}:{line} {module} ({exc})")
                continue
            if name is not None and not hasattr(imported, name):
                try:
                    importlib.import_module(f"{module}.{name}")
                except ImportError:
                    missing.append(f"{path.name}:{line} {module}.{name}")
    assert not missing, f"lab scripts import what the package no longer has: {missing}"


def test_no_module_of_the_package_cites_the_research_notes():
    """The package's comments and docstrings say what and why; the notes' findings and history stay in docs/lab/ and
    the commit messages, so no module points a reader there."""
    citing = [f"{p.relative_to(ROOT).as_posix()}:{i}" for p in sorted((ROOT / "similarity_plugins").rglob("*.py"))
              for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if "docs/lab" in line]
    assert not citing, f"modules citing the research notes: {citing}"
