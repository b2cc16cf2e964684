"""The repository's root, its scripts and benchmarks as importable modules, and its files' syntax trees."""

from __future__ import annotations

import ast
import functools
import importlib.util
import os
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def load_repo_module(relative: str, name: str) -> types.ModuleType:
    """Import a repository script or benchmark (``relative`` to the repository root; not packages) as ``name``."""
    spec = importlib.util.spec_from_file_location(name, ROOT / relative)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def parsed(path: str | os.PathLike) -> ast.Module:
    """The syntax tree of the Python file at ``path``, parsed once a session per version of the file (several tests
    read the whole package's trees). Shared: read it, never change it."""
    stat = os.stat(path)
    return _parsed(os.fspath(path), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=None)
def _parsed(path: str, mtime_ns: int, size: int) -> ast.Module:
    with open(path, encoding="utf-8") as fh:
        return ast.parse(fh.read())
