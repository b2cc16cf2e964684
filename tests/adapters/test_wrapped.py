"""The adapters implement the wrapped-model Protocol (`networks.wrapped`) that the runner and the services ask: `hf`
returns a `WrappedModel`, `preprocessed` a `ReadsSamples`, and a plain module is neither, whatever its attributes."""

from __future__ import annotations

import pytest

import similarity_plugins as sp
from similarity_plugins.networks.wrapped import ReadsSamples, WrappedModel, reading_digest, reading_settings, source_of
from tests.helpers.models import tiny_cnn

RECIPE = {"resize": 16, "crop": 16, "mean": (0.5,), "std": (0.25,)}


def test_a_plain_module_is_not_wrapped_whatever_its_attributes_are_called():
    model = tiny_cnn(seed=0)
    model.pooling, model.view, model.source, model.tokenizer = "avg", "image", {"hub_id": "x"}, object()
    assert not isinstance(model, (WrappedModel, ReadsSamples))
    assert reading_settings(model) == {} and source_of(model) is None
    assert reading_digest(model) == reading_digest(tiny_cnn(seed=1))


def test_a_preprocessed_model_declares_its_preprocessing_and_no_more():
    model = tiny_cnn(seed=0)
    wrapped = sp.preprocessed(model, RECIPE)
    assert isinstance(wrapped, ReadsSamples) and not isinstance(wrapped, WrappedModel)
    assert list(reading_settings(wrapped)) == ["sp_preprocessing"]
    assert reading_digest(wrapped) != reading_digest(model)
    assert reading_digest(wrapped) != reading_digest(sp.preprocessed(model, {**RECIPE, "std": (0.5,)}))


def test_an_hf_model_is_a_wrapped_model_that_says_what_it_reads_and_where_it_came_from():
    pytest.importorskip("transformers")
    from tests.helpers.hf_models import byt5, tiny_gpt2

    wrapped = sp.hf(tiny_gpt2(), tokenizer=byt5())
    assert isinstance(wrapped, WrappedModel) and wrapped.reads_text and not isinstance(wrapped.hf_model, WrappedModel)
    settings = reading_settings(wrapped)
    assert set(settings) == {"pooling", "exclude_special", "view", "padding_side", "max_length", "tokenizer"}
    assert (settings["pooling"], settings["view"], settings["padding_side"]) == ("mean", "text", "right")
    assert source_of(wrapped) == wrapped.source and source_of(wrapped) is not wrapped.source
    assert wrapped.provenance()["hf_class"] == "GPT2Model"
    assert wrapped.canonical_layers() == sp.layers(wrapped)
    assert wrapped.token_counts(["ab", "abcd"]) == [3, 5]  # ByT5: a byte each, and EOS
