"""List modules over a line budget and functions over a length budget (the code standard: ~400 / ~60).

Run from the repository root: ``python scripts/code_size.py [--max-module 400] [--max-function 60] [--skip iri]``.
Counts physical lines: a module whole, a function from its ``def`` or first decorator to its last line less its
docstring (a public function documents every argument, its return and its errors; that text is not the code
the budget keeps short). Exit status 1 when anything is over budget, so it can gate CI.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "similarity_plugins"


def docstring_lines(function: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """The number of lines of ``function``'s docstring (0 without one)."""
    first = function.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        return first.end_lineno - first.lineno + 1
    return 0


def long_functions(path: Path, limit: int) -> list[tuple[str, int, int]]:
    """(qualified name, first line, length in lines) of every function in ``path`` longer than ``limit``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                start = min([child.lineno] + [d.lineno for d in child.decorator_list])
                length = child.end_lineno - start + 1 - docstring_lines(child)
                if length > limit:
                    found.append((prefix + child.name, start, length))
                visit(child, prefix + child.name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")

    visit(tree, "")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-module", type=int, default=400)
    parser.add_argument("--max-function", type=int, default=60)
    parser.add_argument("--skip", action="append", default=[], help="sub-package to leave out (repeatable)")
    args = parser.parse_args(argv)
    over = 0
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE.parent)
        if any(part in args.skip for part in path.relative_to(PACKAGE).parts[:-1]):
            continue
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > args.max_module:
            print(f"module   {relative}: {lines} lines")
            over += 1
        for name, start, length in long_functions(path, args.max_function):
            print(f"function {relative}:{start} {name}: {length} lines")
            over += 1
    print(f"{over} over budget (modules > {args.max_module} lines, functions > {args.max_function} lines)")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
