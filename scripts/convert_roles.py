"""Rewrite the Sphinx roles in the package's docstrings as mkdocstrings cross-references or plain code.

``:class:`~pkg.mod.Name``` (and ``:func:``, ``:mod:``, ``:data:``, ``:meth:``, ``:attr:``, ``:exc:``, ``:obj:``)
becomes ``[`Name`][pkg.mod.Name]`` (or ``[`Name`][Name]`` where mkdocstrings' scoped cross-references resolve the
name as written to the same object) when the API reference (the ``:::`` lines of docs/reference/*.md and the
members those render) documents the target, so that the site links it, and ``` `Name` ``` otherwise, so that the
page shows plain code instead of the role's raw text. Targets are resolved as Sphinx does: a dotted path as given,
a leading ``.`` relative to the docstring's module or package, a bare name through the scopes around the
docstring (its class, its module and that module's imports). ``~`` shows the last component only.

Only docstrings change (the string literal that opens a module, class or function); code, comments and other
strings are left alone. Re-running it is safe: a converted docstring holds no role. Run from the repository root:

    python scripts/convert_roles.py            # rewrite in place, print a count per file
    python scripts/convert_roles.py --check    # exit 1 and list what a run would change
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

import griffe

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "similarity_plugins"
ROLE = re.compile(r":(?:py:)?(?P<kind>class|func|mod|data|meth|attr|exc|obj):`(?P<target>[^`]+)`")
DIRECTIVE = re.compile(r"^:::\s+(?P<path>[\w.]+)\s*$", re.M)
LINE_LENGTH = 130  # pyproject.toml's [tool.ruff] line-length: a line a link makes longer is wrapped
HIDDEN = re.compile(r"^_|^[A-Z][A-Z0-9_]*$")  # the reference's filters (mkdocs.yml): private names, constants


def documented_paths(package: griffe.Module) -> set[str]:
    """Every dotted path the API reference renders: each ``:::`` object and its public members, with canonical paths.

    Parameters:
        package: the package loaded by griffe.

    Returns:
        The set of dotted paths (alias paths and the paths of the objects they point to).
    """
    paths: set[str] = set()
    for page in sorted((ROOT / "docs" / "reference").glob("*.md")):
        for match in DIRECTIVE.finditer(page.read_text(encoding="utf-8")):
            try:
                _collect(package.modules_collection[match["path"]], paths, depth=0)
            except (KeyError, griffe.AliasResolutionError):
                continue
    return paths


def _collect(obj: griffe.Object | griffe.Alias, paths: set[str], depth: int) -> None:
    paths.add(obj.path)
    try:
        paths.add(obj.canonical_path)
        members = obj.members if obj.kind.value in ("module", "class") else {}
    except griffe.AliasResolutionError:
        return
    if depth > 1:
        return
    for name, member in members.items():
        if HIDDEN.match(name):
            continue
        try:
            if member.is_module or (member.is_alias and obj.is_module and not member.is_exported):
                continue  # submodules are not rendered (show_submodules is off), nor unexported imports
        except griffe.AliasResolutionError:
            continue
        _collect(member, paths, depth + 1)


def resolve(target: str, scope: griffe.Object) -> str | None:
    """The dotted path ``target`` names from a docstring of ``scope``, or None when nothing matches.

    Parameters:
        target: the role's target without ``~`` (``Name``, ``.mod.Name``, ``pkg.mod.Name``).
        scope: the object whose docstring holds the role.

    Returns:
        The full dotted path of the target (its canonical path when it is an import), or None.
    """
    collection = scope.modules_collection
    module = scope if scope.is_module else scope.module
    if target.startswith("."):
        bases = [module.path, module.parent.path if module.parent else module.path]
        candidates = [base + target for base in bases]
    elif "." in target and target.split(".")[0] == PACKAGE:
        candidates = [target]
    else:
        candidates, obj = [], scope
        while obj is not None:
            candidates.append(f"{obj.path}.{target}")
            obj = obj.parent
        candidates.append(f"{PACKAGE}.{target}")
    for path in candidates:
        try:
            found = collection[path]
            return found.canonical_path if found.is_alias else found.path
        except (KeyError, griffe.AliasResolutionError):
            continue
    return None


def scoped(identifier: str, scope: griffe.Object) -> str | None:
    """What mkdocstrings' scoped cross-references (``scoped_crossrefs``) make of ``identifier`` in ``scope``.

    Parameters:
        identifier: a dotted name as written in the docstring (``Name``, ``mod.Name``).
        scope: the object whose docstring holds it.

    Returns:
        The full dotted path it resolves to (canonical when it is an import), or None.
    """
    first, _, rest = identifier.partition(".")
    try:
        path = scope.resolve(first) + (f".{rest}" if rest else "")
        found = scope.modules_collection[path]
        return found.canonical_path if found.is_alias else found.path
    except (griffe.NameResolutionError, KeyError, griffe.AliasResolutionError):
        return None


def converted(docstring: str, scope: griffe.Object, documented: set[str]) -> str:
    """``docstring`` with every role replaced by a cross-reference (target documented) or plain code."""

    def replace(match: re.Match) -> str:
        target = match["target"].strip()
        short = target.startswith("~")
        target = target.lstrip("~")
        shown = target.lstrip(".").split(".")[-1] if short else target.lstrip(".")
        path = resolve(target, scope)
        if path is None or path not in documented:
            return f"`{shown}`"
        written = target.lstrip(".")
        return f"[`{shown}`][{written if scoped(written, scope) == path else path}]"

    return ROLE.sub(replace, docstring)


def _docstring_nodes(tree: ast.Module) -> list[tuple[ast.Constant, list[str]]]:
    """Each docstring literal of ``tree`` with the qualified name (path within the module) of its owner."""
    found = []

    def visit(node: ast.AST, names: list[str]) -> None:
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            found.append((body[0].value, names))
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                visit(child, [*names, child.name])

    visit(tree, [])
    return found


def convert_file(path: Path, package: griffe.Module, documented: set[str]) -> tuple[str, int]:
    """The text of ``path`` with its docstrings' roles converted, and how many roles changed."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    rel = path.relative_to(ROOT).with_suffix("")
    module_path = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
    module = package.modules_collection[module_path]
    count = 0
    for node, names in reversed(_docstring_nodes(ast.parse(text))):
        start, end = node.lineno - 1, node.end_lineno
        chunk = "".join(lines[start:end])
        if not ROLE.search(chunk):
            continue
        scope = module
        for name in names:
            scope = scope.members.get(name, scope)
        count += len(ROLE.findall(chunk))
        lines[start:end] = [wrapped for line in converted(chunk, scope, documented).splitlines(keepends=True)
                            for wrapped in _wrap(line)]
    return "".join(lines), count


def _wrap(line: str) -> list[str]:
    """``line`` split at spaces into lines of at most ``LINE_LENGTH`` characters, continuing its indentation."""
    if len(line.rstrip("\n")) <= LINE_LENGTH:
        return [line]
    stripped = line.lstrip(" ")
    indent = " " * (len(line) - len(stripped) + (2 if stripped.startswith("- ") else 0))
    cut = line.rfind(" ", len(indent) + 1, LINE_LENGTH + 1)
    if cut <= len(indent):
        return [line]
    return [line[:cut] + "\n", *_wrap(indent + line[cut + 1:])]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 when a role is left")
    args = parser.parse_args(argv)
    package = griffe.load(PACKAGE, search_paths=[str(ROOT)], resolve_aliases=True, resolve_external=False)
    documented = documented_paths(package)
    total = 0
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        new, count = convert_file(path, package, documented)
        if count:
            total += count
            print(f"{path.relative_to(ROOT)}: {count}")
            if not args.check:
                path.write_text(new, encoding="utf-8")
    print(f"{total} roles {'left' if args.check else 'converted'}")
    return 1 if args.check and total else 0


if __name__ == "__main__":
    sys.exit(main())
