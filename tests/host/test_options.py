"""Options are a declared, validated contract: declarations, refusal before any work, one KEY=VALUE grammar."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import similarity_plugins as sp
from similarity_plugins.apps.zoo import split_model_spec
from similarity_plugins.cli import main, parse_options
from similarity_plugins.iri.service import IRI_DEFAULTS
from similarity_plugins.stitch.settings import StitchSettings
from similarity_plugins.utils.text import did_you_mean, parse_assignments, parse_value
from tests.helpers.models import assert_unchanged, snapshot, tiny_cnn


class _Recorder:
    """A declared metric that records the options it receives."""

    options = (sp.Option("alpha", 0.5, "mixing weight"), sp.Option("max_samples", None, "first N samples"))
    needs = ("test",)
    seen: list = []

    @sp.hookimpl
    def similarity(self, options):
        _Recorder.seen.append(dict(options))
        return 1.0


class _Open:
    """A third-party metric that declares nothing: it takes any option."""

    seen: list = []

    @sp.hookimpl
    def similarity(self, options):
        _Open.seen.append(dict(options))
        return 1.0


# --------------------------------------------------------------------------- the one grammar


@pytest.mark.parametrize("text, value", [
    ("5", 5), ("1e-3", 1e-3), (".5", 0.5), ("1.", 1.0), ("-2", -2), ("true", True), ("yes", True), ("On", True),
    ("false", False), ("no", False), ("off", False), ("none", None), ("null", None), ("[0.5, 0.8]", [0.5, 0.8]),
    ('"5"', "5"), ("identity", "identity"), ("least-squares", "least-squares"), (" sum ", "sum"),
])
def test_parse_value(text, value):
    assert parse_value(text) == value and type(parse_value(text)) is type(value)


def test_option_flags_and_model_spec_queries_read_values_alike():
    spec = "torchvision:resnet18?cifar_stem=yes&width=32&lr=1e-3&tag=a-b&none_like=none@w.pt"
    _, _, query, weights = split_model_spec(spec)
    assert query == {"cifar_stem": True, "width": 32, "lr": 1e-3, "tag": "a-b", "none_like": None} and weights == "w.pt"
    assert parse_options(["cifar_stem=yes", "width=32", "lr=1e-3", "tag=a-b", "none_like=none"]) == query
    assert parse_assignments(["stitch_bn=yes", "epochs=2", "epochs=3"]) == {"stitch_bn": True, "epochs": 3}
    assert StitchSettings.from_options(parse_options(["stitch_bn=yes"])).stitch_bn is True
    with pytest.raises(ValueError, match="key=value"):
        split_model_spec("small-cnn?width")


def test_did_you_mean():
    assert did_you_mean("epoch", ["epochs", "lr"]) == "; did you mean 'epochs'?"
    assert did_you_mean("zzz", ["epochs", "lr"]) == ""


# --------------------------------------------------------------------------- declarations


def test_builtin_declarations_match_their_settings():
    stitch = {f.name: f.default for f in dataclasses.fields(StitchSettings) if f.name != "seed"}
    for name in ("stitch-hlm", "stitch-slm", "stitch-dm", "stitch-fula"):
        info = sp.metric_info(name)
        assert info.options == stitch and info.needs == ("train", "test")
        assert set(info.option_docs) == set(stitch) and all(info.option_docs.values())
    for name in ("iri-hlm", "iri-slm", "iri-dm", "iri-fula"):
        info = sp.metric_info(name)
        assert info.options == {**stitch, **IRI_DEFAULTS} and all(info.option_docs.values())
        assert {"iri_steps", "iri_cycle_steps", "iri_tuning", "iri_cache_dir"} <= set(info.options)
        assert len([k for k in info.options if k.startswith("iri_")]) <= 12
    permutation = {"permutations": 0, "alpha": 0.05, "groups": None, "permute": "within"}
    assert sp.metric_info("cka-rbf").options == {"max_samples": None, "threshold": 1.0, **permutation}
    assert sp.metric_info("cka-linear").options == {"max_samples": None, **permutation}
    assert sp.metric_info("cka-linear").needs == ("test",)


def test_declaration_forms(fresh_manager):
    class AsDict(_Open):
        options = {"k": 3}

    class AsTuples(_Open):
        options = [("k", 3, "a doc"), "flag"]

    class Broken(_Open):
        options = 42

    sp.register_metric(AsDict, "as-dict")
    sp.register_metric(AsTuples, "as-tuples")
    assert sp.metric_info("as-dict").options == {"k": 3}
    assert sp.metric_info("as-tuples").options == {"k": 3, "flag": None}
    assert sp.metric_info("as-tuples").option_docs == {"k": "a doc", "flag": ""}
    with pytest.raises(TypeError, match="'broken'.*`options` must be"):
        sp.register_metric(Broken, "broken")
    with pytest.raises(TypeError, match="unknown split"):
        sp.register_metric(type("BadNeeds", (_Open,), {"needs": ("val",)}), "bad-needs")
    assert "broken" not in sp.list_metrics() and "bad-needs" not in sp.list_metrics()


# --------------------------------------------------------------------------- refusal before any work


def test_mistyped_global_option_is_refused_before_any_work(data):
    a, b = tiny_cnn(seed=0), tiny_cnn(seed=1)
    before = snapshot(a), snapshot(b)
    calls = []
    a.block1.register_forward_hook(lambda *args: calls.append(1))
    state = torch.get_rng_state()
    with pytest.raises(sp.UnknownOption, match=r"unknown option 'epoch'.*did you mean 'epochs'\?") as refused:
        sp.compare(a, b, "block3", data, metrics=["stitch-slm"], options={"epoch": 1})
    assert "stitch-slm" in str(refused.value) and "weight_decay" in str(refused.value)  # the valid names
    assert calls == [] and torch.equal(torch.get_rng_state(), state)
    assert_unchanged(a, before[0])
    assert_unchanged(b, before[1])


def test_global_option_must_be_taken_by_a_selected_metric(data):
    a, b = tiny_cnn(), tiny_cnn(seed=1)
    with pytest.raises(sp.UnknownOption, match="'threshold'.*cka-linear"):
        sp.compare(a, b, "block1", data, metrics="cka-linear", options={"threshold": 2.0})
    report = sp.compare(a, b, "block1", data, metrics="cka-linear,cka-rbf", options={"threshold": 2.0})
    assert report["cka-rbf"].details["threshold"] == 2.0 and report["cka-rbf"].error is None
    assert "threshold" not in report["cka-linear"].details
    with pytest.raises(sp.UnknownOption, match="did you mean 'stitch-dm'"):
        sp.compare(a, b, "block1", data, metrics="cka-linear", options={"stitch-dn": {"lr": 0.1}})


def test_per_metric_option_its_metric_does_not_take(data):
    a, b = tiny_cnn(), tiny_cnn(seed=1)
    with pytest.raises(sp.UnknownOption, match=r"'lr' for metric 'cka-linear'.*takes: .*max_samples"):
        sp.compare(a, b, "block1", data, metrics="cka-linear", options={"cka-linear": {"lr": 0.1}})
    with pytest.raises(sp.UnknownOption, match="did you mean 'max_samples'"):
        sp.compare(a, b, "block1", data, metrics="cka-linear", options={"cka-linear": {"max_sample": 10}})
    with pytest.raises(TypeError, match=r"options\['cka-linear'\] must be a dict"):
        sp.compare(a, b, "block1", data, metrics="cka-linear", options={"cka-linear": 3})
    with pytest.raises(sp.UnknownOption, match="'epochz' for metric 'stitch-dm'"):  # checked even when not selected
        sp.compare(a, b, "block1", data, metrics="cka-linear", options={"stitch-dm": {"epochz": 1}})


def test_hooks_receive_exactly_their_declared_options(data, fresh_manager):
    _Recorder.seen.clear()
    _Open.seen.clear()
    sp.register_metric(_Recorder, "recorder")
    sp.register_metric(_Open, "open")
    sp.compare(tiny_cnn(), tiny_cnn(), "block1", data, metrics=["recorder", "open", "cka-linear"],
               options={"alpha": 0.9, "free": 1, "max_samples": 40, "recorder": {"max_samples": 30}, "open": {"x": 2}})
    assert _Recorder.seen == [{"alpha": 0.9, "max_samples": 30}]
    assert _Open.seen == [{"alpha": 0.9, "free": 1, "max_samples": 40, "x": 2}]
    sp.compare(tiny_cnn(), tiny_cnn(), "block1", data, metrics=["recorder"])
    assert _Recorder.seen[-1] == {"alpha": 0.5, "max_samples": None}  # the declared defaults
    with pytest.raises(sp.UnknownOption, match="'free'"):  # without the open metric nobody takes it
        sp.compare(tiny_cnn(), tiny_cnn(), "block1", data, metrics=["recorder"], options={"free": 1})


def test_stitch_options_reach_the_settings(data):
    a = tiny_cnn()
    row = sp.compare(a, a, "block2", data, metrics="stitch-slm",
                     options=parse_options(["epochs=1", "stitch_bn=yes", "stitch-slm.batch_size=16"]))["stitch-slm"]
    assert row.error is None, row.error
    assert (row.details["settings"]["epochs"], row.details["settings"]["stitch_bn"]) == (1, True)
    assert row.details["settings"]["batch_size"] == 16


def test_every_iri_option_name_is_accepted():
    from similarity_plugins.host.registry import options_for_metrics

    resolved = options_for_metrics(["iri-slm"], {k: v for k, v in IRI_DEFAULTS.items()})
    assert set(IRI_DEFAULTS) <= set(resolved["iri-slm"])
    with pytest.raises(sp.UnknownOption, match="did you mean 'iri_steps'"):
        options_for_metrics(["iri-slm"], {"iri_stepz": 3})


# --------------------------------------------------------------------------- needs


def test_needs_is_enforced_before_running(fresh_manager, data):
    ran = []

    class NeedsTrain:
        needs = ("train", "test")

        @sp.hookimpl
        def similarity(self):
            ran.append(1)
            return 1.0

    sp.register_metric(NeedsTrain, "needs-train")
    report = sp.compare(tiny_cnn(), tiny_cnn(), "block1", sp.Data(test=data.test), metrics=["needs-train", "cka-linear"])
    assert "needs-train needs the training split" in report["needs-train"].error and ran == []
    assert report["cka-linear"].error is None
    assert "test split" in sp.compare(tiny_cnn(), tiny_cnn(), "block1", sp.Data(), metrics="cka-linear")["cka-linear"].error
    sp.compare(tiny_cnn(), tiny_cnn(), "block1", data, metrics="needs-train")
    assert ran == [1]


# --------------------------------------------------------------------------- command line


def test_info_command(capsys):
    assert main(["info", "stitch-slm"]) == 0
    out = capsys.readouterr().out
    assert "similarity-plugins" in out and "soft label matching" in out
    assert "epochs" in out and "30" in out and "passes over the training set" in out
    assert "values: a positive integer\n" in out  # each option's type, in its rule's words
    assert main(["info", "cka-rbf", "--json"]) == 0
    import json

    info = json.loads(capsys.readouterr().out)
    assert info["options"]["threshold"]["default"] == 1.0 and info["needs"] == ["test"]
    assert info["options"]["threshold"]["values"] == "a positive number"
    assert main(["info", "cka-rbff"]) == 2
    assert "did you mean 'cka-rbf'" in capsys.readouterr().err


def test_mistyped_option_exits_2_naming_the_valid_one(capsys):
    code = main(["compare", "--front", "small-cnn", "--end", "small-cnn", "--layer", "block3", "--data", "digits",
                 "--metrics", "stitch-slm", "--option", "epoch=1", "--no-progress"])
    assert code == 2
    err = capsys.readouterr().err
    assert "unknown option 'epoch'" in err and "did you mean 'epochs'?" in err
    code = main(["compare", "--front", "small-cnn", "--end", "small-cnn", "--layer", "block3", "--data", "digits",
                 "--metrics", "cka-linear", "--option", "cka-linear.lr=0.1", "--no-progress"])
    assert code == 2 and "'lr' for metric 'cka-linear'" in capsys.readouterr().err


def test_rule_tables_check_and_convert_naming_the_option():
    """One mechanism for a family's value ranges: the stitch settings and the IRI tuning values use it."""
    from similarity_plugins.utils.value_rules import POSITIVE, POSITIVE_INT, Interval, check_rules

    assert POSITIVE_INT.check("epochs", 3.0) == 3 and type(POSITIVE_INT.check("epochs", 3.0)) is int
    assert type(POSITIVE.check("lr", 1)) is float
    for bad, message in ((2.5, "option epochs must be a positive integer, got 2.5"),
                         (0, "option epochs must be a positive integer, got 0"),
                         (True, "option epochs must be a positive integer, got True")):
        with pytest.raises(ValueError) as info:
            POSITIVE_INT.check("epochs", bad)
        assert str(info.value) == message
    for bad in (float("nan"), float("inf"), "0.1", None):
        with pytest.raises(ValueError, match="option lr must be a positive number"):
            POSITIVE.check("lr", bad)
    leak = Interval(float, 0, 1, closed="left")
    assert check_rules({"leak": 0, "name": "x"}, {"leak": leak}) == {"leak": 0.0, "name": "x"}
    with pytest.raises(ValueError, match=r"option leak must be a number in \[0, 1\), got 1.5"):
        check_rules({"leak": 1.5}, {"leak": leak})


