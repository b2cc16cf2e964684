"""The IRI defaults are decided once (iri.presets): the metrics' options and the command line read them from there;
the signatures of the function and the settings objects show them as literals (what the reference prints), held
equal to that table here."""

from __future__ import annotations

import dataclasses
import inspect

from similarity_plugins.iri import generate_iris
from similarity_plugins.iri.presets import PRESETS, RUN_DEFAULTS
from similarity_plugins.iri.service import IRI_DEFAULTS
from similarity_plugins.iri.settings import AUTO, DEFAULT_OPTIMIZER, RunOptions, Settings, make_settings


def test_generate_iris_and_the_iri_options_take_the_run_defaults():
    signature = inspect.signature(generate_iris).parameters
    for name, value in RUN_DEFAULTS.items():
        assert signature[name].default == value, name
        assert IRI_DEFAULTS[f"iri_{name}"] == value, name


def test_settings_defaults_are_the_default_optimizers_preset():
    fields = {f.name: f.default for f in dataclasses.fields(Settings)}
    preset = PRESETS[DEFAULT_OPTIMIZER]
    shared = set(fields) & set(preset) - {"optimizer", "fake_relu"}  # a bare front function has no ReLU modules
    assert shared >= {"lr", "cycle_steps", "beta1", "beta2", "eps", "history", "relu_leak", "fold_bn"}
    assert {k: fields[k] for k in shared} == {k: preset[k] for k in shared}
    assert (fields["steps"], fields["tol"], fields["init"]) == (RUN_DEFAULTS["steps"], RUN_DEFAULTS["tol"],
                                                                RUN_DEFAULTS["init"])
    assert fields["optimizer"] == fields["preset"] == DEFAULT_OPTIMIZER
    assert {f.name: f.default for f in dataclasses.fields(RunOptions)}["batch_size"] == RUN_DEFAULTS["batch_size"]


def test_settings_of_and_make_settings_take_the_same_defaults():
    of = inspect.signature(Settings.of).parameters
    assert of["optimizer"].default == DEFAULT_OPTIMIZER
    assert {k: of[k].default for k in ("steps", "tol", "init")} == {k: RUN_DEFAULTS[k] for k in ("steps", "tol", "init")}
    assert inspect.signature(make_settings).parameters["optimizer"].default == AUTO == RUN_DEFAULTS["optimizer"]


def test_the_iris_command_defaults_are_the_run_defaults():
    from similarity_plugins.cli.main import build_parser

    args = build_parser().parse_args(["iris", "--model", "m", "--layer", "l", "--data", "d", "--out", "o.npz"])
    for name, value in RUN_DEFAULTS.items():
        if name != "compile":  # a flag: off unless given
            assert getattr(args, name) == value, name
    assert args.compile is RUN_DEFAULTS["compile"] is False
