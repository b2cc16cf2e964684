"""The IRI defaults are written once (iri.presets): the function, the metrics' options, the settings object and the
command line all read them from there."""

from __future__ import annotations

import dataclasses
import inspect

from similarity_plugins.iri import generate_iris
from similarity_plugins.iri.presets import PRESETS, RUN_DEFAULTS
from similarity_plugins.iri.service import IRI_DEFAULTS
from similarity_plugins.iri.settings import DEFAULT_OPTIMIZER, Settings


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


def test_the_iris_command_defaults_are_the_run_defaults():
    from similarity_plugins.cli.main import build_parser

    args = build_parser().parse_args(["iris", "--model", "m", "--layer", "l", "--data", "d", "--out", "o.npz"])
    for name, value in RUN_DEFAULTS.items():
        if name != "compile":  # a flag: off unless given
            assert getattr(args, name) == value, name
    assert args.compile is RUN_DEFAULTS["compile"] is False
