"""Text batched by length: sorted by token count, bounded by padded tokens, rows and labels in the data's order."""

from __future__ import annotations

import torch

import similarity_plugins as sp
from similarity_plugins.adapters.text import TextDataset
from similarity_plugins.networks.activations import extract_layers
from similarity_plugins.networks.length_batches import TOKENS_PER_SAMPLE, length_plan
from tests.helpers.hf_models import byt5, tiny_gpt2, tiny_vit, zen_lines


def test_the_plan_sorts_bounds_and_holds_every_sample_once():
    counts = [7, 3, 50, 3, 9, 1, 7, 200, 4]
    plan = length_plan(counts, max_tokens=20)
    flat = [i for batch in plan for i in batch]
    assert sorted(flat) == list(range(len(counts)))
    assert [counts[i] for i in flat] == sorted(counts) and flat[:3] == [5, 1, 3]   # ties keep the data's order
    assert all(len(b) * max(counts[i] for i in b) <= 20 for b in plan if len(b) > 1)
    assert [7] in plan and [2] in plan   # longer than the bound: a batch of its own


def test_rows_and_labels_come_back_in_the_datas_order_with_little_padding():
    tok = byt5()
    short, long = "a few words", "a much longer text that takes many more tokens than the short one does"
    texts = [short if i % 2 else long for i in range(12)]
    texts = [f"{t} {i:02d}" for i, t in enumerate(texts)]   # two token counts, interleaved
    labels = list(range(12))
    wrapped = sp.hf(tiny_gpt2(len(tok)), tokenizer=tok)
    layers = sp.layers(wrapped)
    shapes = []
    handle = wrapped.wte.register_forward_pre_hook(lambda _m, args: shapes.append(tuple(args[0].shape)))
    try:
        *rows, y = extract_layers(wrapped, layers, TextDataset(texts, labels), batch_size=4)
    finally:
        handle.remove()
    assert y.tolist() == labels
    counts = [len(tok(t)["input_ids"]) for t in texts]
    assert sum(b * t for b, t in shapes) == sum(counts)   # each batch holds texts of one length: no padding
    assert all(b * t <= 4 * TOKENS_PER_SAMPLE for b, t in shapes)
    alone = extract_layers(wrapped, layers, TextDataset(texts, labels), batch_size=1)[:-1]
    for ours, one in zip(rows, alone):
        assert torch.allclose(ours, one, atol=1e-5, rtol=0)


def test_paired_data_a_text_model_reads_its_view_by_length_and_an_image_model_as_it_comes():
    tok = byt5()
    captions = zen_lines()[:10]
    images = torch.rand(10, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    labels = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3]
    paired = sp.paired_data({"image": images, "text": captions}, test_labels=labels).test
    text_model = sp.hf(tiny_gpt2(len(tok)), tokenizer=tok)
    *rows, y = extract_layers(text_model, ["h.1"], paired, batch_size=3)
    assert y.tolist() == labels
    assert torch.allclose(rows[0], extract_layers(text_model, ["h.1"], TextDataset(captions), batch_size=1)[0],
                          atol=1e-5, rtol=0)
    vit = sp.hf(tiny_vit())
    *rows, y = extract_layers(vit, sp.layers(vit)[-1:], paired, batch_size=3)
    assert y.tolist() == labels and rows[0].shape[0] == 10
