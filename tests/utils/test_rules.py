"""The shared value rules (utils.rules, and the rule objects of utils.value_rules) and that every reader of such a
value goes through them."""

from __future__ import annotations

import argparse
import ast
import math
from pathlib import Path

import numpy as np
import pytest

from similarity_plugins.cli.arguments import positive_int
from similarity_plugins.cli.loading import subset
from similarity_plugins.cli.options import parse_layer
from similarity_plugins.host.entrypoints import DISABLE_AUTOLOAD_ENV, autoload_disabled
from similarity_plugins.host.results import LayerPair, as_layer_pair
from similarity_plugins.measures.common import check_positive_int
from similarity_plugins.utils.rules import FALSE_WORDS, TRUE_WORDS, as_positive_int, split_layer_pair, truth_of
from similarity_plugins.utils.text import parse_value
from similarity_plugins.utils.value_rules import BOOLEAN, POSITIVE_INT, SAMPLE_LIMIT
from tests.helpers.repo import parsed

PACKAGE = Path(__file__).resolve().parents[2] / "similarity_plugins"


@pytest.mark.parametrize("word", [*TRUE_WORDS, " YES ", "On"])
def test_true_words_read_true_everywhere(word, monkeypatch):
    assert truth_of(word) is True
    assert BOOLEAN.check("flag", word) is True
    monkeypatch.setenv(DISABLE_AUTOLOAD_ENV, word)
    assert autoload_disabled()
    if not word.strip().isdigit():  # digits are numbers in the KEY=VALUE grammar (JSON first)
        assert parse_value(word) is True


@pytest.mark.parametrize("word", [*FALSE_WORDS, " No ", "OFF"])
def test_false_words_read_false_everywhere(word, monkeypatch):
    assert truth_of(word) is False
    assert BOOLEAN.check("flag", word) is False
    monkeypatch.setenv(DISABLE_AUTOLOAD_ENV, word)
    assert not autoload_disabled()
    if not word.strip().isdigit():
        assert parse_value(word) is False


@pytest.mark.parametrize("value", ["maybe", "", None, 2, "y"])
def test_other_values_are_no_truth(value):
    assert truth_of(value) is None
    with pytest.raises(ValueError, match="option flag must be true or false"):
        BOOLEAN.check("flag", value if value is not None else "none?")


@pytest.mark.parametrize("value,expected", [(1, 1), (5, 5), (5.0, 5), (np.int64(3), 3), (2**63, 2**63)])
def test_positive_int_accepts_whole_numbers(value, expected):
    assert as_positive_int(value) == expected and type(as_positive_int(value)) is int
    assert POSITIVE_INT.check("n", value) == expected
    assert check_positive_int(value, "dims", "SVCCA") == expected


@pytest.mark.parametrize("value", [0, -1, 1.5, True, False, "3", math.nan, math.inf, None])
def test_positive_int_refuses_the_rest_in_every_reader(value):
    assert as_positive_int(value) is None
    with pytest.raises(ValueError, match="must be a positive integer"):
        POSITIVE_INT.check("n", value)
    with pytest.raises(ValueError, match=r"SVCCA: dims must be an integer >= 1"):
        check_positive_int(value, "dims", "SVCCA")
    if value is not None:
        with pytest.raises(ValueError, match="positive whole number of samples"):
            SAMPLE_LIMIT.check("max_train", value)
        with pytest.raises(ValueError, match="sample limit must be a positive whole number"):
            subset([1, 2, 3], value)


def test_positive_int_minimum():
    assert as_positive_int(0, minimum=0) == 0 and as_positive_int(1, minimum=2) is None
    with pytest.raises(ValueError, match="must be an integer >= 2"):
        check_positive_int(1, "k", "kNN", minimum=2)


@pytest.mark.parametrize("text,expected", [("7", 7), (" 12 ", 12)])
def test_cli_type_reads_text_by_the_rule(text, expected):
    assert positive_int(text) == expected


@pytest.mark.parametrize("text", ["0", "-2", "1.5", "five", ""])
def test_cli_type_refuses_text_by_the_rule(text):
    with pytest.raises(argparse.ArgumentTypeError, match="positive whole number"):
        positive_int(text)


@pytest.mark.parametrize("text", ["layer1->layer2", "layer1:layer2", " layer1 -> layer2 ", "layer1 : layer2"])
def test_both_layer_pair_spellings_are_one_grammar(text):
    assert split_layer_pair(text) == ("layer1", "layer2")
    assert as_layer_pair(text) == LayerPair("layer1", "layer2")
    assert parse_layer(text) == ("layer1", "layer2")
    assert str(as_layer_pair(text)) == "layer1->layer2"


def test_a_single_layer_is_no_pair():
    assert split_layer_pair("features.3") is None
    assert as_layer_pair("features.3") == LayerPair("features.3", "features.3")
    assert parse_layer("features.3") == "features.3"


def _string_tuples(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            words = {e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
            yield words
        if isinstance(node, ast.Dict):
            yield {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}


def test_no_other_module_writes_a_list_of_true_words():
    """The words for true are written once (utils/rules.py); a second list would drift from it."""
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "rules.py" and path.parent.name == "utils":
            continue
        for words in _string_tuples(parsed(path)):
            if {"yes", "on"} <= {w.lower() for w in words} or {"true", "1"} <= words:
                offenders.append(str(path.relative_to(PACKAGE)))
    assert offenders == []


def test_no_other_module_splits_a_layer_pair():
    """The layer-pair separators are written once (utils/rules.py)."""
    offenders = [str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
                 if p.name != "rules.py" and ('split("->"' in p.read_text() or "in (\"->\"" in p.read_text())]
    assert offenders == []
