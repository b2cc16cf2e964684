"""Every option of every built-in metric declares its type (a value rule), and a value its rule refuses is refused
before the metric runs, with the rule's own message, in ``compare`` as on the command line.

The metrics and their options are enumerated from the registry, so a new metric or option is covered by itself."""

from __future__ import annotations

import pytest

import similarity_plugins as sp
from similarity_plugins.host.entrypoints import BUILTIN_PACKAGE
from similarity_plugins.host.values import check_option_values
from similarity_plugins.utils.value_rules import ValueRule
from tests.helpers.models import tiny_cnn


def _builtin() -> dict:
    return {name: sp.metric_info(name) for name in sp.list_metrics() if sp.metric_info(name).package == BUILTIN_PACKAGE}


def _refusal(name: str, rule: ValueRule) -> tuple:
    """A value ``rule`` refuses and the message it refuses it with."""
    bad = rule.invalid()
    with pytest.raises(ValueError) as refused:
        rule.check(name, bad)
    message = str(refused.value)
    assert message.startswith(f"option {name} must be {rule.words}, got "), message
    return bad, message


def test_every_builtin_option_declares_its_type_and_its_default_obeys_it():
    infos = _builtin()
    assert {"cka-linear", "rsa", "stitch-slm", "iri-slm"} <= set(infos)
    for name, info in infos.items():
        assert info.options and set(info.option_types) == set(info.options), name
        for option, rule in info.option_types.items():
            assert isinstance(rule, ValueRule), f"{name}: option {option} declares no type"
            rule.check(option, info.options[option])


def test_an_invalid_value_for_every_option_of_every_metric_gets_its_rules_message(data):
    """One ``compare`` per option position: each metric gets an invalid value for its option at that position (in its
    own ``options[metric]`` dict), and every row must be refused with that option's rule's message."""
    infos = _builtin()
    refusals = {(name, option): _refusal(option, rule) for name, info in infos.items()
                for option, rule in info.option_types.items()}
    front, end = tiny_cnn(), tiny_cnn(seed=1)
    for position in range(max(len(info.options) for info in infos.values())):
        chosen = {name: list(info.options)[position] for name, info in infos.items() if position < len(info.options)}
        options = {name: {option: refusals[name, option][0]} for name, option in chosen.items()}
        report = sp.compare(front, end, "block1", data, list(chosen), options=options, progress="never")
        for name, option in chosen.items():
            row, message = report[name], refusals[name, option][1]
            assert row.score is None and row.error == f"ValueError: {message}", (name, option, row.error)
            # the command line checks by the same rules before any work
            assert check_option_values(options[name], infos[name].option_types) == message


def test_a_plain_type_with_a_none_default_takes_none_and_refuses_other_types():
    from similarity_plugins.host.contract import Option, read_options

    class Auto(sp.MetricPlugin):
        options = [Option("k", None, "neighbours; None picks them", int)]

        @sp.hookimpl
        def similarity(self, options):
            return float(options["k"] or 0)

    (k,) = read_options(Auto.options, "auto-k")  # the None default is the metric's "not given", not a breach
    assert k.type.check("k", None) is None and k.type.check("k", 3) == 3
    with pytest.raises(ValueError, match="option k must be"):
        k.type.check("k", "three")
    with pytest.raises(TypeError, match="breaks its own type"):  # a default that is not None is still checked
        read_options([Option("k", "three", "", int)], "bad-k")
