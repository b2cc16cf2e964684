"""The layering rule (pyproject.toml, ``[tool.importlinter]``) holds: lower layers never import higher ones."""

from __future__ import annotations

import pkgutil
import subprocess
import sys
from pathlib import Path

import tomllib

import similarity_plugins

ROOT = Path(__file__).resolve().parents[1]

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
