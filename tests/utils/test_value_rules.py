"""The value rules (utils.value_rules): each checks a value and words itself from the same fields, so what the message
says is what the check does."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from similarity_plugins.utils.value_rules import (
    BOOLEAN,
    REFUSED,
    SAMPLE_LIMIT,
    TEXT,
    AnyOf,
    Array,
    Each,
    Interval,
    Keys,
    OneOf,
    OrNone,
    PathRule,
)


@pytest.mark.parametrize("closed", ["both", "left", "right", "neither"])
def test_an_interval_accepts_a_bound_exactly_when_its_words_show_it_closed(closed):
    rule = Interval(float, 0, 1, closed=closed)
    left, right = rule.words.split(" in ")[1][0] == "[", rule.words[-1] == "]"
    assert (rule.read(0.0) is not REFUSED) is left and (rule.read(1.0) is not REFUSED) is right
    assert rule.read(0.5) == 0.5 and rule.read(-0.1) is REFUSED and rule.read(1.1) is REFUSED
    with pytest.raises(ValueError, match=rf"option p must be a number in .0, 1., got {rule.invalid()!r}"):
        rule.check("p", rule.invalid())


def test_an_integer_interval_reads_whole_numbers_and_words_one_sided_bounds():
    assert Interval(int, 1).words == "a positive integer" and Interval(int, 1).check("n", 5.0) == 5
    assert Interval(int, 0, note="(0: off)").words == "an integer >= 0 (0: off)"
    assert Interval(float, 1, what="growth factor").words == "a growth factor >= 1"
    assert Interval(float, hi=2, closed="neither").words == "a number < 2"
    for bad in (2.5, True, "3", math.nan, math.inf, None):
        with pytest.raises(ValueError, match="option n must be a positive integer"):
            Interval(int, 1).check("n", bad)
    assert Interval(float, finite=False).check("x", math.inf) == math.inf and Interval(float, finite=False).words == \
        "a number"


def test_choices_read_their_aliases_and_suggest_a_close_one():
    rule = OneOf(("least-squares", "identity"), aliases={"ls": "least-squares"})
    assert rule.check("init", "LS") == "least-squares" and rule.check("init", "Identity") == "identity"
    with pytest.raises(ValueError, match=r"option init must be one of least-squares, identity, got 'identiy'; did you "
                                         r"mean 'identity'\?"):
        rule.check("init", "identiy")
    assert OneOf(("a",)).read(np.zeros(3)) is REFUSED  # an array is no choice (and raises nothing)


def test_rules_made_of_rules_word_and_read_their_parts():
    dims = OrNone(AnyOf(Interval(int, 1), Each(Interval(int, 1), length=2)), "keep the variance")
    assert dims.check("dims", None) is None and dims.check("dims", 3) == 3 and dims.check("dims", [2, 3.0]) == (2, 3)
    assert dims.words == "a positive integer or a list of 2, each a positive integer, or none (keep the variance)"
    with pytest.raises(ValueError, match=r"option dims must be .*, got \[2, 3, 4\]"):
        dims.check("dims", [2, 3, 4])
    assert Each(Interval(float, 0), single=True).check("m", 0.5) == (0.5,)
    assert SAMPLE_LIMIT.check("max_samples", None) is None and BOOLEAN.check("flag", "Off") is False
    assert TEXT.check("name", "x") == "x"
    tuning = Keys({"lr": Interval(float, 0, closed="neither"), "fold_bn": BOOLEAN}, "tuning values")
    assert tuning.check("tuning", {"fold_bn": "yes"}) == {"fold_bn": True}
    with pytest.raises(ValueError, match=r"; lr must be a positive number, got -1$"):
        tuning.check("tuning", {"lr": -1})
    with pytest.raises(ValueError, match=r"; unknown key 'lrr'; did you mean 'lr'\?"):
        tuning.check("tuning", {"lrr": 1})


def test_arrays_and_paths(tmp_path):
    perms = Array(2, "a (K, N) integer array", integers=True)
    assert perms.read(torch.zeros(2, 3, dtype=torch.long)) is not REFUSED and perms.read([[0.5]]) is REFUSED
    with pytest.raises(ValueError, match=r"got an array of shape \(2, 3\) \(float64\)"):
        perms.check("permutations", np.zeros((2, 3)))
    folder = PathRule(folder=True)
    (tmp_path / "f").write_text("")
    assert folder.check("cache_dir", tmp_path) == tmp_path
    with pytest.raises(ValueError, match=r"must be the path of a folder, got '.*f' \('.*f' is a file\)"):
        folder.check("cache_dir", str(tmp_path / "f"))
    with pytest.raises(ValueError, match=r"an empty path: an unset variable"):
        folder.check("cache_dir", " ")
