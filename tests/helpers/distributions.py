"""Fake installed distributions for plugin-loading tests: a ``*.dist-info`` folder with ``entry_points.txt`` and
the modules beside it, found by ``importlib.metadata`` as a pip-installed package would be."""

from __future__ import annotations

import importlib
import textwrap
from pathlib import Path

import pytest

#: A module whose ``similarity`` hookimpl wraps every metric call and appends the metric's name to ``CALLS``.
RECORDING_WRAPPER = '''
import similarity_plugins

CALLS = []


@similarity_plugins.hookimpl(wrapper=True)
def similarity(metric):
    value = yield
    CALLS.append(metric)
    return value
'''


def install_distribution(root: Path, name: str, groups: dict[str, dict[str, str]], modules: dict[str, str]) -> None:
    """Write the distribution ``name`` into ``root`` (a folder on ``sys.path``).

    Args:
        root: the folder to write into.
        name: the distribution's name (``fake-single``).
        groups: ``{entry-point group: {entry-point name: "module[:object]"}}``.
        modules: ``{module name: source}`` (the source is dedented).
    """
    info = root / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    sections = [f"[{group}]\n" + "".join(f"{ep} = {target}\n" for ep, target in eps.items())
                for group, eps in groups.items()]
    (info / "entry_points.txt").write_text("\n".join(sections))
    for module, source in modules.items():
        (root / f"{module}.py").write_text(textwrap.dedent(source))


def put_on_path(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Put ``root`` on ``sys.path`` for the test and drop the process-wide plugin manager, so that its next use
    builds one from the distributions installed in ``root``."""
    from similarity_plugins.host import manager

    monkeypatch.syspath_prepend(str(root))
    importlib.invalidate_caches()
    monkeypatch.setattr(manager, "_pm", None)
