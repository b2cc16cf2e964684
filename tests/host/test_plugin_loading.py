"""Third-party plugins: the two entry-point forms, lazy imports, SIMILARITY_PLUGINS, name clashes, declared meaning.

The fake distributions are real ones: a ``*.dist-info`` folder with ``entry_points.txt`` and a module on
``sys.path``, found by ``importlib.metadata`` as an installed package would be. Each module records its
import in ``sys.modules`` (the side effect that lazy loading must avoid).
"""

from __future__ import annotations

import importlib
import sys
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

import similarity_plugins as sp
from similarity_plugins.host import manager as manager_module
from similarity_plugins.host.manager import build_plugin_manager
from similarity_plugins.host.registry import select_metrics
from tests.helpers.distributions import install_distribution, put_on_path

SINGLE = '''
"""Mean of the front's activations minus the end's (a single-metric entry point)."""
import similarity_plugins

@similarity_plugins.hookimpl
def similarity(front, end, layer, context):
    return float(context.activations(front, layer.front).mean() - context.activations(end, layer.end).mean())
'''

FAMILY = '''
"""Two metrics from one entry point."""
import similarity_plugins


class FamSim:
    """Cosine of the mean activations."""

    kind = "similarity"
    range = (-1, 1)
    symmetric = True
    invariances = ("isotropic-scaling",)
    activations_only = True

    @similarity_plugins.hookimpl
    def similarity(self, front, end, layer, context):
        import torch
        x, y = context.activations(front, layer.front).mean(0), context.activations(end, layer.end).mean(0)
        return float(torch.nn.functional.cosine_similarity(x, y, dim=0))


class FamDist(FamSim):
    """Euclidean distance of the mean activations."""

    kind = "distance"
    range = (0, float("inf"))
    invariances = ()

    @similarity_plugins.hookimpl
    def similarity(self, front, end, layer, context):
        x, y = context.activations(front, layer.front).mean(0), context.activations(end, layer.end).mean(0)
        return float((x - y).norm())


@similarity_plugins.hookimpl
def register_metrics(register):
    register("fam-sim", FamSim)
    register("fam-dist", FamDist)
'''

CLASH = '''
"""A family that reaches for names it does not own."""
import similarity_plugins


class Three:
    @similarity_plugins.hookimpl
    def similarity(self):
        return 3.0


@similarity_plugins.hookimpl
def register_metrics(register):
    register("cka-linear", Three, replace=True)   # a built-in: refused, replace=True or not
    register("fake-one", Three)                   # claimed by fake-single's entry point
    register("clash-three", Three)
    register("clash-three", Three, replace=True)  # its own: replaced
'''

BROKEN = '''
import similarity_plugins


class BadKind:
    kind = "similar"

    @similarity_plugins.hookimpl
    def similarity(self):
        return 0.0


class Fine:
    @similarity_plugins.hookimpl
    def similarity(self):
        return 1.0


@similarity_plugins.hookimpl
def register_metrics(register):
    register("bad-kind", BadKind)
    register("fine-one", Fine)
'''

DISTS = {  # distribution -> ({entry-point name: module}, {module: source})
    "fake-single": ({"fake-one": "fake_single_mod"}, {"fake_single_mod": SINGLE}),
    "fake-family": ({"fake-family": "fake_family_mod"}, {"fake_family_mod": FAMILY}),
    "fake-clash": ({"fake-clash": "fake_clash_mod"}, {"fake_clash_mod": CLASH}),
    "fake-broken": ({"fake-broken": "fake_broken_mod"}, {"fake_broken_mod": BROKEN}),
}
MODULES = [m for _, modules in DISTS.values() for m in modules]


def _install(root: Path, dists: list[str]) -> None:
    for dist in dists:
        eps, modules = DISTS[dist]
        install_distribution(root, dist, {"similarity_plugins": eps}, modules)


@pytest.fixture
def plugins_on_path(tmp_path, monkeypatch):
    """Install fake distributions (a function: ``plugins_on_path("fake-single", ...)``) on ``sys.path``;
    the process-wide manager is rebuilt from them on first use and dropped afterwards."""
    monkeypatch.delenv("SIMILARITY_PLUGINS", raising=False)
    monkeypatch.delenv("SIMILARITY_PLUGINS_DISABLE_AUTOLOAD", raising=False)

    def install(*dists: str) -> None:
        _install(tmp_path, list(dists))
        put_on_path(tmp_path, monkeypatch)

    yield install
    for module in MODULES:
        sys.modules.pop(module, None)


def _imported() -> set[str]:
    return {m for m in MODULES if m in sys.modules}


def _model_and_data():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))
    data = sp.Data(test=TensorDataset(torch.randn(12, 6), torch.zeros(12, dtype=torch.long)))
    return model, data


