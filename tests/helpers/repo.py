"""The repository's root and its scripts and benchmarks as importable modules."""

from __future__ import annotations

import importlib.util
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def load_repo_module(relative: str, name: str) -> types.ModuleType:
    """Import a repository script or benchmark (``relative`` to the repository root; not packages) as ``name``."""
    spec = importlib.util.spec_from_file_location(name, ROOT / relative)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
