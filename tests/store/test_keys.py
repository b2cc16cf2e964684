"""A key covers everything that changes the rows: a wrapped model's tokenizer, processor, pooling and options, in
the store and in a grid's resume file."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import similarity_plugins as sp
from similarity_plugins.networks.activations import extract_layers
from similarity_plugins.networks.wrapped import reading_digest

transformers = pytest.importorskip("transformers")

from tests.helpers.hf_models import byt5, small_bpe, tiny_gpt2, tiny_vit, zen_lines  # noqa: E402


def _lines() -> list[str]:
    return zen_lines()[:8]


def _rows(model, data, batch_size: int = 4) -> np.ndarray:
    return extract_layers(model, ["h.1"], data.test, batch_size=batch_size)[0].numpy()


def test_the_same_weights_with_another_tokenizer_get_their_own_rows(tmp_path):
    gpt, data = tiny_gpt2(400), sp.text_data(_lines())
    first, second = sp.hf(gpt, tokenizer=byt5()), sp.hf(gpt, tokenizer=small_bpe(zen_lines()))
    store = sp.extract({"m": first}, ["h.1"], data, tmp_path, batch_size=4)
    assert store.entry("m", "h.1")["produced_by"]["tokenizer"]["vocabulary"] == len(byt5())
    store = sp.extract({"m": second}, ["h.1"], data, tmp_path, batch_size=4)
    assert store.extracted["m"] == {"forwarded": 8, "found": 0}
    np.testing.assert_array_equal(np.asarray(store.load("m", "h.1")), _rows(second, data))
    grid = sp.compare_grid({"m": first}, ["h.1"], data, ["cka-linear"], store=tmp_path)  # batches of 256
    np.testing.assert_array_equal(np.asarray(sp.Store(tmp_path).load("m", "h.1")), _rows(first, data, 256))
    assert grid.report.results[0].score == pytest.approx(1.0)


def test_reading_options_and_a_fast_tokenizers_call_state_enter_the_key_only_when_they_change_rows(tmp_path):
    gpt, data = tiny_gpt2(400), sp.text_data(_lines())
    bpe = small_bpe(zen_lines())
    plain = sp.hf(gpt, tokenizer=bpe)
    digests = {reading_digest(plain)}
    for changed in (sp.hf(gpt, tokenizer=bpe, exclude_special=True), sp.hf(gpt, tokenizer=bpe, max_length=3),
                    sp.hf(gpt, tokenizer=bpe, pooling="last"), sp.hf(gpt, tokenizer=bpe, padding_side="left")):
        digests.add(reading_digest(changed))
    assert len(digests) == 5
    store = sp.extract({"m": plain}, ["h.1"], data, tmp_path, batch_size=4)  # the call sets the backend's padding
    assert reading_digest(plain) in digests
    assert sp.extract({"m": plain}, ["h.1"], data, tmp_path, batch_size=4).extracted["m"]["forwarded"] == 0
    truncated = sp.hf(gpt, tokenizer=bpe, max_length=3)
    store = sp.extract({"m": truncated}, ["h.1"], data, tmp_path, batch_size=4)
    np.testing.assert_array_equal(np.asarray(store.load("m", "h.1")), _rows(truncated, data))


def test_an_image_processor_enters_the_key(tmp_path):
    vit = tiny_vit()
    one = transformers.ViTImageProcessor(size={"height": 16, "width": 16}, image_mean=[0.5] * 3, image_std=[0.5] * 3)
    two = transformers.ViTImageProcessor(size={"height": 16, "width": 16}, image_mean=[0.4] * 3, image_std=[0.5] * 3)
    images = sp.Data(test=torch.utils.data.TensorDataset(torch.rand(6, 3, 16, 16), torch.zeros(6, dtype=torch.long)))
    sp.extract({"v": sp.hf(vit, processor=one)}, ["layers.1"], images, tmp_path, batch_size=3)
    wrapped = sp.hf(vit, processor=two)
    store = sp.extract({"v": wrapped}, ["layers.1"], images, tmp_path, batch_size=3)
    assert store.extracted["v"]["forwarded"] == 6
    want = extract_layers(wrapped, ["layers.1"], images.test, batch_size=3)[0]
    np.testing.assert_array_equal(np.asarray(store.load("v", "layers.1")), want.reshape(6, -1).numpy())


def test_a_resume_file_is_never_read_for_another_tokenizer(tmp_path):
    gpt, data = tiny_gpt2(400), sp.text_data(_lines())
    resume = tmp_path / "cells.jsonl"
    first = {"a": sp.hf(gpt, tokenizer=byt5()), "b": sp.hf(tiny_gpt2(400, seed=1), tokenizer=byt5())}
    sp.compare_grid(first, ["h.1"], data, ["cka-linear"], pairs="across", resume=resume)
    other = {"a": sp.hf(gpt, tokenizer=small_bpe(zen_lines())), "b": first["b"]}
    with pytest.raises(ValueError, match=r"written for other .*reading"):
        sp.compare_grid(other, ["h.1"], data, ["cka-linear"], pairs="across", resume=resume)
