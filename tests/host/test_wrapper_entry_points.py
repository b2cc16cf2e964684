"""A wrapper of every metric call installed through the documented entry-point group ``similarity_plugins`` is found
when the plugin manager is built, by reading the entry point's module without importing it, and imported then: it sees
the first ``compare`` call. The metric entry points of the same group stay unimported until their names are needed."""

from __future__ import annotations

import importlib
import sys
import types
import warnings

import pytest
import torch
from torch.utils.data import TensorDataset

import similarity_plugins as sp
from similarity_plugins.host.entrypoints import declares_wrapper
from tests.helpers.distributions import RECORDING_WRAPPER as MODULE_WRAPPER
from tests.helpers.distributions import install_distribution, put_on_path
from tests.helpers.models import tiny_cnn

CLASS_WRAPPER = '''
from similarity_plugins import hookimpl

CALLS = []


class Metricish:
    @hookimpl
    def similarity(self):
        return 1.0


class Timer:
    @hookimpl(hookwrapper=True)
    def similarity(self, metric):
        yield
        CALLS.append(metric)


TIMER = Timer()
'''

METRIC = '''
import similarity_plugins


@similarity_plugins.hookimpl
def similarity():
    return 1.0
'''

REEXPORTED = '''
from wrap_impl_mod import similarity  # the wrapper is written in another module
'''

PACKAGE_INIT = '''
raise RuntimeError("the package's __init__ must not run while the manager reads its submodule")
'''

MODULES = ("wrap_module_mod", "wrap_class_mod", "wrap_metric_mod", "wrap_reexport_mod", "wrap_impl_mod", "wrap_pkg",
           "wrap_pkg.inner")


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """Fake distributions declaring in the group ``similarity_plugins``: a module wrapper, a class wrapper (by class
    and by instance), a metric, and a wrapper imported from another module; the manager is rebuilt from them."""
    monkeypatch.delenv("SIMILARITY_PLUGINS", raising=False)
    monkeypatch.delenv("SIMILARITY_PLUGINS_DISABLE_AUTOLOAD", raising=False)
    group = "similarity_plugins"
    install_distribution(tmp_path, "wrap-module", {group: {"module-timer": "wrap_module_mod"}},
                         {"wrap_module_mod": MODULE_WRAPPER})
    install_distribution(tmp_path, "wrap-class", {group: {"class-timer": "wrap_class_mod:Timer"}},
                         {"wrap_class_mod": CLASS_WRAPPER})
    install_distribution(tmp_path, "wrap-metric", {group: {"wrap-one": "wrap_metric_mod"}},
                         {"wrap_metric_mod": METRIC})
    install_distribution(tmp_path, "wrap-reexport", {group: {"late-timer": "wrap_reexport_mod"}},
                         {"wrap_reexport_mod": REEXPORTED, "wrap_impl_mod": MODULE_WRAPPER})
    put_on_path(tmp_path, monkeypatch)
    yield tmp_path
    for module in MODULES:
        sys.modules.pop(module, None)


def test_a_wrapper_in_the_metrics_group_sees_the_first_compare_call(installed):
    model = tiny_cnn()
    data = sp.Data(test=TensorDataset(torch.rand(12, 1, 16, 16), torch.zeros(12, dtype=torch.long)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # found and imported with the manager: no warning
        report = sp.compare(model, model, "block1", data, metrics=["cka-linear"], progress="never")
    assert report["cka-linear"].ok
    assert sys.modules["wrap_module_mod"].CALLS == ["cka-linear"]
    assert sys.modules["wrap_class_mod"].CALLS == ["cka-linear"]  # an old-style hookwrapper on a class
    # the metric and the wrapper written elsewhere stay unimported: only a wrapper found in its module's text loads
    assert "wrap_metric_mod" not in sys.modules and "wrap_reexport_mod" not in sys.modules
    assert sp.list_metrics("wrap-*") == ["wrap-one"]


def test_a_wrapper_the_manager_cannot_read_wraps_from_its_import_on_and_says_how_to_fix_it(installed):
    with pytest.warns(UserWarning, match=r"wrapper 'late-timer' of wrap-reexport was imported only now.*must be "
                                         r"written, not imported from another module; or declare it in the group "
                                         r"'similarity_plugins.wrappers'"):
        sp.list_metrics()
    x = torch.randn(10, 3, dtype=torch.float64)
    sp.score(x, 2 * x, "cka-linear")
    assert sys.modules["wrap_impl_mod"].CALLS == ["cka-linear"]


def test_the_manager_reads_a_module_without_importing_it_or_its_package(installed):
    package = installed / "wrap_pkg"
    package.mkdir()
    (package / "__init__.py").write_text(PACKAGE_INIT)
    (package / "inner.py").write_text(MODULE_WRAPPER)
    importlib.invalidate_caches()

    def ep(value: str) -> types.SimpleNamespace:
        return types.SimpleNamespace(value=value)

    assert declares_wrapper(ep("wrap_pkg.inner")) and "wrap_pkg" not in sys.modules
    assert declares_wrapper(ep("wrap_class_mod:Timer")) and declares_wrapper(ep("wrap_class_mod:TIMER"))
    assert not declares_wrapper(ep("wrap_class_mod:Metricish"))  # the class the entry point names is no wrapper
    assert not declares_wrapper(ep("wrap_metric_mod")) and not declares_wrapper(ep("wrap_reexport_mod"))
    assert not declares_wrapper(ep("no_such_module_here")) and not declares_wrapper(types.SimpleNamespace())
    (installed / "broken_syntax_mod.py").write_text("def similarity(:\n")
    assert not declares_wrapper(ep("broken_syntax_mod"))
    assert not {"wrap_class_mod", "wrap_metric_mod", "broken_syntax_mod"} & set(sys.modules)