def test_a_known_name_imports_no_entry_point(plugins_on_path):
    plugins_on_path("fake-single", "fake-family")
    model, data = _model_and_data()
    report = sp.compare(model, model, "1", data, metrics="cka-linear")
    assert report["cka-linear"].ok
    sp.metric_info("cka-rbf")
    select_metrics(["cka-linear", "stitch-slm"])
    assert _imported() == set()


def test_the_compare_command_with_a_builtin_imports_no_entry_point(plugins_on_path, tmp_path, capsys):
    from similarity_plugins.cli import main

    plugins_on_path("fake-single", "fake-family")
    code = main(["compare", "--front", "small-cnn", "--end", "small-cnn", "--in-channels", "1", "--layer", "block2",
                 "--data", "digits", "--metrics", "cka-linear", "--max-test", "16", "--no-progress"])
    assert code == 0, capsys.readouterr().err
    assert _imported() == set()
    assert main(["list"]) == 0 and _imported() == {"fake_single_mod", "fake_family_mod"}


def test_a_single_metric_entry_point_is_imported_alone_when_named(plugins_on_path):
    plugins_on_path("fake-single", "fake-family")
    assert select_metrics("fake-one") == ["fake-one"]
    assert _imported() == {"fake_single_mod"}
    assert sp.metric_info("fake-one").package == "fake-single"


@pytest.mark.parametrize("ask", [
    lambda: select_metrics("fam-sim"),  # a name not known yet: a family may have it
    lambda: select_metrics("fam-*"),  # a wildcard
    lambda: select_metrics(None),  # the default selection
    lambda: sp.list_metrics(),
    lambda: sp.metric_info("fam-dist"),
], ids=["unknown-name", "wildcard", "default", "list", "info"])
def test_families_are_imported_when_their_names_are_needed(plugins_on_path, ask):
    plugins_on_path("fake-single", "fake-family")
    ask()
    assert _imported() == {"fake_single_mod", "fake_family_mod"}
    assert {"fake-one", "fam-sim", "fam-dist"} <= set(sp.list_metrics())
    assert sp.metric_info("fam-sim").package == "fake-family"


def test_an_unknown_name_still_fails_after_importing_everything(plugins_on_path):
    plugins_on_path("fake-single", "fake-family")
    with pytest.raises(sp.UnknownMetric, match="did you mean 'fam-sim'"):
        select_metrics("fam-sin")
    assert _imported() == {"fake_single_mod", "fake_family_mod"}