def test_choice_rules_name_the_choices_and_a_close_match(data):
    from similarity_plugins.iri import generate_iris
    from similarity_plugins.utils.value_rules import OneOf

    rule = OneOf(("auto", "float32", "bfloat16"), "(auto: the hardware decides)")
    assert rule.check("precision", "float32") == "float32"
    with pytest.raises(ValueError, match=r"option precision must be one of auto, float32, bfloat16 \(auto: the "
                                         r"hardware decides\), got 'flaot32'; did you mean 'float32'"):
        rule.check("precision", "flaot32")
    with pytest.raises(ValueError, match="option fake_relu must be one of auto, last, none"):
        generate_iris(tiny_cnn(), "block1", torch.rand(2, 1, 16, 16), tuning={"fake_relu": "first"}, progress="never")
    with pytest.raises(ValueError, match="option precision must be one of auto, float32, bfloat16"):
        generate_iris(tiny_cnn(), "block1", torch.rand(2, 1, 16, 16), precision="half", progress="never")
    report = sp.compare(tiny_cnn(), tiny_cnn(seed=1), "block1", data, ["iri-hlm"],
                        options={"iri_precision": "bf16", "epochs": 1}, progress="never")
    assert "option iri_precision must be one of auto, float32, bfloat16" in report.results[0].error
