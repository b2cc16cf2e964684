"""Input fingerprints: different inputs give different digests, equal inputs equal ones."""

from __future__ import annotations

import hashlib

import pytest
import torch

import similarity_plugins as sp
from similarity_plugins.networks.data import split_digest
from similarity_plugins.utils.digest import update_inputs_digest


def _digest(x) -> str:
    h = hashlib.sha256()
    update_inputs_digest(h, "x", x)
    return h.hexdigest()


def test_text_batches_are_fingerprinted_by_their_strings():
    assert _digest(["ab", "c"]) != _digest(["a", "bc"])
    assert _digest(["ab", "c"]) == _digest(("ab", "c"))
    assert _digest({"image": torch.zeros(2, 3), "text": ["a", "b"]}) != _digest(
        {"image": torch.zeros(2, 3), "text": ["a", "c"]})
    with pytest.raises(TypeError, match="cannot fingerprint"):
        _digest([1, 2])


def test_two_text_splits_have_different_digests():
    one, two = sp.text_data(["one line", "another line"]), sp.text_data(["one line", "a third line"])
    assert split_digest(one.test) != split_digest(two.test)
    assert split_digest(one.test) == split_digest(sp.text_data(["one line", "another line"]).test)
    assert not split_digest(one.test).startswith("unreadable")
