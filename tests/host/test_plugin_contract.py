"""The typed plugin contract, written once (`FIELDS`): `MetricPlugin`, `MetricInfo` and `Meaning` are made from it;
the registry, the runner and the plugin guide read it; plugins that do not subclass `MetricPlugin` (the example
package, a plain object, a function) get the same defaults."""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import types

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

import similarity_plugins as sp
from similarity_plugins.host.manager import DEFAULT_PLUGINS, MetricInfo, get_plugin_manager
from similarity_plugins.host.plugin import FIELDS, Meaning, MetricPlugin, attribute_table, plugin_attributes
from tests.helpers.repo import ROOT

DEFAULTS = {f.name: f.default for f in FIELDS if f.name != "description"}  # description: from the docstring


def _load_example(module: str) -> types.ModuleType:
    """A module of the example package under examples/plugin, imported from its file (not installed)."""
    spec = importlib.util.spec_from_file_location(module, ROOT / "examples" / "plugin" / f"{module}.py")
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return loaded


def _resolved(info: MetricInfo) -> dict:
    return {f.name: getattr(info, f.name) for f in FIELDS if f.name != "description"}


def test_metric_plugin_metric_info_and_meaning_are_made_from_the_one_list():
    names = [f.name for f in FIELDS]
    assert {"kind", "range", "symmetric", "invariances", "needs", "options", "activations_only", "deterministic",
            "family", "description"} == set(names)
    assert names == list(MetricPlugin.__annotations__)
    for f in FIELDS:
        assert getattr(MetricPlugin, f.name) == f.default and MetricPlugin.__annotations__[f.name] == f.type
        assert f.meaning.strip() and f"    {f.name} ({f.type}): {f.meaning}" in MetricPlugin.__doc__
    # every field is a field of MetricInfo, holding what its reader returns, with the same default
    fields = {f.name: (f.type, f.default) for f in dataclasses.fields(MetricInfo)}
    for f in FIELDS:
        assert fields[f.name] == (f.held, f.default), f.name
    assert set(fields) - set(names) == {"name", "package", "option_docs", "option_types", "error", "error_type"}
    assert Meaning._fields == tuple(f.name for f in FIELDS if f.recorded)
    info = sp.metric_info("cka-linear")
    assert info.meaning() == Meaning(**{name: getattr(info, name) for name in Meaning._fields})


def test_a_plain_object_with_no_attributes_gets_every_default(fresh_manager):
    class Bare:
        """A bare metric: always 0.5."""

        @sp.hookimpl
        def similarity(self):
            return 0.5

    sp.register_metric(Bare(), "bare")
    info = sp.metric_info("bare")
    assert _resolved(info) == DEFAULTS | {"options": None}
    assert info.description == "A bare metric: always 0.5."  # the first line of the docstring
    assert sp.score(np.ones((4, 2)), np.ones((4, 2)), metrics="bare")["bare"].error.startswith("ValueError")


def test_a_subclass_inherits_the_defaults_and_declares_its_own(fresh_manager):
    class Half(MetricPlugin):
        family = "toy"
        deterministic = True
        activations_only = True

        @sp.hookimpl
        def similarity(self):
            return 0.5

    sp.register_metric(Half, "half")
    info = sp.metric_info("half")
    assert (info.family, info.deterministic, info.activations_only, info.kind, info.options) == \
        ("toy", True, True, None, None)
    assert info.description == ""  # neither a description nor a docstring of its own (not MetricPlugin's)
    assert sp.score(np.ones((4, 2)), np.ones((4, 2)), metrics="half")["half"].score == 0.5


@pytest.mark.parametrize("attribute, value, message", [
    ("deterministic", 1, "`deterministic` must be True or False"),
    ("family", "", "`family` must be a non-empty word"),
    ("family", 3, "`family` must be a non-empty word"),
    ("kind", "similar", "`kind` must be 'similarity' or 'distance'"),
])
def test_a_malformed_attribute_is_a_load_error_naming_it(attribute, value, message):
    plugin = types.SimpleNamespace(similarity=lambda: 1.0, **{attribute: value})
    with pytest.raises(TypeError, match=re.escape(f"metric 'bad': {message}")):
        plugin_attributes(plugin, "bad")