def test_family_metrics_run_in_compare_with_their_meaning(plugins_on_path, capsys):
    plugins_on_path("fake-family")
    model, data = _model_and_data()
    report = sp.compare(model, model, "1", data, metrics=["fam-sim", "fam-dist", "cka-linear"])
    assert report["fam-sim"].score == pytest.approx(1.0) and report["fam-dist"].score == pytest.approx(0.0)
    assert report.meta["kinds"] == {"fam-sim": "similarity", "fam-dist": "distance",
                                    "cka-linear": sp.metric_info("cka-linear").kind}
    table = str(report)
    assert "fam-dist (distance)" in table and "fam-sim (distance)" not in table and "lower is more alike" in table
    info = sp.metric_info("fam-dist")
    assert (info.kind, info.range, info.symmetric, info.invariances, info.activations_only) == (
        "distance", (0.0, float("inf")), True, (), True)

    from similarity_plugins.cli import main

    assert main(["list"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("fam-dist "))
    assert "fake-family" in row and "distance" in row and "[0, inf)" in row and "symmetric" in row
    assert main(["info", "fam-sim"]) == 0
    out = capsys.readouterr().out
    assert "similarity (higher: more alike), range [-1, 1], symmetric" in out and "isotropic-scaling" in out


@pytest.mark.parametrize("value, loaded", [
    ("fake-single", {"fake-one"}),
    ("Fake_Single , fake.family", {"fake-one", "fam-sim", "fam-dist"}),  # PEP 503 names: case, - _ . alike
    ("", set()),  # no third-party plugin at all
])
def test_similarity_plugins_loads_only_the_named_distributions(plugins_on_path, monkeypatch, value, loaded):
    plugins_on_path("fake-single", "fake-family")
    monkeypatch.setenv("SIMILARITY_PLUGINS", value)
    names = set(sp.list_metrics())
    assert names & {"fake-one", "fam-sim", "fam-dist"} == loaded
    assert "cka-linear" in names and "stitch-slm" in names  # the built-ins always load
    assert ("fake_family_mod" in sys.modules) == ("fam-sim" in loaded)


def test_similarity_plugins_warns_about_a_name_nothing_provides(plugins_on_path, monkeypatch):
    plugins_on_path("fake-single")
    monkeypatch.setenv("SIMILARITY_PLUGINS", "fake-singel")
    with pytest.warns(UserWarning, match=r"names 'fake-singel'.*did you mean 'fake-single'"):
        assert "fake-one" not in sp.list_metrics()


def test_disable_autoload_wins_over_similarity_plugins(plugins_on_path, monkeypatch):
    plugins_on_path("fake-single")
    monkeypatch.setenv("SIMILARITY_PLUGINS", "fake-single")
    monkeypatch.setenv("SIMILARITY_PLUGINS_DISABLE_AUTOLOAD", "1")
    assert "fake-one" not in sp.list_metrics() and _imported() == set()


def test_a_family_cannot_take_another_packages_name(plugins_on_path):
    plugins_on_path("fake-single", "fake-clash")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        names = sp.list_metrics()
    messages = [str(w.message) for w in caught]
    assert any("'cka-linear' of fake-clash" in m and "taken by similarity-plugins" in m
               and "replace=True replaces only a metric of the same package" in m for m in messages), messages
    assert any("'fake-one' of fake-clash" in m and "taken by fake-single" in m for m in messages), messages
    assert len(messages) == 2  # its own name replaced with replace=True: no warning
    assert sp.metric_info("cka-linear").package == "similarity-plugins"
    assert sp.metric_info("fake-one").package == "fake-single"
    assert "clash-three" in names and sp.metric_info("clash-three").package == "fake-clash"


def test_a_single_entry_point_named_after_a_taken_name_is_skipped_unimported(tmp_path, monkeypatch):
    DISTS["fake-evil"] = ({"cka-linear": "fake_single_mod"}, {"fake_single_mod": SINGLE})
    try:
        _install(tmp_path, ["fake-evil"])
        monkeypatch.syspath_prepend(str(tmp_path))
        importlib.invalidate_caches()
        with pytest.warns(UserWarning, match="'cka-linear' of fake-evil: the name is taken by similarity-plugins"):
            pm = build_plugin_manager()
        pm.load_all()
        assert pm.info["cka-linear"].package == "similarity-plugins" and "fake_single_mod" not in sys.modules
    finally:
        del DISTS["fake-evil"]
        sys.modules.pop("fake_single_mod", None)


def test_a_bad_declaration_is_a_load_error_naming_the_metric(plugins_on_path):
    plugins_on_path("fake-broken")
    assert {"bad-kind", "fine-one"} <= set(sp.list_metrics())
    info = sp.metric_info("bad-kind")
    assert info.error and "'bad-kind'" in info.error and "`kind` must be 'similarity' or 'distance'" in info.error
    assert sp.metric_info("fine-one").error is None  # the rest of the family still loads
    model, data = _model_and_data()
    report = sp.compare(model, model, "1", data, metrics=["bad-kind", "fine-one"])
    assert report["bad-kind"].error == info.error and report["fine-one"].score == 1.0


class _Plain:
    @sp.hookimpl
    def similarity(self):
        return 0.5


@pytest.mark.parametrize("attribute, value, message", [
    ("kind", "similar", "`kind` must be 'similarity' or 'distance'"),
    ("range", (1, 0), "lo < hi"),
    ("range", (0, "one"), "pair of numbers"),
    ("range", 1.0, "pair of numbers"),
    ("symmetric", "yes", "`symmetric` must be True or False"),
    ("invariances", ("orthogonl",), "unknown invariance 'orthogonl'; did you mean 'orthogonal'"),
    ("invariances", ("orthogonal", "orthogonal"), "lists a word twice"),
    ("activations_only", 1, "`activations_only` must be True or False"),
])
def test_malformed_meaning_is_refused(fresh_manager, attribute, value, message):
    plugin = type("Bad", (_Plain,), {attribute: value})
    with pytest.raises(TypeError, match="metric 'bad'") as caught:
        sp.register_metric(plugin, "bad")
    assert message in str(caught.value)
    assert "bad" not in fresh_manager.info


def test_undeclared_meaning_is_none_and_a_lone_word_is_a_tuple(fresh_manager):
    sp.register_metric(_Plain, "plain")
    info = sp.metric_info("plain")
    assert (info.kind, info.range, info.symmetric, info.invariances, info.activations_only) == (
        None, None, None, None, False)
    sp.register_metric(type("One", (_Plain,), {"invariances": "permutation", "range": [0, 1]}), "one")
    assert sp.metric_info("one").invariances == ("permutation",) and sp.metric_info("one").range == (0.0, 1.0)


@pytest.mark.parametrize("name", ["", "a b", "a,b", "cka-*", "x=1", 3])
def test_names_that_selection_cannot_read_are_refused(fresh_manager, name):
    with pytest.raises(ValueError, match="cannot name a metric"):
        sp.register_metric(_Plain, name)


def test_stitching_and_iri_declare_their_meaning():
    for name in sp.list_metrics(["stitch-*", "iri-*"]):
        info = sp.metric_info(name)
        assert (info.kind, info.range, info.symmetric, info.invariances, info.activations_only) == (
            "similarity", None, False, (), False), name


def _ep(name: str, dist: str, obj: object):
    import types

    return types.SimpleNamespace(name=name, dist=types.SimpleNamespace(name=dist), load=lambda: obj)


def _family(*calls):
    """A family object whose register_metrics makes ``calls``: (name, plugin, replace) triples, or an exception."""
    import types

    @sp.hookimpl
    def register_metrics(register):
        for call in calls:
            if isinstance(call, Exception):
                raise call
            name, plugin, replace = call
            register(name, plugin, replace=replace)

    return types.SimpleNamespace(register_metrics=register_metrics)


class _Both(_Plain):
    @sp.hookimpl
    def register_metrics(self, register):
        register("never", _Plain)


def test_family_errors_are_kept_under_the_entry_point_name(monkeypatch):
    eps = [_ep("fails", "dist-a", _family(("kept", _Plain, False), RuntimeError("no GPU here"))),
           _ep("both", "dist-b", _Both), _ep("nothing", "dist-c", object())]
    monkeypatch.setattr(manager_module, "_entry_points", lambda: eps)
    pm = build_plugin_manager()
    pm.load_all()
    assert pm.info["kept"].error is None and pm.info["kept"].package == "dist-a"  # registered before the failure
    assert "the metric family 'fails' from dist-a failed to load: RuntimeError: no GPU here" in pm.load_errors["fails"]
    assert "defines both `similarity` and `register_metrics`" in pm.load_errors["both"] and "never" not in pm.info
    assert "has no `similarity` hookimpl" in pm.load_errors["nothing"]


@pytest.mark.parametrize("family_first", [False, True])
def test_a_family_may_replace_its_own_packages_single_entry_point(monkeypatch, family_first):
    class Newer(_Plain):
        kind = "distance"

    eps = [_ep("old-name", "dist-a", _Plain), _ep("dist-a-family", "dist-a", _family(("old-name", Newer, True)))]
    eps = eps[::-1] if family_first else eps
    monkeypatch.setattr(manager_module, "_entry_points", lambda: eps)
    for order in (lambda pm: pm.ensure(["old-name"]), lambda pm: pm.load_all()):
        pm = build_plugin_manager()
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no clash warning either way
            order(pm)
            pm.load_all()
        assert pm.info["old-name"].kind == "distance" and pm.info["old-name"].package == "dist-a"
        assert pm.pending == [] and pm.claims == {}


def test_run_time_registration_of_a_claimed_name_imports_the_claimant_first(monkeypatch, fresh_manager):
    fresh_manager.add_entry_points([(_ep("two", "dist-a", _Plain), "dist-a")])
    with pytest.raises(ValueError, match="'two' is taken by dist-a"):
        sp.register_metric(_Plain, "two")
    assert sp.register_metric(_Plain, "two", replace=True) == "two" and sp.metric_info("two").package != "dist-a"


def test_list_and_info_json_carry_the_meaning(fresh_manager, capsys):
    import json

    from similarity_plugins.cli import main

    sp.register_metric(type("Dist", (_Plain,), {"kind": "distance", "range": (0, float("inf")), "symmetric": False,
                                                "invariances": ("orthogonal", "translation"), "activations_only": True}),
                       "dist")
    sp.register_metric(_Plain, "plain")
    assert main(["list", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["dist"]["kind"] == "distance" and rows["dist"]["range"] == [0.0, "inf"]
    assert rows["plain"]["kind"] is None and rows["plain"]["invariances"] is None
    assert main(["info", "dist", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["invariances"] == ["orthogonal", "translation"] and info["symmetric"] is False
    assert info["activations_only"] is True
    assert main(["info", "dist"]) == 0
    out = capsys.readouterr().out
    assert "distance (lower: more alike), range [0, inf), asymmetric" in out
    assert "invariant to: orthogonal, translation" in out and "activations only: yes" in out
    assert main(["info", "plain"]) == 0
    assert "meaning not declared" in capsys.readouterr().out


def test_a_report_without_kinds_marks_distances_as_registered(fresh_manager):
    sp.register_metric(type("Dist", (_Plain,), {"kind": "distance"}), "dist")
    report = sp.Report([sp.SimilarityResult("dist", 0.5, layer="x"), sp.SimilarityResult("cka-linear", 0.9, layer="x"),
                        sp.SimilarityResult("gone", 0.1, layer="x")])
    table = str(report)
    assert "dist (distance)" in table and "cka-linear (distance)" not in table and "gone (distance)" not in table
    report.meta["kinds"] = {"dist": "similarity"}  # what the report says wins
    assert "(distance)" not in str(report)
