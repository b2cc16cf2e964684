"""One source of truth for registration: built-ins once, taken names refused, colliding entry points skipped."""

from __future__ import annotations

import importlib
import types
import warnings

import pytest

import similarity_plugins as sp
from similarity_plugins.host import manager as manager_module
from similarity_plugins.host.manager import BUILTIN_PACKAGE, DEFAULT_PLUGINS, build_plugin_manager
from tests.helpers.repo import ROOT

BUILTINS = ["cka-linear", "cka-debiased", "cka-rbf", "procrustes", "cca", "svcca", "pwcca", "rsa", "linear-regression",
            "mutual-knn", "cknna", "stitch-hlm", "stitch-slm", "stitch-dm", "stitch-fula", "iri-hlm", "iri-slm", "iri-dm",
            "iri-fula"]


class _Two:
    """Always 2."""

    @sp.hookimpl
    def similarity(self):
        return 2.0


def _entry_point(name: str, dist: str, obj: object):
    return types.SimpleNamespace(name=name, dist=types.SimpleNamespace(name=dist), load=lambda: obj)


def test_builtins_are_listed_once_in_code():
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert "[project.entry-points.similarity_plugins]" not in pyproject and "plugins.cka:" not in pyproject
    pm = build_plugin_manager(load_entry_points=False)
    assert list(pm.info) == BUILTINS  # in the families' order
    assert {info.package for info in pm.info.values()} == {BUILTIN_PACKAGE}
    for module in DEFAULT_PLUGINS:  # each family registers itself through the hook third parties implement
        assert hasattr(importlib.import_module(module).register_metrics, "similarity_plugins_impl")


def test_a_taken_name_raises_unless_replace(fresh_manager):
    with pytest.raises(ValueError, match=r"'cka-linear' is taken by similarity-plugins; pass replace=True"):
        sp.register_metric(_Two, "cka-linear")
    assert sp.metric_info("cka-linear").package == BUILTIN_PACKAGE  # nothing changed
    assert sp.register_metric(_Two, "cka-linear", replace=True) == "cka-linear"
    assert sp.metric_info("cka-linear").options is None  # the new plugin declares nothing
    sp.register_metric(_Two, "two")
    with pytest.raises(ValueError, match="'two' is taken by"):
        sp.register_metric(_Two, "two")


def test_entry_point_that_collides_is_skipped_with_a_warning(monkeypatch):
    eps = [_entry_point("cka-linear", "evil-dist", _Two), _entry_point("two", "good-dist", _Two),
           _entry_point("two", "other-dist", _Two), _entry_point("stitch-slm", "similarity_plugins", _Two)]
    monkeypatch.setattr(manager_module, "_entry_points", lambda: eps)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pm = build_plugin_manager()
    messages = [str(w.message) for w in caught]
    assert any("'cka-linear' of evil-dist" in m and "taken by similarity-plugins" in m for m in messages), messages
    assert any("'two' of other-dist" in m and "taken by good-dist" in m for m in messages), messages
    assert len(messages) == 2  # the package's own (stale) entry points are skipped silently
    assert pm.info["cka-linear"].package == BUILTIN_PACKAGE and pm.info["cka-linear"].options is not None
    assert "two" not in pm.info and pm.claims == {"two": "good-dist"}  # known by name, not imported yet
    pm.load_all()
    assert pm.info["two"].package == "good-dist"
    assert pm.info["stitch-slm"].package == BUILTIN_PACKAGE


def test_disable_autoload_keeps_the_builtins(monkeypatch):
    monkeypatch.setattr(manager_module, "_entry_points", lambda: [_entry_point("two", "good-dist", _Two)])
    monkeypatch.setenv("SIMILARITY_PLUGINS_DISABLE_AUTOLOAD", "1")
    pm = build_plugin_manager()
    assert "two" not in pm.info and sorted(pm.info) == sorted(BUILTINS)


def test_function_plugin_opts_in_with_attributes(fresh_manager):
    @sp.hookimpl
    def similarity(options):
        """Returns alpha."""
        return options["alpha"]

    similarity.options = {"alpha": 0.25}
    similarity.needs = ("test",)
    sp.register_metric(similarity, "alpha-metric")
    info = sp.metric_info("alpha-metric")
    assert info.options == {"alpha": 0.25} and info.needs == ("test",) and info.description == "Returns alpha."


def test_cli_list_shows_the_package_of_each_metric(capsys):
    from similarity_plugins.cli import main

    assert main(["list"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert len(rows) >= len(BUILTINS)
    for name in BUILTINS:
        assert any(r.startswith(name + " ") and BUILTIN_PACKAGE in r for r in rows), name