def test_a_function_plugin_declares_the_same_attributes(fresh_manager):
    @sp.hookimpl
    def similarity(context, layer, front, end):
        """Mean of the front's activations."""
        return float(context.activations(front, layer.front, "test").mean())

    similarity.family, similarity.deterministic, similarity.activations_only = "toy", True, True
    sp.register_metric(similarity, "fn-mean")
    info = sp.metric_info("fn-mean")
    assert (info.family, info.deterministic, info.description) == ("toy", True, "Mean of the front's activations.")


def test_the_example_package_loads_without_subclassing(fresh_manager):
    cosine = _load_example("similarity_mean_cosine")
    sp.register_metric(cosine, "mean-cosine")
    family = _load_example("similarity_mean_stats")
    fresh_manager.load_family("example", types.SimpleNamespace(load=lambda: family), "similarity-mean-cosine")
    assert _resolved(sp.metric_info("mean-cosine")) == DEFAULTS | {"options": None}
    euclid = sp.metric_info("mean-euclidean")
    assert euclid.kind == "distance" and euclid.family is None and euclid.deterministic is False
    rng = np.random.default_rng(0)
    x = rng.standard_normal((12, 3))
    report = sp.score(x, 2 * x, metrics=["mean-cosine", "mean-euclidean"])
    assert report["mean-euclidean"].score == pytest.approx(float(np.linalg.norm(x.mean(0))), rel=1e-5)  # float32 mean
    assert report["mean-cosine"].error.startswith("ValueError")  # declares no activations_only: needs the models


def test_every_builtin_subclasses_the_contract_and_declares_its_family():
    pm = get_plugin_manager()
    families = {module.rsplit(".", 1)[1] for module in DEFAULT_PLUGINS}
    for name in sp.list_metrics():
        if pm.info[name].package != "similarity-plugins":
            continue
        assert isinstance(pm.hookimpl_for(name).plugin, MetricPlugin), name
        assert pm.info[name].family in families, name
    assert {pm.info[n].family for n in ("stitch-slm", "iri-slm", "cka-linear", "rsa")} == families


def test_stitch_and_iri_metrics_take_their_defaults_from_the_services():
    from similarity_plugins.iri.service import IRI_DEFAULTS
    from similarity_plugins.stitch.settings import StitchSettings

    stitch = {f.name: f.default for f in dataclasses.fields(StitchSettings) if f.name != "seed"}
    for objective in ("hlm", "slm", "dm", "fula"):
        assert sp.metric_info(f"stitch-{objective}").options == stitch
        assert sp.metric_info(f"iri-{objective}").options == {**stitch, **IRI_DEFAULTS}


def test_deterministic_is_read_from_the_registry(fresh_manager):
    calls = []

    class Counted(MetricPlugin):
        deterministic = True

        @sp.hookimpl
        def similarity(self, seed):
            calls.append(seed)
            return 1.0

    sp.register_metric(Counted, "counted")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 2))
    data = sp.Data(test=TensorDataset(torch.rand(4, 3), torch.zeros(4, dtype=torch.long)))
    row = sp.compare(model, model, "0", data, "counted", repeats=3)["counted"]
    assert calls == [0] and row.details["deterministic"] is True and row.details["scores"] == [1.0] * 3


def test_the_plugin_guide_shows_the_declared_contract():
    page = (ROOT / "docs" / "plugins.md").read_text()
    assert attribute_table() in page, "docs/plugins.md must hold attribute_table() as it renders now"


def test_the_hook_specification_names_every_attribute():
    from similarity_plugins.host import hookspecs

    for f in FIELDS:
        assert f"``{f.name}``" in hookspecs.__doc__, f.name
